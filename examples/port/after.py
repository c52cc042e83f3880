"""The same script, data-parallel with ChainerMN: run with mpirun or srun (see before.py)."""
import chainer
import chainer.links as L
import chainermn
import numpy
from chainer.training import extensions

import chainermn_rt

comm, device = chainermn_rt.setup()   # launcher, MPI check, GPU, communicator, abort hook
numpy.random.seed(0)
x = numpy.random.rand(2000, 784).astype(numpy.float32)
t = (x[:, :392].sum(axis=1) > x[:, 392:].sum(axis=1)).astype(numpy.int32)
train = chainer.datasets.TupleDataset(x[:1600], t[:1600])
test = chainer.datasets.TupleDataset(x[1600:], t[1600:])
train = chainermn.scatter_dataset(train, comm, shuffle=True)   # each rank: its shard
test = chainermn.scatter_dataset(test, comm, shuffle=True)

model = L.Classifier(L.Linear(784, 10))
model.to_device(device)
optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(alpha=0.01), comm)
optimizer.setup(model)

train_iter = chainer.iterators.SerialIterator(train, 50)
test_iter = chainer.iterators.SerialIterator(test, 50, repeat=False, shuffle=False)
updater = chainer.training.StandardUpdater(train_iter, optimizer, device=device)
trainer = chainer.training.Trainer(updater, (3, "epoch"), out="result")
evaluator = extensions.Evaluator(test_iter, model, device=device)
trainer.extend(chainermn.create_multi_node_evaluator(evaluator, comm))
if comm.rank == 0:
    trainer.extend(extensions.LogReport())
    trainer.extend(extensions.PrintReport(["epoch", "main/loss", "validation/main/accuracy"]))
trainer.run()
