"""Weak scaling on CPU: 1 rank vs 2 ranks at the same per-rank batch, one thread per rank.

For each model (the MLP 784-1000-1000-10 with Adam; ResNet-50 on 32x32 synthetic
images with momentum SGD) and communicator (ChainerMN's ``naive``, ours
``chunked``; ``none`` averages nothing and so shows the ceiling: what two ranks
sharing the machine cost without any exchange) it times training iterations
(forward, backward, gradient averaging, update) and prints efficiency
``t1 / t2`` (1.0 = perfect), then one JSON line with every figure.

Everything runs in one ``mpirun -np 2``, in rounds: each round first times
rank 0 training alone with no exchange at all (the 1-rank time ``t1``, the same
for every communicator) while rank 1 sleeps, then both ranks training with each
communicator in turn (``t2``). A change in the machine's load then hits all
cases alike. Times are medians over rounds of the slowest rank.

Run: ``python -m bench.weak_scaling [--models mlp,resnet50] [--rounds 7]
[--communicators none,naive,chunked]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench._mpi import relaunch_under_mpirun

THREADS = {v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
# model -> (per-rank batch sizes, iterations per round)
CASES = {"mlp": ((64, 256), 10), "resnet50": ((8,), 2)}


def build(model_name: str, batch: int, comm, seed: int):
    """A multi-node optimizer over ``comm`` and one batch; the same weights on every rank."""
    import chainer  # noqa: PLC0415
    import chainer.links as L  # noqa: PLC0415
    import chainermn  # noqa: PLC0415
    import numpy  # noqa: PLC0415

    from chainermn_rt.models import MLP, ResNet50

    numpy.random.seed(0)
    rng = numpy.random.default_rng(seed)
    if model_name == "mlp":
        model, optimizer = L.Classifier(MLP(1000, 10)), chainer.optimizers.Adam()
        x = rng.random((batch, 784), dtype=numpy.float32)
    else:
        model, optimizer = L.Classifier(ResNet50(10)), chainer.optimizers.MomentumSGD(0.001)
        x = rng.standard_normal((batch, 3, 32, 32), dtype=numpy.float32)
    t = rng.integers(0, 10, batch).astype(numpy.int32)
    optimizer = chainermn.create_multi_node_optimizer(optimizer, comm)
    optimizer.setup(model)
    optimizer.update(model, x, t)  # warm-up (first call allocates and broadcasts)
    return lambda: optimizer.update(model, x, t)


def idle_until_rank0(world) -> None:
    """Rank 1 sleeps (no busy polling) until rank 0 ends its 1-rank round."""
    request = world.Ibarrier()
    while not request.Test():
        time.sleep(0.0005)


def communicator(name: str, mpi_comm):
    """A communicator by name; ``none`` skips gradient averaging (the ceiling)."""
    from chainermn.communicators.naive_communicator import NaiveCommunicator  # noqa: PLC0415

    from chainermn_rt.communicators import create_communicator  # noqa: PLC0415

    class NoExchange(NaiveCommunicator):
        def multi_node_mean_grad(self, model, zero_fill=False):
            pass

    return NoExchange(mpi_comm) if name == "none" else create_communicator(name, mpi_comm)


def measure(model: str, batch: int, names: list[str], rounds: int, iterations: int):
    """Median ms per iteration: 1 rank without exchange, and 2 ranks with each communicator.

    Every round times the 1-rank case and then each communicator once, so a change in
    the machine's load during the run hits all of them alike.
    """
    from mpi4py import MPI  # noqa: PLC0415

    world = MPI.COMM_WORLD
    two = {name: build(model, batch, communicator(name, world), world.rank) for name in names}
    one = build(model, batch, communicator("none", MPI.COMM_SELF), 0) if world.rank == 0 else None
    t1, t2 = [], {name: [] for name in names}
    for _ in range(rounds):
        if world.rank == 0:
            start = time.perf_counter()
            for _ in range(iterations):
                one()
            t1.append((time.perf_counter() - start) / iterations)
            world.Ibarrier().Wait()
        else:
            idle_until_rank0(world)
        for name, step in two.items():
            world.Barrier()
            start = time.perf_counter()
            for _ in range(iterations):
                step()
            t2[name].append(world.allreduce((time.perf_counter() - start) / iterations,
                                            op=MPI.MAX))
    median = lambda v: 1000 * sorted(v)[len(v) // 2]  # noqa: E731
    return (median(t1) if world.rank == 0 else None), {n: median(v) for n, v in t2.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,resnet50")
    parser.add_argument("--communicators", default="none,naive,chunked")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    os.environ.update(THREADS)
    if relaunch_under_mpirun(2, THREADS):
        return 0
    from mpi4py import MPI  # noqa: PLC0415

    rank0 = MPI.COMM_WORLD.rank == 0
    rows = []
    if rank0:
        print(f"{'model':9} {'batch/rank':>10} {'communicator':>12} {'1 rank ms':>10} "
              f"{'2 ranks ms':>10} {'efficiency':>10}", flush=True)
    for model in args.models.split(","):
        batches, iterations = CASES[model]
        for batch in batches:
            t1, t2 = measure(model, batch, args.communicators.split(","), args.rounds, iterations)
            for name, t in t2.items():
                if rank0:
                    rows.append({"model": model, "batch": batch, "communicator": name,
                                 "t1_ms": round(t1, 2), "t2_ms": round(t, 2),
                                 "efficiency": round(t1 / t, 3)})
                    print(f"{model:9} {batch:10} {name:>12} {t1:10.2f} {t:10.2f} "
                          f"{t1 / t:10.3f}", flush=True)
    if rank0:
        print(json.dumps({"weak_scaling": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
