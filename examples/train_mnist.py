"""Data-parallel MLP training on MNIST-shaped data with ChainerMN (CPU or GPUs).

The data are generated in-process (no download): 28x28 images of ten digit
classes, each class a fixed random stroke pattern, shifted and noisy per sample.
Rank 0 makes the data set and scatters it; every rank trains on its shard and
gradients are averaged by the communicator ``chainermn_rt.setup()`` picks.

    mpirun -np 2 python examples/train_mnist.py --iterations 200
    srun --mpi=pmix python examples/train_mnist.py --snapshot-every 100
    mpirun -np 2 python examples/train_mnist.py      # goes on from result/snapshots/iter_*

Ends with each rank's parameter digest and the throughput (images/s).
"""

from __future__ import annotations

import argparse
import sys

import chainer
import chainer.links as L
import chainermn
import numpy
from common import add_common_arguments, finish, make_trainer, run
from models import MLP

import chainermn_rt


def digits(n: int, seed: int) -> chainer.datasets.TupleDataset:
    """``n`` labelled 784-vectors in [0, 1]: class template, random shift, noise."""
    rng = numpy.random.default_rng(seed)
    templates = (numpy.random.default_rng(12345).random((10, 28, 28)) > 0.8).astype(numpy.float32)
    labels = rng.integers(0, 10, n).astype(numpy.int32)
    shifts = rng.integers(-2, 3, (n, 2))
    images = numpy.stack([numpy.roll(templates[c], tuple(s), axis=(0, 1))
                          for c, s in zip(labels, shifts, strict=True)])
    images += rng.normal(0, 0.3, images.shape).astype(numpy.float32)
    return chainer.datasets.TupleDataset(
        numpy.clip(images, 0, 1).reshape(n, 784).astype(numpy.float32), labels)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, batchsize=100, iterations=600)
    parser.add_argument("--unit", "-u", type=int, default=1000, help="hidden units")
    parser.add_argument("--n-train", type=int, default=60000)
    parser.add_argument("--n-test", type=int, default=10000)
    args = parser.parse_args(argv)

    comm, device = chainermn_rt.setup(args.communicator)
    if comm.rank == 0:
        print(f"{comm.size} ranks, communicator {type(comm).__name__}, device {device}, "
              f"batch {args.batchsize} per rank", flush=True)
    chainer.global_config.autotune = True
    numpy.random.seed(args.seed)  # the same initial weights on every rank, then broadcast
    model = L.Classifier(MLP(args.unit, 10))
    model.to_device(device)
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
    optimizer.setup(model)

    train, test = (digits(args.n_train, args.seed + 1), digits(args.n_test, args.seed + 2)) \
        if comm.rank == 0 else (None, None)
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=args.seed)
    test = chainermn.scatter_dataset(test, comm, shuffle=True, seed=args.seed)
    train_iter = chainer.iterators.SerialIterator(train, args.batchsize)
    test_iter = chainer.iterators.SerialIterator(test, args.batchsize, repeat=False,
                                                 shuffle=False)
    updater = chainer.training.StandardUpdater(train_iter, optimizer, device=device)
    evaluator = chainermn.create_multi_node_evaluator(
        chainer.training.extensions.Evaluator(test_iter, model, device=device), comm)
    trainer = make_trainer(args, comm, updater, evaluator)
    seconds, done = run(trainer, comm)
    finish(comm, model, seconds, args.batchsize * comm.size, done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
