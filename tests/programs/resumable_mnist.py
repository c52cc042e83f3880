"""examples/train_mnist.py with faults to inject on a job's first run
(tests/test_resume_sandbox.py).

``--slow-from N``: from iteration N on, every iteration sleeps 2 s (``--slow-seconds``) (the job
is still running when the test requeues it or its time-limit or preemption signal comes).
``--kill-writing-at N``: rank 1 dies by SIGKILL halfway through writing its file of iteration N's
snapshot set. Both only on the job's first run (``SLURM_RESTART_COUNT`` unset or 0); every other
argument goes to train_mnist.
"""

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import chainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import common
import train_mnist

from chainermn_rt.snapshots import extension, store

parser = argparse.ArgumentParser()
parser.add_argument("--slow-from", type=int)
parser.add_argument("--slow-seconds", type=float, default=2.0)
parser.add_argument("--kill-writing-at", type=int)
args, rest = parser.parse_known_args()
first_run = os.environ.get("SLURM_RESTART_COUNT", "0") == "0"

if first_run and args.slow_from is not None:
    make_trainer = common.make_trainer

    def slow_trainer(*a, **k):
        trainer = make_trainer(*a, **k)

        @chainer.training.make_extension(trigger=(1, "iteration"))
        def slow(trainer):
            if trainer.updater.iteration >= args.slow_from:
                time.sleep(args.slow_seconds)

        trainer.extend(slow)
        return trainer

    train_mnist.make_trainer = slow_trainer

if first_run and args.kill_writing_at is not None:
    write_file = store.write_file
    doomed = f".{store.set_name(args.kill_writing_at)}.tmp"

    def write_and_die(path, data):
        if path.parent.name == doomed and path.name == store.rank_file(1):
            with open(path.with_name(f".{path.name}.part"), "wb") as f:
                f.write(data[: len(data) // 2])
            print(f"rank 1 killed while writing {path}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        write_file(path, data)

    extension.store.write_file = write_and_die

sys.exit(train_mnist.main(rest))
