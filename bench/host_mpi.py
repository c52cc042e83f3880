"""The bind model's MPI beside the hybrid model's, on the same running sandbox, as same-run
ratios: a site's MPICH (MPICH's wheel in build/mpich, ch4:ofi over libfabric's tcp, started by
Slurm's pmi2 plugin) against Open MPI 4.1 (the image's MPI in the hybrid model; here the
host's, started by Slurm's PMIx plugin). Each try is one srun step of 2 nodes x 2 ranks of
the checkout's venv, the two kinds interleaved: the step's wall time seen from here, the
slowest rank's ``MPI_Init`` (importing mpi4py.MPI), and a 1 MiB and a 16 MiB ``Allreduce``
(median of 20 after 5 warm-ups), by ``--mpi`` name. Bare metal: what differs is the MPI and
its PMI, not the container (the charliecloud and SIF runs are in tests/test_host_mpi_sandbox.py).

Run: ``python -m bench.host_mpi [--tries 7]`` with the sandbox up (``make sandbox-up``);
prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from chainermn_rt.sandbox import Sandbox

REPO = Path(__file__).resolve().parent.parent
MPICH = REPO / "build" / "mpich" / "lib" / "libmpi.so.12"
PROBE = """\
import json, time
t0 = time.monotonic()
from mpi4py import MPI
init = time.monotonic() - t0
import numpy
c = MPI.COMM_WORLD
out = {"init_s": c.allreduce(init, op=MPI.MAX), "size": c.size,
       "mpi": MPI.Get_library_version().splitlines()[0].split(",")[0].strip()}
for n in (1 << 18, 1 << 22):  # float32: 1 MiB, 16 MiB
    x = numpy.ones(n, numpy.float32); y = numpy.empty_like(x)
    times = []
    for i in range(25):
        c.Barrier(); t = time.monotonic(); c.Allreduce(x, y)
        times.append(c.allreduce(time.monotonic() - t, op=MPI.MAX))
    out[f"allreduce_{n * 4 >> 20}MiB_ms"] = sorted(times[5:])[10] * 1e3
if c.rank == 0:
    print(json.dumps(out), flush=True)
"""
KINDS = {
    "openmpi": (["--mpi=pmix"], {}),
    "mpich": (["--mpi=pmi2"], {"MPI4PY_MPIABI": "mpich", "MPI4PY_LIBMPI": str(MPICH),
                               "LD_LIBRARY_PATH": str(MPICH.parent), "FI_PROVIDER": "tcp"}),
}


def one(sandbox: Sandbox, kind: str) -> dict:
    """One try; both kinds with the sandbox profile's [environment] (Open MPI's ob1 over tcp
    and vader, ranks yielding their core), which MPICH ignores."""
    flags, env = KINDS[kind]
    env = {**sandbox.site.environment, **env}
    argv = ["srun", "-N2", "-n4", "--ntasks-per-node=2", *flags, "env",
            *(f"{k}={v}" for k, v in env.items()), sys.executable, "-c", PROBE]
    started = time.monotonic()
    done = sandbox.slurm.run(argv, timeout=300, cwd=sandbox.state_dir / "jobs")
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"host_mpi: {kind}: srun failed ({done.returncode}): "
                         f"{done.stderr.strip()[-400:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {**found, "step_s": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=7)
    args = parser.parse_args()
    if not MPICH.is_file():
        raise SystemExit(f"host_mpi: {MPICH} is missing: make setup installs it")
    sandbox = Sandbox.from_profile()
    if not sandbox.status().up:
        raise SystemExit("host_mpi: the sandbox is down: make sandbox-up")
    runs: dict[str, list[dict]] = {k: [] for k in KINDS}
    for _ in range(args.tries):
        for kind in KINDS:
            runs[kind].append(one(sandbox, kind))
    keys = ("step_s", "init_s", "allreduce_1MiB_ms", "allreduce_16MiB_ms")
    medians = {k: {key: statistics.median(r[key] for r in rs) for key in keys}
               for k, rs in runs.items()}
    print(f"{'':10}" + "".join(f"{key:>20}" for key in keys))
    for kind, m in medians.items():
        print(f"{kind:10}" + "".join(f"{m[key]:20.3f}" for key in keys))
    ratios = {key: medians["mpich"][key] / medians["openmpi"][key] for key in keys}
    print(f"{'mpich/ompi':10}" + "".join(f"{ratios[key]:20.2f}" for key in keys))
    print(json.dumps({"tries": args.tries, "medians": medians, "mpich_over_openmpi": ratios,
                      "mpi": {k: rs[0]["mpi"] for k, rs in runs.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
