"""What the sandbox and the bundle cost against the node count, on the DGX-shaped sandbox
(slurm/sites/sandbox-dgx.toml), 1 rank per node, one fresh sandbox per node count:

- ``sandbox up``: from nothing until every node is idle; the daemons' memory (PSS, MB) and
  ``down``;
- ``job start``: a rendered job (make_plan + render, the per-rank step) from ``sbatch`` to the
  first and the last rank's program running;
- ``doctor``: ``chainermn-rt doctor --site sandbox-dgx --nodes N --gpus-per-node 1``, whole;
- ``MPI start``: ``srun --mpi=pmix`` of an mpi4py ``MPI.Init()`` + ``Barrier``: srun's wall
  time and the slowest rank's Init + Barrier;
- the bundle's own part, per node (pure functions, also past the sandbox's 32 nodes):
  ``make_plan`` + ``render``, and the doctor's collector (``load_reports`` of the rank files
  and ``run_checks``) over reports of N nodes x 8 ranks made from a real rank's report.

``--full NODESxRANKS`` (e.g. ``16x8``) once more starts that many ranks on a fresh sandbox of
NODES: the MPI start, then the whole doctor at RANKS per node (its checks' verdicts recorded).
Writes the figures as JSON and a PNG (``--out``, ``--plot``). Run as root, nothing else using
the sandbox's namespaces: ``python -m bench.sandbox_costs [--nodes 1,2,4,8,16,32]``.

``--stack debian13``: the same on the Debian 13 root's Slurm 24.11 and Open MPI 5 (the ranks
run the checkout's venv there, its mpi4py on the nodes' Open MPI 5). ``--image X.sif`` (with
debian13): the MPI start's and the job start's ranks run in the SIF instead (``apptainer
exec``: the image's Open MPI 4.1 against Slurm's PMIx 5, the hybrid model; the job's ranks on
the partition's CPU slots), and ``--full`` is the MPI start alone (the doctor stays bare metal).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

from chainermn_rt import plotting
from chainermn_rt.arguments import Parser, integer, output_file
from chainermn_rt.doctor.cluster import Expected, run_checks
from chainermn_rt.doctor.reports import GATHERED, load_reports, rank_file, write_json
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.render import render
from chainermn_rt.sandbox import Sandbox, mpi_crash
from chainermn_rt.sandbox.settings import DEBIAN13, DEFAULT_STACK, STACKS, STATE_VAR
from chainermn_rt.site import Site
from chainermn_rt.submission import Cluster

SITE = "sandbox-dgx"
MPI_TIMEOUT_S = 120  # 1 rank per node starts in seconds; a start past this hung
FULL_TIMEOUT_S = 300  # --full: given up after this long (the issue saw 142-263 s for 16 x 8)
PLAN_NODES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MPI_PROGRAM = ("import time; t = time.perf_counter(); from mpi4py import rc; rc.initialize = "
               "False; from mpi4py import MPI; MPI.Init(); MPI.COMM_WORLD.Barrier(); "
               "print('init', time.perf_counter() - t, flush=True); MPI.Finalize()")
START_PROGRAM = ("import os, sys, time; open(os.path.join(sys.argv[1], 'start-' + "
                 "os.environ['SLURM_PROCID']), 'w').write(repr(time.time()))")


def _pss_mb(pid: int) -> float:
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return 0.0
    return next(int(ln.split()[1]) for ln in lines if ln.startswith("Pss:")) / 1024


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def _env(sb: Sandbox) -> dict[str, str]:
    return {**sb.env(), **sb.site.environment, STATE_VAR: str(sb.state_dir)}


def python(image: Path | None) -> list[str]:
    """The ranks' interpreter: the checkout's, or the SIF's (``apptainer exec IMAGE python3``)."""
    return [sys.executable] if image is None else ["apptainer", "exec", str(image), "python3"]


def mpi_start(sb: Sandbox, nodes: int, per_node: int = 1, timeout: float = 900,
              image: Path | None = None) -> dict:
    """srun's wall time and the slowest rank's Init + Barrier. A start that hung (past
    ``timeout``) or showed Debian's Open MPI start-up crash (mpi_crash) is recorded and started
    once more, as the sandbox's policy for the crash is."""
    argv = ["srun", "--mpi=pmix", f"--nodes={nodes}", f"--ntasks-per-node={per_node}",
            "--time=15", *python(image), "-c", MPI_PROGRAM]


    def launch() -> tuple[float, subprocess.CompletedProcess | str]:
        try:  # in the jobs folder: a crash's core file goes there
            return _timed(lambda: subprocess.run(argv, env=_env(sb), capture_output=True,
                                                 text=True, timeout=timeout,
                                                 cwd=sb.state_dir / "jobs"))
        except subprocess.TimeoutExpired:
            return timeout, f"hung past {timeout:.0f} s"

    def failed(tried) -> str | None:
        if isinstance(tried[1], str):
            return tried[1]
        if mpi_crash.crashed_at_start(tried[1].stdout + tried[1].stderr):
            return "Open MPI's start-up crash"
        return None

    tries = mpi_crash.launched(launch, failed)
    failures = [failed(t) for t in tries if failed(t)]
    if failed(tries[-1]):
        raise RuntimeError(f"srun of {nodes} x {per_node}: {'; '.join(failures)}")
    wall, proc = tries[-1]
    inits = [float(ln.split()[1]) for ln in proc.stdout.splitlines() if ln.startswith("init ")]
    if proc.returncode != 0 or len(inits) != nodes * per_node:
        raise RuntimeError(f"srun of {nodes} x {per_node}: rc {proc.returncode}, "
                           f"{len(inits)} ranks said init; {proc.stderr[-2000:]}")
    return {"srun_s": wall, "init_barrier_max_s": max(inits), "mpi_failed_starts": failures}


def cpu_only(site: Site) -> Site:
    """``site`` with its partitions' slots without GPUs: the cpu image's ranks on the nodes'
    CPU slots (a cpu SIF is refused for ranks with GPUs)."""
    return replace(site, partitions=tuple(replace(p, topology=replace(
        p.topology, slots=tuple(replace(s, gpu=None) for s in p.topology.slots)))
        for p in site.partitions))


def job_start(sb: Sandbox, nodes: int, folder: Path, image: Path | None = None) -> dict:
    folder.mkdir()
    where = dict(gpus_per_node=1, python=sys.executable) if image is None else \
        dict(ranks_per_node=1, runtime="apptainer", image=str(image))
    plan = make_plan(sb.site if image is None else cpu_only(sb.site), Request(  # the Plan
        nodes=nodes, time="10", command=(sys.executable if image is None else "python3", "-c",
                                         START_PROGRAM, str(folder)), **where))  # wraps it
    submitted = [time.time()]
    # the one submit-and-wait path, with its policy for Open MPI's start-up crash
    done = Cluster(sb.site, sb.slurm).run(
        folder / "job.sh", plan, cwd=folder,
        submitted=lambda job: submitted.append(time.time()), say=lambda line: None)
    starts = [float(p.read_text()) - submitted[-1] for p in folder.glob("start-*")]
    if tuple(done.state) != ("COMPLETED", 0) or len(starts) != nodes:
        raise RuntimeError(f"job {done.job}: {done.state}, {len(starts)} of {nodes} ranks "
                           "started")
    return {"first_rank_s": min(starts), "last_rank_s": max(starts)}


def doctor(sb: Sandbox, nodes: int, folder: Path, per_node: int = 1) -> dict:
    """The whole doctor's wall time; with ``per_node`` > 1 also every check that did not pass
    (name: status and reason)."""
    wall, proc = _timed(lambda: subprocess.run(
        [sys.executable, "-m", "chainermn_rt", "doctor", "--site", SITE, "--nodes", str(nodes),
         "--gpus-per-node", str(per_node), "--out", str(folder), "--wait-timeout", "900",
         "--json"], env=_env(sb), capture_output=True, text=True, timeout=1000))
    if proc.returncode != 0:
        raise RuntimeError(f"doctor on {nodes} x {per_node}: rc {proc.returncode}: "
                           f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    if per_node == 1:
        return {"doctor_s": wall}
    checks = json.loads(proc.stdout)["checks"]
    return {"doctor_s": wall, "doctor_checks": len(checks),
            "doctor_not_passed": {c["name"]: f"{c['status']}: {c['reason']}" for c in checks
                                  if c["status"] != "PASS"},
            "doctor_reports": next((c["reason"] for c in checks if c["name"] == "reports"),
                                   "no reports check")}


def per_node_sandbox(nodes: int, tmp: Path, stack: str,
                     image: Path | None) -> tuple[dict, dict]:
    """Every sandbox figure for ``nodes``; and a real rank report (for the synthetic ones)."""
    # one state folder for every count: job ids go on across restarts (each job's PMIx
    # namespace differs; a 16-node start from fresh ids hung once in MPI_Init, not reproduced)
    sb = Sandbox.from_profile(SITE, nodes=nodes, state_dir=tmp / "state", stack=stack)
    up_s, _ = _timed(sb.up)
    try:
        procs = sb.daemons()
        row = {"nodes": nodes, "up_s": up_s,
               "memory_mb": sum(_pss_mb(p["pid"]) for p in procs.values())}
        row |= mpi_start(sb, nodes, timeout=MPI_TIMEOUT_S, image=image)
        row |= job_start(sb, nodes, tmp / f"job-{nodes}", image)
        row |= doctor(sb, nodes, tmp / f"doctor-{nodes}")
        report = json.loads((tmp / f"doctor-{nodes}" / "ranks.json").read_text())[0]
    finally:
        row["down_s"], _ = _timed(sb.down)
    return row, report


def _median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def synthetic_reports(template: dict, nodes: int, per_node: int = 8) -> list[dict]:
    """A healthy doctor job's reports: ``template`` (one real rank's) on every rank."""
    size, found = nodes * per_node, []
    for rank in range(size):
        node, local = f"node{rank // per_node + 1}", rank % per_node
        r = copy.deepcopy(template)
        r["node"] = r["host"] = node
        r["launcher"] |= {"rank": rank, "size": size, "local_rank": local,
                          "local_size": per_node}
        r["mpi"] |= {"rank": rank, "size": size, "local_rank": local, "local_size": per_node,
                     "processor_name": node}
        r["gpu"] |= {"device": local, "physical": str(local)}
        r["visible_gpus"] = per_node
        r["env"]["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(per_node)))
        r["cpus"] = [local % 2]
        found.append(r)
    return found


def collect_checks(folder: Path, expect: Expected) -> list:
    """What the doctor's collector does with a job's folder: read the rank files, check."""
    found, gathered = load_reports(folder)
    return run_checks(found, gathered, expect)


def bundle_part(template: dict, tmp: Path, repeat: int) -> list[dict]:
    """make_plan + render, and the doctor's collector, against the node count."""
    site = Sandbox.from_profile(SITE).site
    big = replace(site, partitions=tuple(replace(p, nodes=max(PLAN_NODES))
                                         for p in site.partitions))
    rows = []
    for nodes in PLAN_NODES:
        request = Request(nodes=nodes, command=("python3", "train.py"))
        plan_s = _median_s(partial(lambda r: render(make_plan(big, r)), request), repeat)
        folder = tmp / f"reports-{nodes}"
        folder.mkdir()
        reports = synthetic_reports(template, nodes)
        for r in reports:  # as a healthy job leaves them: each rank's, and rank 0's gathering
            write_json(rank_file(folder, r["launcher"]["rank"]), r)
        write_json(folder / GATHERED, reports)
        collect = partial(collect_checks, folder, Expected(ranks=len(reports)))
        checks = collect()
        bad = [c for c in checks if c.status == "FAIL"]
        if bad or len(checks) != 13:
            raise RuntimeError(f"synthetic reports of {nodes} nodes: {bad}")
        rows.append({"nodes": nodes, "ranks": len(reports), "plan_render_ms": plan_s * 1e3,
                     "doctor_checks_ms": _median_s(collect, max(1, repeat // 20)) * 1e3})
    return rows


def plot(rows: list[dict], path: Path, where: str) -> None:
    fig, ax = plotting.axes(7, 5)
    nodes = [r["nodes"] for r in rows]
    for key, label in (("up_s", "sandbox up (until idle)"),
                       ("first_rank_s", "job start: sbatch to first rank"),
                       ("last_rank_s", "job start: sbatch to last rank"),
                       ("doctor_s", "doctor, whole"),
                       ("srun_s", "srun --mpi=pmix: Init + Barrier, whole"),
                       ("init_barrier_max_s", "MPI Init + Barrier, slowest rank")):
        ax.plot(nodes, [r[key] for r in rows], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(nodes, [str(n) for n in nodes])
    plotting.save(fig, ax, path, f"Sandbox costs, 1 rank per node (2-core host; {where})",
                  "nodes", "seconds")


def full_run(nodes: int, per_node: int, tmp: Path, stack: str, image: Path | None) -> dict:
    """``--full``: a fresh sandbox of ``nodes``; the MPI start, then (bare metal) the doctor,
    at ``per_node`` ranks per node; a failure of either is recorded, not raised."""
    sb = Sandbox.from_profile(SITE, nodes=nodes, state_dir=tmp / "state-full", stack=stack)
    row: dict = {"nodes": nodes, "ranks_per_node": per_node, "utc": time.strftime(
        "%Y-%m-%d %H:%M:%S", time.gmtime())}
    sb.up()
    steps = [("mpi", lambda: mpi_start(sb, nodes, per_node, timeout=FULL_TIMEOUT_S,
                                        image=image))]
    if image is None:
        steps.append(("doctor", lambda: doctor(sb, nodes, tmp / "doctor-full", per_node)))
    try:
        for name, step in steps:
            try:
                row |= step()
            except RuntimeError as err:
                row[f"{name}_error"] = str(err)[-500:]
            print(json.dumps(row), flush=True)
    finally:
        sb.down()
    return row


def main() -> int:
    parser = Parser(prog="bench.sandbox_costs", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1,2,4,8,16,32",
                        help="node counts, comma-separated, each 1-32")
    parser.add_argument("--repeat", type=integer(1), default=200,
                        help="make_plan + render repetitions per node count")
    parser.add_argument("--full", default=None,
                        help="NODESxRANKS started once: MPI start, then the doctor")
    parser.add_argument("--stack", choices=list(STACKS), default=DEFAULT_STACK,
                        help="the sandbox's stack (default: %(default)s)")
    parser.add_argument("--image", type=Path, default=None,
                        help="with --stack debian13: the ranks of the MPI and job starts in "
                             "this SIF (the hybrid model)")
    parser.add_argument("--out", type=Path, default=Path("bench/sandbox_costs.json"))
    parser.add_argument("--plot", type=Path, default=Path("bench/sandbox_costs.png"))
    args = parser.parse_args()
    if args.image is not None and (args.stack != DEBIAN13 or not args.image.is_file()):
        parser.error(f"--image: {args.image} must be a SIF file, with --stack {DEBIAN13} "
                     "(Apptainer runs on its nodes)")
    image = None if args.image is None else args.image.absolute()
    try:
        counts = [integer(1, 32)(n) for n in args.nodes.split(",")]
        full = [integer(1, 32)(args.full.split("x")[0]), integer(1, 8)(args.full.split("x")[1])] \
            if args.full else None
    except (argparse.ArgumentTypeError, IndexError) as err:
        parser.error(f"--nodes/--full: {err} (e.g. --nodes 1,2,4 --full 16x8)")
    out, png = output_file(args.out, "--out"), output_file(args.plot, "--plot")
    result: dict = {"load_before": os.getloadavg(), "stack": args.stack,
                    "image": None if image is None else str(image)}
    # in /tmp: the debian13 stack's client commands and nodes see /tmp (not /var/tmp)
    with tempfile.TemporaryDirectory(prefix="sandbox-costs-", dir="/tmp") as tmp:
        rows, template = [], None
        for nodes in counts:
            row, template = per_node_sandbox(nodes, Path(tmp), args.stack, image)
            rows.append(row)
            print(json.dumps(row), flush=True)
        result["sandbox"] = rows
        result["bundle"] = bundle_part(template, Path(tmp), args.repeat)
        for row in result["bundle"]:
            print(json.dumps(row), flush=True)
        if full:
            result["full"] = full_run(*full, Path(tmp), args.stack, image)
    result["load_after"] = os.getloadavg()
    out.write_text(json.dumps(result, indent=1) + "\n")
    plot(rows, png, args.stack + (", ranks in the SIF" if image else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
