"""Data-parallel ResNet-50 training (the ChainerMN paper's workload) on CPUs or GPUs.

Data: ``--synthetic`` (generated on the fly, no files), or an ImageNet-style folder
(``ROOT/<class>/<image>``) or list file (``PATH LABEL`` lines, as in Chainer's
ImageNet example) with ``--train`` and ``--val``. Images are mean-subtracted
(``--mean FILE.npy`` or the mean of the training images) and cropped to
``--insize``: random crops and flips for training, centre crops for validation.

    mpirun -np 2 python examples/train_imagenet.py --synthetic --insize 64 --iterations 20
    srun --mpi=pmix python examples/train_imagenet.py --train train.txt --val val.txt \\
        --root /data/imagenet --loaderjob 4 --batchsize 32

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
from imagenet_data import CroppedImages, SyntheticImages, compute_mean, image_list
from models import ResNet50

import chainermn_rt
from chainermn_rt.errors import UserError


def datasets(args, comm):
    """(train, val) on rank 0, None elsewhere; the caller scatters them."""
    if comm.rank != 0:
        return None, None
    if args.synthetic:
        size = args.image_size or args.insize + 32
        return (SyntheticImages(args.n_synthetic, args.n_class, size, args.insize),
                SyntheticImages(max(args.n_synthetic // 8, comm.size), args.n_class, size,
                                args.insize, random=False))
    if not (args.train and args.val):
        raise UserError("--train and --val are required without --synthetic")
    train, val = image_list(args.train, args.root), image_list(args.val, args.root)
    labels = {label for _, label in train + val}
    if max(labels) >= args.n_class:
        raise UserError(f"label {max(labels)} in the data; allowed: 0..{args.n_class - 1} "
                        "(set --n-class)")
    mean = numpy.load(args.mean) if args.mean else compute_mean(train)
    return CroppedImages(train, mean, args.insize), CroppedImages(val, mean, args.insize, False)


def iterator(dataset, args, train: bool):
    if args.loaderjob:
        return chainer.iterators.MultiprocessIterator(
            dataset, args.batchsize, repeat=train, shuffle=train, n_processes=args.loaderjob)
    return chainer.iterators.SerialIterator(dataset, args.batchsize, repeat=train, shuffle=train)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, batchsize=32, iterations=100)
    data = parser.add_argument_group("data")
    data.add_argument("--synthetic", action="store_true", help="generated images, no files")
    data.add_argument("--n-synthetic", type=int, default=1024, help="synthetic training images")
    data.add_argument("--image-size", type=int, default=0,
                      help="synthetic image side (default: insize + 32)")
    data.add_argument("--train", help="training folder or list file")
    data.add_argument("--val", help="validation folder or list file")
    data.add_argument("--root", default="", help="prefix for the list files' paths")
    data.add_argument("--mean", help="mean image (.npy, 3xHxW); default: computed")
    data.add_argument("--insize", type=int, default=224, help="crop size")
    data.add_argument("--n-class", type=int, default=1000)
    data.add_argument("--loaderjob", "-j", type=int, default=0,
                      help="loader processes per rank (0: load in the training process)")
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args(argv)

    comm, device = chainermn_rt.setup(args.communicator)
    if comm.rank == 0:
        print(f"{comm.size} ranks, communicator {type(comm).__name__}, device {device}, "
              f"batch {args.batchsize} per rank, crop {args.insize}", flush=True)
    numpy.random.seed(args.seed)
    model = L.Classifier(ResNet50(args.n_class))
    model.to_device(device)
    optimizer = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=args.lr, momentum=0.9), comm)
    optimizer.setup(model)
    optimizer.add_hook(chainer.optimizer_hooks.WeightDecay(1e-4))

    train, val = datasets(args, comm)
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=args.seed)
    val = chainermn.scatter_dataset(val, comm, shuffle=True, seed=args.seed)
    numpy.random.seed(args.seed + comm.rank)  # different crops and batches per rank
    updater = chainer.training.StandardUpdater(iterator(train, args, True), optimizer,
                                               device=device)
    evaluator = chainer.training.extensions.Evaluator(iterator(val, args, False), model,
                                                      device=device)
    trainer = make_trainer(args, comm, updater, evaluator)
    # batch-norm statistics are not parameters: average them before each evaluation
    trainer.extend(chainermn.extensions.AllreducePersistent(model, comm),
                   trigger=(args.log_every, "iteration"), priority=300)
    seconds, done = run(trainer, comm)
    finish(comm, model, seconds, args.batchsize * comm.size, done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
