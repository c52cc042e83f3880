"""examples/train_mnist.py with its steps recorded (chainermn_rt.timeline) and faults to inject
(tests/test_timeline_mpi.py).

``--slow-rank R [R ...] --slow-cgroup DIR``: each rank R moves itself into the CPU cgroup DIR,
whose quota the test set (tests/cpu_quota.py): the kernel slows them, for real. ``--one-cpu
N``: every rank runs on CPU N, so whatever else loads the machine loads all ranks alike.
``--skew-rank R --skew-seconds S``: rank R's wall clock reads S seconds ahead (an injected clock
offset the timeline must correct).
``--fail-at N``: rank 1 raises in its N-th forward pass (a crash). ``--metrics-every S``: rank 0
looks at the ranks' steps every S seconds; ``--metrics-copy DIR``: each metrics file it writes
is also kept as DIR/<n>.prom (the job's own is removed at its end). Every other argument goes to
train_mnist; the timeline is on when CHAINERMN_RT_TIMELINE names a folder.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import functools

import chainer.links as L
import train_mnist

import chainermn_rt
from chainermn_rt.timeline import clock, metrics

parser = argparse.ArgumentParser()
parser.add_argument("--slow-rank", type=int, nargs="+", default=[])
parser.add_argument("--slow-cgroup", type=Path)
parser.add_argument("--one-cpu", type=int)
parser.add_argument("--skew-rank", type=int)
parser.add_argument("--skew-seconds", type=float, default=0.0)
parser.add_argument("--fail-at", type=int)
parser.add_argument("--metrics-every", type=float, default=15.0)
parser.add_argument("--metrics-copy", type=Path)
args, rest = parser.parse_known_args()
chainermn_rt.timeline = functools.partial(chainermn_rt.timeline, metrics_every=args.metrics_every)

if args.metrics_copy is not None:
    write = metrics.write

    def write_and_keep(folder, job, text):
        kept = len(list(args.metrics_copy.glob("*.prom")))
        (args.metrics_copy / f"{kept:04d}.prom").write_text(text)
        return write(folder, job, text)

    metrics.write = write_and_keep
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("SLURM_PROCID") or 0)
if rank in args.slow_rank:
    (args.slow_cgroup / "cgroup.procs").write_text(str(os.getpid()))

if rank == args.skew_rank:
    class SkewedTime:
        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def time_ns():
            return time.time_ns() + int(args.skew_seconds * 1e9)

    clock.time = SkewedTime()

calls = {"n": 0}


class Classifier(L.Classifier):
    def forward(self, *xs):
        calls["n"] += 1
        if calls["n"] == 1 and args.one_cpu is not None:  # after setup(), which may bind
            os.sched_setaffinity(0, {args.one_cpu})
        if args.fail_at is not None and rank == 1 and calls["n"] >= args.fail_at:
            raise RuntimeError(f"injected failure in iteration {calls['n']}")
        return super().forward(*xs)


train_mnist.L = type("L", (), {"Classifier": Classifier})
sys.exit(train_mnist.main(rest))
