"""What both examples share: argument helpers, the trainer's reporting, the end-of-run lines.

Example::

    trainer = make_trainer(args, comm, updater, evaluator)   # reports on rank 0 only
    trainer.run()
    seconds, done = run(trainer, comm)
    finish(comm, model, seconds, args.batchsize * comm.size, done)
"""

from __future__ import annotations

import hashlib
import time

import chainer
from chainer.training import extensions

import chainermn_rt


def add_common_arguments(parser, *, batchsize: int, iterations: int) -> None:
    parser.add_argument("--batchsize", "-b", type=int, default=batchsize,
                        help="images per rank and iteration")
    parser.add_argument("--iterations", type=int, default=iterations,
                        help="stop after this many iterations")
    parser.add_argument("--communicator", default="auto",
                        help="auto (pure_nccl on GPUs, else chunked), chunked, naive, ...")
    parser.add_argument("--out", "-o", default="result", help="logs and snapshots")
    parser.add_argument("--log-every", type=int, default=10, help="iterations per log entry")
    parser.add_argument("--snapshot-every", type=int, default=0,
                        help="write a snapshot set to OUT/snapshots every N iterations (0: only "
                             "when the job's time-limit or preemption signal comes)")
    parser.add_argument("--keep", type=int, default=2, help="snapshot sets to keep")
    parser.add_argument("--resume", default="",
                        help="snapshot set to resume from (default: the newest complete one in "
                             "OUT/snapshots, if any)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--seed", type=int, default=0)


def make_trainer(args, comm, updater, evaluator):
    """A trainer with ``evaluator`` (an extension that evaluates across the ranks), logging and
    progress on rank 0, resumable from its snapshots (chainermn_rt.resumable), its steps
    recorded when the job asks (chainermn_rt.timeline: ``render --timeline``)."""
    trainer = chainer.training.Trainer(updater, (args.iterations, "iteration"), out=args.out)
    every = (args.log_every, "iteration")
    trainer.extend(evaluator, trigger=every)
    if comm.rank == 0:
        trainer.extend(extensions.LogReport(trigger=every))
        trainer.extend(extensions.PrintReport(
            ["epoch", "iteration", "main/loss", "validation/main/loss", "main/accuracy",
             "validation/main/accuracy", "elapsed_time"]), trigger=every)
        if not args.no_progress:
            trainer.extend(extensions.ProgressBar(update_interval=1))
    chainermn_rt.resumable(trainer, comm, every=args.snapshot_every, keep=args.keep,
                           resume=args.resume or None)
    chainermn_rt.timeline(trainer, comm)
    return trainer


def run(trainer, comm) -> tuple[float, int]:
    """Train; return the slowest rank's seconds (evaluation included) and the iterations run."""
    from mpi4py import MPI

    first = trainer.updater.iteration
    comm.mpi_comm.Barrier()
    start = time.perf_counter()
    trainer.run()
    seconds = comm.mpi_comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    return seconds, trainer.updater.iteration - first


def params_digest(model) -> str:
    """sha256 over every parameter's name, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for name, param in sorted(model.namedparams()):
        array = chainer.backends.cuda.to_cpu(param.array)
        digest.update(f"{name}:{array.dtype}:{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def finish(comm, model, seconds: float, images_per_iteration: int, done: int) -> None:
    """Print the parameter digest of every rank and, on rank 0, the throughput."""
    digests = comm.gather_obj(params_digest(model))
    if comm.rank == 0:
        for rank, digest in enumerate(digests):
            print(f"rank {rank} parameters sha256 {digest}", flush=True)
        images = images_per_iteration * done
        print(f"throughput: {images / seconds:.1f} images/s ({images} images in "
              f"{seconds:.2f} s, {comm.size} ranks)", flush=True)
