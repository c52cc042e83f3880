"""The bind model's MPI beside the hybrid model's, on the same running sandbox, as same-run
ratios: a site's MPICH (MPICH's wheel in build/mpich, ch4:ofi over libfabric's tcp, started by
Slurm's pmi2 plugin) against Open MPI 4.1 (the image's MPI in the hybrid model; here the
host's, started by Slurm's PMIx plugin). Each try is one srun step of 2 nodes x 2 ranks of
the checkout's venv, the two kinds interleaved: the step's wall time seen from here, the
slowest rank's ``MPI_Init`` (importing mpi4py.MPI), and a 1 MiB and a 16 MiB ``Allreduce``
(median of 20 after 5 warm-ups), by ``--mpi`` name.

With ``--image DIR`` (the cpu image as a Charliecloud folder) the same in the image through
ch-run: the hybrid model (the image's Open MPI, pmix) and the bind model (MPICH's folder bound
into it, pmi2, with ``MPIR_CVAR_CH4_CMA_ENABLE=0``: a user namespace refuses MPICH's
``process_vm_readv``), and ``mpich-no-cma``: that setting bare metal, what it costs alone.

Run: ``python -m bench.host_mpi [--tries 7] [--image build/images/chainermn-rt-cpu]`` with the
sandbox up (``make sandbox-up``); prints a table and one JSON line.
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
BOUND = {"MPI4PY_MPIABI": "mpich", "MPI4PY_LIBMPI": str(MPICH),
         "LD_LIBRARY_PATH": str(MPICH.parent), "FI_PROVIDER": "tcp"}
# (srun flags, variables, in the image): bare metal, the venv's mpi4py; with --image, also
# the hybrid model (the image's own Open MPI) and the bind model (MPICH bound into the image)
KINDS = {
    "openmpi": (["--mpi=pmix"], {}, False),
    "mpich": (["--mpi=pmi2"], BOUND, False),
    # bare metal without MPICH's CMA copy, as the bound kind must run: what that costs alone
    "mpich-no-cma": (["--mpi=pmi2"], {**BOUND, "MPIR_CVAR_CH4_CMA_ENABLE": "0"}, False),
    "openmpi-image": (["--mpi=pmix"], {}, True),
    # a user namespace's ranks may not process_vm_readv each other: MPICH's CMA copy off
    "mpich-bound": (["--mpi=pmi2"], {**BOUND, "MPIR_CVAR_CH4_CMA_ENABLE": "0"}, True),
}


def one(sandbox: Sandbox, kind: str, image: Path | None) -> dict:
    """One try; every kind with the sandbox profile's [environment] (Open MPI's ob1 over tcp
    and vader, ranks yielding their core), which MPICH ignores. In the image: ch-run with the
    state folder (Slurm's PMIx folders) and MPICH's folder bound at their own paths."""
    flags, env, contained = KINDS[kind]
    env = {**sandbox.site.environment, **env}
    python = [sys.executable]
    if contained:
        binds = [str(sandbox.state_dir), str(MPICH.parent)]
        for path in binds:
            (image / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
        python = ["ch-run", "--set-env", *(x for b in binds for x in ("-b", b)), str(image),
                  "--", "python3"]
    argv = ["srun", "-N2", "-n4", "--ntasks-per-node=2", *flags, "env", "USER=root",
            *(f"{k}={v}" for k, v in env.items()), *python, "-c", PROBE]
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
    parser.add_argument("--image", type=Path, help="the cpu image as a Charliecloud folder "
                        "(build/images/chainermn-rt-cpu): also the kinds in the image")
    args = parser.parse_args()
    args.image = args.image and args.image.resolve()  # srun runs from the state folder
    kinds = [k for k, (_, _, contained) in KINDS.items()
             if args.image or not (contained or k == "mpich-no-cma")]
    if not MPICH.is_file():
        raise SystemExit(f"host_mpi: {MPICH} is missing: make setup installs it")
    sandbox = Sandbox.from_profile()
    if not sandbox.status().up:
        raise SystemExit("host_mpi: the sandbox is down: make sandbox-up")
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for _ in range(args.tries):
        for kind in kinds:
            runs[kind].append(one(sandbox, kind, args.image))
    keys = ("step_s", "init_s", "allreduce_1MiB_ms", "allreduce_16MiB_ms")
    medians = {k: {key: statistics.median(r[key] for r in rs) for key in keys}
               for k, rs in runs.items()}
    print(f"{'':26}" + "".join(f"{key:>20}" for key in keys))
    for kind, m in medians.items():
        print(f"{kind:26}" + "".join(f"{m[key]:20.3f}" for key in keys))
    pairs = [("mpich", "openmpi")] + ([("mpich-no-cma", "mpich"), ("openmpi-image", "openmpi"),
                                        ("mpich-bound", "openmpi-image")] if args.image else [])
    ratios = {f"{a}/{b}": {key: medians[a][key] / medians[b][key] for key in keys}
              for a, b in pairs}
    for name, r in ratios.items():
        print(f"{name:26}" + "".join(f"{r[key]:20.2f}" for key in keys))
    print(json.dumps({"tries": args.tries, "medians": medians, "ratios": ratios,
                      "mpi": {k: rs[0]["mpi"] for k, rs in runs.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
