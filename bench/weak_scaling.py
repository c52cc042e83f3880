"""Weak scaling on CPU: 1 rank vs 2 ranks at the same per-rank batch, one thread per rank.

For each model (the MLP 784-1000-1000-10 with Adam; ResNet-50 on small synthetic
images with momentum SGD) and communicator (ChainerMN's ``naive``, ours
``chunked``), it times training iterations (forward, backward, gradient
averaging, update; median of the slowest rank) and prints efficiency
``t1 / t2`` (1.0 = perfect), then one JSON line with every figure.

Run: ``python bench/weak_scaling.py [--models mlp,resnet50] [--iterations 30]``
(starts ``mpirun -np 1`` and ``-np 2`` itself).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _mpi import mpirun_argv, slowest_median_ms

THREADS = {v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
# model -> (per-rank batch sizes, timed iterations for the default --iterations 30)
CASES = {"mlp": ((64, 256), 1.0), "resnet50": ((8,), 0.2)}


def worker(model_name: str, batch: int, communicator: str, iterations: int) -> None:
    import chainer
    import chainer.links as L
    import chainermn
    import numpy
    from models import MLP, ResNet50

    from chainermn_rt.communicators import create_communicator

    comm = create_communicator(communicator)
    numpy.random.seed(0)
    rng = numpy.random.default_rng(comm.rank)
    if model_name == "mlp":
        model, optimizer = L.Classifier(MLP(1000, 10)), chainer.optimizers.Adam()
        x = rng.random((batch, 784), dtype=numpy.float32)
    else:
        model, optimizer = L.Classifier(ResNet50(10)), chainer.optimizers.MomentumSGD(0.001)
        x = rng.standard_normal((batch, 3, 32, 32), dtype=numpy.float32)
    t = rng.integers(0, 10, batch).astype(numpy.int32)
    optimizer = chainermn.create_multi_node_optimizer(optimizer, comm)
    optimizer.setup(model)
    ms = slowest_median_ms(comm.mpi_comm, lambda: optimizer.update(model, x, t), iterations)
    if comm.rank == 0:
        print(json.dumps({"ms": ms}), flush=True)


def measure(model: str, batch: int, communicator: str, ranks: int, iterations: int) -> float:
    argv = mpirun_argv(ranks) + [sys.executable, __file__, "--worker", model, "--batch",
                                 str(batch), "--communicator", communicator, "--iterations",
                                 str(iterations)]
    out = subprocess.run(argv, env=dict(os.environ, **THREADS), capture_output=True, text=True,
                         check=False)
    if out.returncode:
        sys.exit(f"{' '.join(argv)} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])["ms"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,resnet50")
    parser.add_argument("--communicators", default="naive,chunked")
    parser.add_argument("--iterations", type=int, default=30, help="timed MLP iterations")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--communicator", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.batch, args.communicator, args.iterations)
        return 0
    rows = []
    print(f"{'model':9} {'batch/rank':>10} {'communicator':>12} {'1 rank ms':>10} "
          f"{'2 ranks ms':>10} {'efficiency':>10}", flush=True)
    for model in args.models.split(","):
        batches, share = CASES[model]
        iterations = max(3, int(args.iterations * share))
        for batch in batches:
            t1 = measure(model, batch, "naive", 1, iterations)  # no exchange with one rank
            for name in args.communicators.split(","):
                t2 = measure(model, batch, name, 2, iterations)
                rows.append({"model": model, "batch": batch, "communicator": name,
                             "t1_ms": round(t1, 2), "t2_ms": round(t2, 2),
                             "efficiency": round(t1 / t2, 3)})
                print(f"{model:9} {batch:10} {name:>12} {t1:10.2f} {t2:10.2f} "
                      f"{t1 / t2:10.3f}", flush=True)
    print(json.dumps({"weak_scaling": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
