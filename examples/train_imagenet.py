"""Data-parallel ResNet-50 training (the ChainerMN paper's workload) on CPUs or GPUs, with the
standard ImageNet recipe.

Data (examples/imagenet_data.py): ``--train``/``--val`` name shard folders written by
``chainermn-rt data pack`` (each rank reads only its own shards; staged to node-local storage
when the job script was rendered with ``--stage``), or class-folder trees / ``PATH LABEL``
lists (one file per image: small data sets only); ``--synthetic`` makes images up.
Training: random-resized crop (area 8-100 %, aspect 3/4-4/3) + flip; validation: short side
``--val-resize`` + centre crop; both decode only the crop's region (chainermn_rt.data.jpeg) in
``--workers`` processes and hand uint8 over; the float conversion and ImageNet's per-channel
normalisation run on the device. Validation counts every image once across the ranks.
``--decoder dali`` decodes with NVIDIA DALI instead: on the rank's GPU, the batch handed to CuPy
without a copy (chainermn_rt.data.dali; docs/data.md).

    chainermn-rt data pack /data/imagenet/train /lustre/shards/train --short-side 320
    chainermn-rt data pack /data/imagenet/val /lustre/shards/val
    srun --mpi=pmix python examples/train_imagenet.py --train /lustre/shards/train \\
        --val /lustre/shards/val --batchsize 32 --iterations 100000
    mpirun -np 2 python examples/train_imagenet.py --synthetic --insize 64 --iterations 20

Prints, per epoch, the images/s and the share of step time spent waiting for data; ends with
each rank's parameter digest and the throughput (images/s).
"""

from __future__ import annotations

import argparse
import sys

import chainer
import chainer.links as L
import chainermn
import numpy
from common import add_common_arguments, finish, make_trainer, run
from imagenet_data import DataRate, ExactEvaluator, SyntheticImages, loaders
from models import ResNet50

import chainermn_rt
from chainermn_rt.data.batch import to_device


def synthetic(args, comm):
    """(training iterator, validation extension) over generated images."""
    n_val = max(args.n_synthetic // 8, comm.size)
    train = val = None
    if comm.rank == 0:
        train = SyntheticImages(args.n_synthetic, args.n_class, args.insize)
        val = SyntheticImages(n_val, args.n_class, args.insize)
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=args.seed)
    val = chainermn.scatter_dataset(val, comm, shuffle=True, seed=args.seed)
    return (chainer.iterators.SerialIterator(train, args.batchsize),
            chainer.iterators.SerialIterator(val, args.batchsize, repeat=False, shuffle=False))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, batchsize=32, iterations=100)
    data = parser.add_argument_group("data")
    data.add_argument("--synthetic", action="store_true", help="generated images, no files")
    data.add_argument("--n-synthetic", type=int, default=1024, help="synthetic training images")
    data.add_argument("--train", help="training shard folder, class-folder tree or list file")
    data.add_argument("--val", help="validation shard folder, class-folder tree or list file")
    data.add_argument("--root", default="", help="prefix for the list files' paths")
    data.add_argument("--insize", type=int, default=224, help="crop size")
    data.add_argument("--val-resize", type=int, default=256,
                      help="validation: short side before the centre crop")
    data.add_argument("--n-class", type=int, default=1000)
    data.add_argument("--workers", type=int, default=None,
                      help="decoding processes per rank (0: in the training process; default: "
                           "the rank's CPUs less one)")
    data.add_argument("--decoder", choices=("turbo", "dali"), default="turbo",
                      help="turbo: libjpeg-turbo in --workers processes (default); dali: NVIDIA "
                           "DALI on the rank's GPU (its CPU-only mode on CPUs; pyproject's dali "
                           "extra), --workers its threads")
    data.add_argument("--shuffle-buffer", type=int, default=1000,
                      help="samples each rank holds to shuffle its shards' stream")
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args(argv)

    comm, device = chainermn_rt.setup(args.communicator)
    numpy.random.seed(args.seed)
    if args.synthetic:
        train, val = synthetic(args, comm)
    else:
        train, val, _ = loaders(args, comm, device)
    if comm.rank == 0:
        print(f"{comm.size} ranks, communicator {type(comm).__name__}, device {device}, "
              f"batch {args.batchsize} per rank, crop {args.insize}, "
              f"loader workers {getattr(train, 'workers', 0)}"
              + ("" if args.synthetic else f", decoder {args.decoder}"), flush=True)
    model = L.Classifier(ResNet50(args.n_class))
    model.to_device(device)
    optimizer = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=args.lr, momentum=0.9), comm)
    optimizer.setup(model)
    optimizer.add_hook(chainer.optimizer_hooks.WeightDecay(1e-4))

    numpy.random.seed(args.seed + comm.rank)  # different batches per rank (synthetic)
    updater = chainer.training.StandardUpdater(train, optimizer, converter=to_device,
                                               device=device)
    if args.synthetic:
        evaluator = chainermn.create_multi_node_evaluator(chainer.training.extensions.Evaluator(
            val, model, converter=to_device, device=device), comm)
    else:
        evaluator = ExactEvaluator(val, model, comm, device)
    trainer = make_trainer(args, comm, updater, evaluator)
    # batch-norm statistics are not parameters: average them before each evaluation
    trainer.extend(chainermn.extensions.AllreducePersistent(model, comm),
                   trigger=(args.log_every, "iteration"), priority=300)
    if not args.synthetic:
        trainer.extend(DataRate(train, comm, args.batchsize * comm.size), trigger=(1, "epoch"))
    seconds, done = run(trainer, comm)
    finish(comm, model, seconds, args.batchsize * comm.size, done)
    for loader in (train, val):
        if hasattr(loader, "finalize"):
            loader.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
