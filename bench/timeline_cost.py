"""What the step timeline (``chainermn_rt.timeline``) costs a training step of
examples/train_mnist.py's model (its MLP, 1000 units, batch 100 per rank), 2 ranks under
mpirun, measured in one process at the default setting (every step recorded, written every
2 s, rank 0's look at every rank's steps every 15 s):

- ``step``: one iteration of a Chainer trainer's loop (the iterator, forward, backward, the
  gradient exchange, Adam, the extensions) on a plain trainer and on one the timeline records,
  in alternating blocks of iterations (so a change in the machine's load hits both); the
  median block of each, and their ratio (steps/s with over steps/s without);
- ``direct``: the recorder's own work per step (its wrappers, stamps, the step's line, its
  share of the writes), timed around no-op phases over many steps, as a share of the plain
  step: the figure to trust on a loaded machine, where the blocks' spread is larger than the
  cost.

Run: ``python -m bench.timeline_cost [--blocks 30] [--block 20]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench._mpi import relaunch_under_mpirun


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--block", type=int, default=20, help="iterations per block")
    args = parser.parse_args()
    if relaunch_under_mpirun(2, {"OMP_NUM_THREADS": "1"}):
        return 0
    import chainer
    import chainer.links as L
    import chainermn
    import numpy

    import chainermn_rt
    from chainermn_rt.communicators import create_communicator
    from chainermn_rt.models import MLP

    comms = {"plain": create_communicator("chunked"), "timeline": create_communicator("chunked")}
    world = comms["plain"].mpi_comm
    rank = world.Get_rank()
    folder = Path(world.bcast(tempfile.mkdtemp(prefix="timeline-cost-") if rank == 0 else None))
    numpy.random.seed(0)
    model = L.Classifier(MLP(1000, 10))
    rng = numpy.random.default_rng(rank)
    data = chainer.datasets.TupleDataset(rng.random((6000, 784), dtype=numpy.float32),
                                         rng.integers(0, 10, 6000).astype(numpy.int32))
    trainers = {}
    for name, comm in comms.items():
        optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
        optimizer.setup(model)
        updater = chainer.training.StandardUpdater(
            chainer.iterators.SerialIterator(data, 100), optimizer)
        trainer = chainer.training.Trainer(updater, (10**9, "iteration"), out=str(folder))
        if name == "timeline":
            recorder = chainermn_rt.timeline(trainer, comm, directory=folder / "records")
            recorder.start(trainer)
        trainers[name] = trainer

    def iterate(trainer, n: int) -> None:
        """Trainer.run's loop body, ``n`` times."""
        entries = sorted(trainer._extensions.values(), key=lambda e: e.priority,  # noqa: SLF001
                         reverse=True)
        for _ in range(n):
            trainer.observation = {}
            with trainer.reporter.scope(trainer.observation):
                trainer.updater.update()
                for entry in entries:
                    if entry.trigger(trainer):
                        entry.extension(trainer)

    for trainer in trainers.values():  # first updates broadcast; then warm up
        iterate(trainer, 3)
    blocks: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(args.blocks):
        for name, trainer in trainers.items():
            world.Barrier()
            start = time.perf_counter()
            iterate(trainer, args.block)
            blocks[name].append(world.allreduce(time.perf_counter() - start, op=max)
                                / args.block)
    step = {name: statistics.median(v) for name, v in blocks.items()}
    recorder.finish(trainers["timeline"])

    # the recorder alone: a step whose phases do nothing
    from chainermn_rt.timeline.recorder import Recorder

    alone = Recorder(comms["plain"].mpi_comm.Split(rank, 0), folder / "direct")
    noop = [alone._timed_next(lambda: [0] * 100),  # noqa: SLF001
            alone._timed_phase(lambda: None, "exchange"),  # noqa: SLF001
            alone._timed_phase(lambda: None, "update")]  # noqa: SLF001
    steps = 20_000
    start = time.perf_counter()
    for i in range(steps):
        alone.begin_step()
        for call in noop:
            call()
        alone.end_update()
        alone.end_step(i + 1)
    alone.close()
    direct = (time.perf_counter() - start) / steps
    start = time.perf_counter()
    for _ in range(steps):
        for call in (lambda: [0] * 100, lambda: None, lambda: None):
            call()
    direct -= (time.perf_counter() - start) / steps

    if rank == 0:
        base = step["plain"]
        print(f"step, plain trainer:    {1e3 * base:8.3f} ms (median of {args.blocks} blocks "
              f"of {args.block})")
        print(f"step, timeline on:      {1e3 * step['timeline']:8.3f} ms; steps/s with / "
              f"without: {base / step['timeline']:.4f}")
        print(f"the recorder's own work: {1e6 * direct:6.2f} us per step = "
              f"{100 * direct / base:.3f} % of a step")
        spread = {n: [1e3 * min(v), 1e3 * max(v)] for n, v in blocks.items()}
        print(json.dumps({"step_ms": {n: 1e3 * v for n, v in step.items()},
                          "step_ms_range": spread, "ratio": base / step["timeline"],
                          "direct_us": 1e6 * direct}))
    world.Barrier()
    if rank == 0:
        shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
