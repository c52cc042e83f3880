"""ChainerMN's MNIST recipe as its users write it, with no chainermn-rt in it: a communicator
from ``chainermn.create_communicator``, MNIST from ``chainer.datasets.get_mnist()`` on rank 0
(Chainer's own files under ``$CHAINER_DATASET_ROOT``: nothing is downloaded where they are),
``scatter_dataset``, a multi-node optimizer and evaluator, and Chainer's Trainer. Rank 0
prints each epoch's log entry as a JSON line and every rank its parameters' digest."""

from __future__ import annotations

import argparse
import hashlib
import json

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
from chainer import training
from chainer.training import extensions


class MLP(chainer.Chain):
    def __init__(self, units: int) -> None:
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(784, units)
            self.l2 = L.Linear(units, 10)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batchsize", type=int, default=50)
    parser.add_argument("--units", type=int, default=100)
    args = parser.parse_args()

    comm = chainermn.create_communicator("naive")
    model = L.Classifier(MLP(args.units))
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
    optimizer.setup(model)
    train, test = chainer.datasets.get_mnist() if comm.rank == 0 else (None, None)
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=0)
    test = chainermn.scatter_dataset(test, comm, shuffle=True, seed=0)
    updater = training.StandardUpdater(
        chainer.iterators.SerialIterator(train, args.batchsize, shuffle=False), optimizer)
    trainer = training.Trainer(updater, (args.epochs, "epoch"), out="result")
    evaluator = extensions.Evaluator(
        chainer.iterators.SerialIterator(test, args.batchsize, repeat=False, shuffle=False),
        model)
    trainer.extend(chainermn.create_multi_node_evaluator(evaluator, comm))
    if comm.rank == 0:
        trainer.extend(extensions.LogReport())
    trainer.run()
    if comm.rank == 0:
        for entry in trainer.get_extension("LogReport").log:
            print(json.dumps(entry), flush=True)
    digest = hashlib.sha256()
    for _, param in sorted(model.namedparams()):
        digest.update(param.array.tobytes())
    print(f"rank {comm.rank} parameters sha256 {digest.hexdigest()}", flush=True)


if __name__ == "__main__":
    main()
