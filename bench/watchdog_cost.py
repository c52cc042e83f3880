"""What the reliability machinery costs a training step of examples/train_mnist.py (its MLP,
1000 units, batch 100 per rank), 2 ranks under mpirun, measured in one process:

- ``step``: one training iteration (forward, backward, gradient averaging, Adam) on a plain
  communicator and on one the stall watchdog watches, in alternating blocks of iterations
  (so a change in the machine's load hits both); medians of the blocks;
- ``note``: the watchdog's own work per collective call (the wrapper: a few attribute
  writes), timed over many calls of a watched no-op;
- ``stop check``: the per-iteration broadcast of the stop flag that ``chainermn_rt.resumable``
  does when the job has a ``signal``.

The direct costs (note, stop check) are also given as a share of the median step: that is the
figure to trust on a loaded machine, where the step's own spread is larger than the cost.
Run: ``python -m bench.watchdog_cost [--blocks 30] [--block 20]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench._mpi import relaunch_under_mpirun
from chainermn_rt.watchdog import Progress, _watched, watch
from chainermn_rt.watchdog.settings import Settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--block", type=int, default=20, help="iterations per block")
    args = parser.parse_args()
    if relaunch_under_mpirun(2):
        return 0
    import chainer
    import chainer.links as L
    import chainermn
    import numpy

    from chainermn_rt.communicators import create_communicator
    from chainermn_rt.models import MLP

    comms = {"plain": create_communicator("chunked"),
             "watched": watch(create_communicator("chunked"),
                              Settings(stall_timeout=600, action="abort", start_timeout=0))}
    world = comms["plain"].mpi_comm
    numpy.random.seed(0)
    model = L.Classifier(MLP(1000, 10))
    optimizers = {}
    for name, comm in comms.items():
        optimizers[name] = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
        optimizers[name].setup(model)
    rng = numpy.random.default_rng(world.Get_rank())
    x = rng.random((100, 784), dtype=numpy.float32)
    t = rng.integers(0, 10, 100).astype(numpy.int32)
    for opt in optimizers.values():  # first updates broadcast; then warm up
        for _ in range(3):
            opt.update(model, x, t)

    blocks: dict[str, list[float]] = {name: [] for name in comms}
    for _ in range(args.blocks):
        for name, opt in optimizers.items():
            world.Barrier()
            start = time.perf_counter()
            for _ in range(args.block):
                opt.update(model, x, t)
            blocks[name].append(world.allreduce(time.perf_counter() - start, op=max)
                                / args.block)
    step = {name: statistics.median(v) for name, v in blocks.items()}

    calls = 200_000
    watched_noop = _watched(lambda: None, "bcast_obj", Progress())
    start = time.perf_counter()
    for _ in range(calls):
        watched_noop()
    note = (time.perf_counter() - start) / calls
    start = time.perf_counter()
    for _ in range(calls):
        (lambda: None)()
    note -= (time.perf_counter() - start) / calls

    flags = 5000
    world.Barrier()
    start = time.perf_counter()
    for _ in range(flags):
        world.bcast(False, root=0)
    stop_check = world.allreduce(time.perf_counter() - start, op=max) / flags

    if world.Get_rank() == 0:
        base = step["plain"]
        print(f"step, plain communicator:   {1e3 * base:8.3f} ms (median of {args.blocks} "
              f"blocks of {args.block})")
        print(f"step, watched communicator: {1e3 * step['watched']:8.3f} ms "
              f"({100 * (step['watched'] / base - 1):+.2f} %, within the blocks' spread)")
        print(f"watchdog note per collective: {1e6 * note:6.2f} us = "
              f"{100 * note / base:.4f} % of a step per collective call")
        print(f"stop check per iteration:     {1e6 * stop_check:6.2f} us = "
              f"{100 * stop_check / base:.3f} % of a step")
        spread = {n: [1e3 * min(v), 1e3 * max(v)] for n, v in blocks.items()}
        print(json.dumps({"step_ms": {n: 1e3 * v for n, v in step.items()}, "step_ms_range": spread,
                          "note_us": 1e6 * note, "stop_check_us": 1e6 * stop_check}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
