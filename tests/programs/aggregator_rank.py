"""ChainerMN's ObservationAggregator and MultiNodeEarlyStoppingTrigger in a real trainer, on CPU.

Usage: ``mpirun -np 2 python -W error tests/programs/aggregator_rank.py CHECK WORKDIR`` with
CHECK ``aggregator`` or ``early_stopping``. Iteration ``i`` (1, 2, ...) of the model reports
``main/loss`` (a Variable on a NumPy array, as every reported loss) and ``main/x`` (a bare
NumPy array); each rank prints one JSON object with what it saw. Any exception aborts both.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import chainer
import chainer.functions as F
import chainermn
import numpy as np
from chainer import training
from chainermn.extensions import MultiNodeEarlyStoppingTrigger, ObservationAggregator


class Reporting(chainer.Link):
    """Reports ``loss(rank, i)`` as main/loss (a Variable) and main/x (a NumPy array)."""

    def __init__(self, loss):
        super().__init__()
        self.loss = loss
        with self.init_scope():
            self.w = chainer.Parameter(np.zeros(1, dtype=np.float32))

    def forward(self, x):
        value = self.loss(float(x[0, 0]))  # x is [[i]] in iteration i
        loss = F.sum(self.w) * 0 + np.float32(value)  # connected to the graph, as a real loss
        chainer.report({"loss": loss, "x": np.asarray(value, dtype=np.float32)}, self)
        return loss


def trainer_for(loss, stop_trigger, out: str) -> training.Trainer:
    model = Reporting(loss)
    optimizer = chainer.optimizers.SGD()
    optimizer.setup(model)
    data = np.arange(1, 101, dtype=np.float32).reshape(100, 1)  # iteration i gets [[i]]
    iterator = chainer.iterators.SerialIterator(data, 1, shuffle=False)
    return training.Trainer(training.StandardUpdater(iterator, optimizer), stop_trigger, out=out)


def as_float(value):
    if value is None:
        return None
    return float(value.array if isinstance(value, chainer.Variable) else value)


def aggregator(comm, out: str) -> dict:
    """Rank r reports (r + 1) * i: the mean over 2 ranks is 1.5 * i."""
    trainer = trainer_for(lambda i: (comm.rank + 1) * i, (4, "iteration"), out)
    # Every iteration: 1.5, 3, 4.5, 6.
    trainer.extend(ObservationAggregator(comm, "main/loss", "main/loss_mean"))
    # Every 2nd iteration, over the iterations since the last one: iterations 1-2 give
    # (1 + 2 + 2 + 4) / 4 = 2.25, iterations 3-4 (3 + 4 + 6 + 8) / 4 = 5.25.
    trainer.extend(ObservationAggregator(comm, "main/x", "main/x_mean",
                                         comm_trigger=(2, "iteration")))
    seen = {"loss_mean": [], "x_mean": []}

    @training.make_extension(trigger=(1, "iteration"), priority=training.PRIORITY_READER)
    def record(trainer):  # after the aggregators (PRIORITY_EDITOR) in the same iteration
        for key in seen:
            seen[key].append(as_float(trainer.observation.get("main/" + key)))

    trainer.extend(record)
    trainer.run()
    return {"iteration": trainer.updater.iteration, **seen}


def early_stopping(comm, out: str) -> dict:
    """Rank 0's loss improves (10 - i), rank 1's worsens (10 + 3i): their mean 10 + i worsens.

    The trigger compares that mean at every iteration: best at 1, worse at 2 and 3, so
    with patience 2 training stops after iteration 3 on both ranks (rank 0 alone never would).
    """
    trainer = trainer_for(lambda i: 10 - i if comm.rank == 0 else 10 + 3 * i,
                          MultiNodeEarlyStoppingTrigger(
                              comm, check_trigger=(1, "iteration"), monitor="main/loss",
                              patience=2, max_trigger=(50, "iteration")), out)
    trainer.run()
    return {"iteration": trainer.updater.iteration,
            "loss_aggregated": as_float(trainer.observation.get("main/loss_aggregated"))}


CHECKS = {"aggregator": aggregator, "early_stopping": early_stopping}


def main() -> int:
    check, workdir = sys.argv[1], sys.argv[2]
    comm = chainermn.create_communicator("naive")
    try:
        result = CHECKS[check](comm, os.path.join(workdir, f"rank{comm.rank}"))
    except BaseException:  # one failing rank must not leave the other waiting
        traceback.print_exc()
        sys.stderr.flush()
        comm.mpi_comm.Abort(1)
    print(json.dumps({"check": check, "rank": comm.rank, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
