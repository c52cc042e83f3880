"""How long a step takes to start its ranks under pyxis, against Apptainer and bare metal, on
a pyxis sandbox (``--stack debian13``: slurm/sites/sandbox-pyxis-debian13.toml, Apptainer and
the dockerd there too; ``--stack debian12``: sandbox-pyxis.toml) with N nodes, as
bench/sandbox_costs.py makes sandboxes of N nodes, 1 rank per node (issue 41, item 4).

One sandbox per node count; in it one batch job runs every configuration's steps, interleaved
round by round (the same run: ratios, not absolute seconds, are what carries over):

- ``bare``: ``srun --mpi=pmix python3 -c PROG`` (debian13: the root's Python 3.13; debian12:
  the checkout's virtual environment, whose Chainer, mpi4py and Open MPI 4.1 are the image's
  versions);
- ``sif`` (debian13 only): the same through ``apptainer exec X.sif python3`` (the cpu image's
  SIF);
- ``sqsh``: ``--container-image=X.sqsh`` (``make sqfs``'s SquashFS, unnamed: pyxis starts it
  on the file mounted by squashfuse, every step alike);
- ``named``: ``--container-name=bench`` made from the SquashFS by round 0's step (enroot
  unpacks it on every node), reused by the later rounds' steps;
- ``dockerd`` (debian13, at ``--dockerd-nodes`` only: each node imports the image, ~30 s of
  CPU here):
  round 0 ``--container-image=dockerd://TAG --container-name=dk`` (what the Plan writes for a
  registry's image: ``enroot import`` from the sandbox's dockerd, then ``create``), the later
  rounds reuse ``dk``.

A step's start: from just before ``srun`` to the last rank's ``T`` line. ``--program
first-line`` (PROG): the rank's first Python line, the container's own cost and nothing else;
``--program ready`` (READY): ChainerMN's ``create_communicator`` and one allreduce done, what a
training step waits for (on debian13 without ``bare``: its root has no Chainer). Round 0 is the
"first step", the median of the later rounds the "later step". pyxis's own log lines on every
node (slurmd's log: importing/imported, creating, "completed container setup in N ms", starting)
split the dockerd step into import and create. As root (the sandbox's dockerd socket is root's).
``python -m bench.pyxis_startup --nodes 1,2,4,8,16 --out bench/pyxis_startup.json``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from chainermn_rt.arguments import Parser, integer, output_file
from chainermn_rt.quoting import sh
from chainermn_rt.sandbox import Sandbox

SITES = {"debian13": "sandbox-pyxis-debian13", "debian12": "sandbox-pyxis"}
PROG = "import time; print('T', time.time(), flush=True)"
READY = ("import time, chainermn; c = chainermn.create_communicator('naive'); "
         "c.mpi_comm.allreduce(1); print('T', time.time(), flush=True)")
PROGRAMS = {"first-line": PROG, "ready": READY}
# the batch job: run each step, print one JSON line per step (the k-th srun is step k)
DRIVER = r'''#!/usr/bin/python3
import json, os, subprocess, sys, time
plan = json.loads(sys.argv[1])
# pyxis hands enroot the job's variables: the submitter's DOCKER_HOST would beat the node's
env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
env.update(json.loads(sys.argv[2]))  # the profile's [environment]: Open MPI's settings
for step, (name, rnd, argv) in enumerate(plan):
    t0 = time.time()
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    t1 = time.time()
    ts = [float(l.split()[1]) for l in p.stdout.splitlines() if l.startswith("T ")]
    print(json.dumps({"step": step, "name": name, "round": rnd, "rc": p.returncode,
                      "ranks": len(ts), "start_s": (max(ts) - t0) if ts else None,
                      "srun_s": t1 - t0, "err": p.stderr[-400:]}), flush=True)
'''
LOG_LINE = re.compile(r"^\[(\S+)\] \[(\d+)\.(\d+)\] pyxis: (importing docker image|imported "
                      r"docker image|creating container filesystem|completed container setup in "
                      r"(\d+) ms|starting container)")


def steps(nodes: int, rounds: int, sqsh: Path, sif: Path | None, docker: str | None,
          python: str | None = "/usr/bin/python3", prog: str = PROG) -> list:
    """(name, round, argv) in order: every configuration once per round, rotated; no ``sif``
    where ``sif`` is None, no ``bare`` where ``python`` is None."""
    srun = ["srun", "--mpi=pmix", f"--nodes={nodes}", "--ntasks-per-node=1"]
    pyxis = ["--no-container-mount-home"]
    py = ["python3", "-c", prog]
    out = []
    for r in range(rounds):
        configs = [
            *([("bare", [*srun, python, "-c", prog])] if python else []),
            *([("sif", [*srun, "apptainer", "exec", str(sif), *py])] if sif else []),
            ("sqsh", [*srun, f"--container-image={sqsh}", *pyxis, *py]),
            ("named", [*srun, *([f"--container-image={sqsh}"] if r == 0 else []),
                       "--container-name=bench", *pyxis, *py]),
        ]
        if docker:
            configs.append(("dockerd", [*srun, *([f"--container-image=dockerd://{docker}"]
                                                 if r == 0 else []),
                                        "--container-name=dk", *pyxis, *py]))
        shift = r % len(configs)
        out += [(name, r, argv) for name, argv in configs[shift:] + configs[:shift]]
    return out


def pyxis_log(sb: Sandbox, job: str) -> dict[int, dict]:
    """Per step of ``job``: the slowest node's import, create and setup (s), from each node's
    slurmd log."""
    found: dict[int, dict[str, list]] = {}
    for node in sb.settings.node_names():
        marks: dict[int, dict[str, float]] = {}
        path = sb.state_dir / "log" / f"slurmd-{node}.log"
        for line in path.read_text(errors="replace").splitlines():
            m = LOG_LINE.match(line)
            if not m or m.group(2) != job:
                continue
            at = datetime.fromisoformat(m.group(1)).timestamp()
            step = marks.setdefault(int(m.group(3)), {})
            what = m.group(4).split()[0]
            step[what] = at
            if m.group(5):
                step["setup_s"] = int(m.group(5)) / 1e3
        for step, t in marks.items():
            row = found.setdefault(step, {})
            if "importing" in t and "imported" in t:
                row.setdefault("import_s", []).append(t["imported"] - t["importing"])
            if "creating" in t and "completed" in t:
                row.setdefault("create_s", []).append(t["completed"] - t["creating"])
            if "setup_s" in t:
                row.setdefault("setup_s", []).append(t["setup_s"])
    return {s: {k: max(v) for k, v in row.items()} for s, row in found.items()}


def run_nodes(nodes: int, rounds: int, tmp: Path, sqsh: Path, sif: Path | None,
              docker: str | None, site: str, python: str | None, prog: str) -> dict:
    tmp.mkdir(mode=0o755)
    sb = Sandbox.from_profile(site, nodes=nodes, state_dir=tmp / "state")
    t = time.perf_counter()
    sb.up()
    row: dict = {"nodes": nodes, "up_s": time.perf_counter() - t,
                 "docker": sb._record().get("docker")}
    try:
        folder = tmp / f"job-{nodes}"
        folder.mkdir(mode=0o755)
        driver = folder / "driver.py"
        driver.write_text(DRIVER)
        driver.chmod(0o755)
        plan = steps(nodes, rounds, sqsh, sif, docker, python, prog)
        script = folder / "job.sh"
        script.write_text(f"#!/bin/sh\nexec {sh(str(driver))} {sh(json.dumps(plan))} "
                          f"{sh(json.dumps(sb.site.environment))}\n")
        job = sb.slurm.submit(script, [f"--nodes={nodes}", "--time=30", "--exclusive",
                                       f"--output={folder}/out.txt"], cwd=folder)
        state = sb.slurm.wait(job, timeout=1800, poll=1)
        lines = [json.loads(x) for x in (folder / "out.txt").read_text().splitlines()
                 if x.startswith("{")]
        logged = pyxis_log(sb, job)
        for r in lines:
            r |= logged.get(r["step"], {})
        row["state"] = list(state)
        row["steps"] = lines
    finally:
        sb.down()
        time.sleep(1)
    return row


def summary(row: dict) -> dict:
    """first: round 0's start; later: the median of the later rounds' (s); ratios."""
    out: dict = {"nodes": row["nodes"]}
    by: dict[str, dict[int, float]] = {}
    for s in row["steps"]:
        if s["rc"] == 0 and s["ranks"] == row["nodes"]:
            by.setdefault(s["name"], {})[s["round"]] = s["start_s"]
        else:
            out.setdefault("failed", []).append(f"{s['name']} round {s['round']}: rc {s['rc']}, "
                                                f"{s['ranks']} ranks: {s['err'][-200:]}")
    for name, starts in by.items():
        later = [v for r, v in starts.items() if r > 0]
        out[f"{name}_first_s"] = starts.get(0)
        out[f"{name}_later_s"] = statistics.median(later) if later else None
    for s in row["steps"]:
        if s["name"] == "dockerd" and s["round"] == 0:
            out |= {f"dockerd_{k}": s.get(k) for k in ("import_s", "create_s", "setup_s")}
            if out["dockerd_import_s"] is None and s.get("setup_s") and s.get("create_s"):
                # pyxis logs "importing" only for a step of 1 task: setup less create
                out["dockerd_import_s"] = s["setup_s"] - s["create_s"]
        if s["name"] == "named" and s["round"] == 0:
            out |= {f"named_{k}": s.get(k) for k in ("create_s", "setup_s")}

    def ratio(a: str, b: str) -> float | None:
        x, y = out.get(a), out.get(b)
        return x / y if x and y else None
    out["ratio_sqsh_first_vs_sif_first"] = ratio("sqsh_first_s", "sif_first_s")
    out["ratio_sqsh_first_vs_bare_first"] = ratio("sqsh_first_s", "bare_first_s")
    out["ratio_dockerd_first_vs_sif_first"] = ratio("dockerd_first_s", "sif_first_s")
    out["ratio_named_first_vs_sif_first"] = ratio("named_first_s", "sif_first_s")
    out["ratio_sqsh_later_vs_bare_later"] = ratio("sqsh_later_s", "bare_later_s")
    out["ratio_named_later_vs_bare_later"] = ratio("named_later_s", "bare_later_s")
    out["ratio_dockerd_later_vs_bare_later"] = ratio("dockerd_later_s", "bare_later_s")
    out["ratio_sif_later_vs_bare_later"] = ratio("sif_later_s", "bare_later_s")
    return out


def docker_image(given: str | None) -> str:
    if given:
        return given
    from containers.build import tag  # the checkout's cpu image
    return tag("cpu")


def main() -> int:
    parser = Parser(prog="bench.pyxis_startup", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", choices=sorted(SITES), default="debian13",
                        help="the sandbox's stack (debian12: no Apptainer, no dockerd://)")
    parser.add_argument("--program", choices=sorted(PROGRAMS), default="first-line",
                        help="what a rank runs: its first Python line, or ChainerMN's "
                             "communicator and one allreduce (debian13: no bare metal)")
    parser.add_argument("--nodes", default="1,2,4,8,16", help="node counts, each 1-32")
    parser.add_argument("--dockerd-nodes", default=None,
                        help="the node counts that also import from dockerd:// (each node "
                             "imports the image; debian13 only; default 1,2 there)")
    parser.add_argument("--rounds", type=integer(2, 20), default=4,
                        help="steps per configuration (round 0: the first step)")
    parser.add_argument("--sqsh", type=Path, default=Path("build/images/chainermn-rt-cpu.sqfs"))
    parser.add_argument("--sif", type=Path, default=Path("build/images/chainermn-rt-cpu.sif"))
    parser.add_argument("--docker-image", default=None,
                        help="the dockerd's image (default: the checkout's cpu image's tag)")
    parser.add_argument("--out", type=Path, default=Path("bench/pyxis_startup.json"))
    args = parser.parse_args()
    try:
        counts = [integer(1, 32)(n) for n in args.nodes.split(",")]
        given = args.dockerd_nodes if args.dockerd_nodes is not None else (
            "1,2" if args.stack == "debian13" else "")
        dockerd = {integer(1, 32)(n) for n in given.split(",") if n}
    except Exception as err:  # noqa: BLE001 - argparse's type errors
        parser.error(f"--nodes/--dockerd-nodes: {err}")
    apptainer = args.stack == "debian13"
    if not apptainer and dockerd:
        parser.error("--dockerd-nodes: allowed only with --stack debian13 (its nodes reach the "
                     "dockerd); give --dockerd-nodes ''")
    for path, what in ((args.sqsh, "--sqsh"), *(((args.sif, "--sif"),) if apptainer else ())):
        if not path.is_file():
            parser.error(f"{what}: {path} is not a file (make sqfs / make sif FLAVOR=cpu)")
    if not os.environ.get("DOCKER_HOST", "").startswith("unix://") and dockerd:
        parser.error("DOCKER_HOST: unix://SOCKET of the dockerd holding --docker-image "
                     "(python -m containers.dockerd start prints it)")
    out = output_file(args.out, "--out")
    site = SITES[args.stack]
    # bare metal's Python: ready's needs Chainer, which the debian13 root has not (no bare there)
    python = sys.executable if not apptainer else (
        "/usr/bin/python3" if args.program == "first-line" else None)
    result: dict = {"load_before": os.getloadavg(), "stack": args.stack, "site": site,
                    "program": args.program, "bare_python": python, "rounds": args.rounds,
                    "utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    with tempfile.TemporaryDirectory(prefix="pyxis-startup-", dir="/tmp") as tmp:
        os.chmod(tmp, 0o755)
        images = Path(tmp) / "images"  # the nodes see /tmp (not the checkout's build/)
        images.mkdir()
        sqsh, sif = images / "cpu.sqsh", (images / "cpu.sif" if apptainer else None)
        shutil.copyfile(args.sqsh, sqsh)
        if sif:
            shutil.copyfile(args.sif, sif)
        image = docker_image(args.docker_image) if dockerd else None
        result["docker_image"] = image
        rows = []
        for nodes in counts:
            row = run_nodes(nodes, args.rounds, Path(tmp) / f"n{nodes}", sqsh, sif,
                            image if nodes in dockerd else None, site, python,
                            PROGRAMS[args.program])
            row["summary"] = summary(row)
            rows.append(row)
            print(json.dumps(row["summary"]), flush=True)
            # after every node count: a later one that fails or runs out of time keeps these
            result["runs"], result["load_after"] = rows, os.getloadavg()
            out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
