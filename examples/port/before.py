"""A single-process Chainer script: an MLP on generated data (compare after.py)."""
import chainer
import chainer.links as L
import numpy
from chainer.training import extensions

numpy.random.seed(0)
x = numpy.random.rand(2000, 784).astype(numpy.float32)
t = (x[:, :392].sum(axis=1) > x[:, 392:].sum(axis=1)).astype(numpy.int32)
train = chainer.datasets.TupleDataset(x[:1600], t[:1600])
test = chainer.datasets.TupleDataset(x[1600:], t[1600:])

model = L.Classifier(L.Linear(784, 10))
device = chainer.get_device("@numpy")
model.to_device(device)
optimizer = chainer.optimizers.Adam(alpha=0.01)
optimizer.setup(model)

train_iter = chainer.iterators.SerialIterator(train, 50)
test_iter = chainer.iterators.SerialIterator(test, 50, repeat=False, shuffle=False)
updater = chainer.training.StandardUpdater(train_iter, optimizer, device=device)
trainer = chainer.training.Trainer(updater, (3, "epoch"), out="result")
trainer.extend(extensions.Evaluator(test_iter, model, device=device))
trainer.extend(extensions.LogReport())
trainer.extend(extensions.PrintReport(["epoch", "main/loss", "validation/main/accuracy"]))
trainer.run()
