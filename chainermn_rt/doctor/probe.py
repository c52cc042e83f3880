"""The doctor job's program on each rank: ``python -m chainermn_rt.doctor.probe --out D``.

It runs after ``chainermn-rt rank`` bound the rank, like any training program, and

1. writes what the rank knows without MPI (facts.py) to ``DIR/rank-<N>.json``, and waits
   (at most ``PEER_WAIT_S``) for every rank's file: an MPI that aborts in MPI_Init makes the
   launcher kill the step (``srun --kill-on-bad-exit``), which must not cut a slower rank
   short of its report;
2. starts MPI, adds MPI's view (rank, size, node-local rank, processor name, library,
   CUDA-awareness) and writes that file again; then its world's identity, its MPI rank 0's
   (worlds.py, broadcast), and writes it once more;
3. only when MPI joined every rank the launcher started into one world: an allreduce with a
   known answer on CPU buffers, and on GPU buffers through ChainerMN's ``pure_nccl`` where
   every rank has a GPU; with ``--bandwidth-bytes`` a bandwidth measurement; then MPI rank 0
   gathers every report into ``DIR/ranks.json`` (reports.py).

It judges nothing (checks.py does) and exits 0 once its reports are written.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from chainermn_rt.doctor import facts, network, reports, worlds

ELEMENTS = 1 << 18  # 2 MiB of float64: past the eager limits of the usual transports
PEER_WAIT_S = 120  # the longest wait for the other ranks' files before MPI starts


def wait_for_peers(out: Path, ranks: int, timeout: float = PEER_WAIT_S) -> None:
    """Return once ``ranks`` rank files are in ``out``, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while len(reports.rank_files(out)) < ranks and time.monotonic() < deadline:
        time.sleep(0.2)


def verdict(got, want, exact: bool = True) -> dict:
    """Compare an allreduce's result with the known answer."""
    import numpy

    bad = got != want if exact else ~numpy.isclose(got, want, rtol=1e-6, atol=0)
    wrong = numpy.flatnonzero(bad)
    return {"ok": wrong.size == 0, "wrong": int(wrong.size), "elements": int(got.size),
            "first_wrong": None if wrong.size == 0 else
            {"index": int(wrong[0]), "got": float(got[wrong[0]]), "want": float(want[wrong[0]])}}


def allreduce_cpu(comm) -> dict:
    """MPI's sum of ``i * (rank + 1)`` over the ranks is ``i * n(n+1)/2`` (exact in float64)."""
    import numpy
    from mpi4py import MPI

    n = comm.Get_size()
    base = numpy.arange(ELEMENTS, dtype=numpy.float64)
    buf = base * (comm.Get_rank() + 1)
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    return verdict(buf, base * (n * (n + 1) // 2))


def allreduce_gpu(comm, device: int) -> dict:
    """ChainerMN's ``pure_nccl`` (NCCL) averages a gradient of ``i * (rank + 1)`` on the GPU:
    the mean is ``i * (n+1)/2``."""
    import chainer
    import chainermn
    import cupy
    import numpy

    cupy.cuda.Device(device).use()
    mn = chainermn.create_communicator("pure_nccl", comm)
    base = numpy.arange(ELEMENTS, dtype=numpy.float32) % 1024  # small integers: exact sums
    link = chainer.Link()
    with link.init_scope():
        link.w = chainer.Parameter(cupy.zeros(ELEMENTS, dtype=cupy.float32))
    link.w.grad = cupy.asarray(base * (comm.Get_rank() + 1))
    mn.multi_node_mean_grad(link)
    return verdict(cupy.asnumpy(link.w.grad), base * ((mn.size + 1) / 2), exact=False)


def bandwidth(comm, nbytes: int, device: int | None) -> dict:
    """busbw of an allreduce of ``nbytes``: ``pure_nccl`` on GPU ``device``, else MPI on CPU
    (chainermn_rt.benchmarks.allreduce.measure)."""
    from chainermn_rt.benchmarks.allreduce import measure

    if device is not None:
        import cupy

        cupy.cuda.Device(device).use()
    m = measure(comm, nbytes, communicator="mpi" if device is None else "pure_nccl")
    return {"communicator": m.communicator, "nbytes": m.nbytes, "seconds": m.seconds,
            "algbw_gbps": m.algbw_gbps, "busbw_gbps": m.busbw_gbps, "wrong": m.wrong}


def mpi_facts(comm) -> dict:
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    found = {"rank": comm.Get_rank(), "size": comm.Get_size(), "local_rank": node.Get_rank(),
             "local_size": node.Get_size(), "processor_name": MPI.Get_processor_name(),
             "library": MPI.Get_library_version().replace("\0", "").strip().splitlines()[0],
             "cuda_aware": facts.cuda_aware(), "libmpi": network.loaded_libmpi()}
    node.Free()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chainermn_rt.doctor.probe",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the doctor job's folder")
    parser.add_argument("--bandwidth-bytes", type=int, default=0,
                        help="measure an allreduce of this size (0: do not)")
    args = parser.parse_args(argv)
    report = facts.rank_facts()
    report["network"] = network.rank_network()
    launcher = report["launcher"]
    mine = reports.rank_file(args.out, launcher["rank"])
    reports.write_json(mine, report)
    wait_for_peers(args.out, launcher["size"] or 1)

    from mpi4py import MPI  # starts MPI

    comm = MPI.COMM_WORLD
    report["mpi"] = mpi_facts(comm)
    reports.write_json(mine, report)
    # which world: its rank 0's identity, the same on every member (worlds.py)
    report["mpi"]["world"] = comm.bcast(worlds.identity(launcher["rank"]), root=0)
    reports.write_json(mine, report)
    if launcher["size"] is not None and comm.Get_size() != launcher["size"]:
        return 0  # not one world of every rank: the rank files tell the collector
    report["allreduce_cpu"] = allreduce_cpu(comm)
    gpu = report["gpu"]
    use_gpu = comm.allreduce(bool(gpu and gpu["cuda"]), op=MPI.LAND)
    if use_gpu:
        report["allreduce_gpu"] = allreduce_gpu(comm, gpu["device"])
    if args.bandwidth_bytes > 0:
        report["bandwidth"] = bandwidth(comm, args.bandwidth_bytes,
                                        gpu["device"] if use_gpu else None)
    gathered = comm.gather(report, root=0)
    if comm.Get_rank() == 0:
        reports.write_json(args.out / reports.GATHERED, gathered)
    return 0


if __name__ == "__main__":
    sys.exit(main())
