"""``make demo``: ChainerMN MNIST (train_mnist.py beside this file) on 2 sandbox nodes x 2 ranks.

Brings the local Slurm sandbox up (or reuses it), renders the job with ``chainermn-rt
render --site sandbox --timeline``, submits it, waits for Slurm's final state, then prints where
each rank ran, the training log, the throughput and the final accuracy, and ends with where
the job's report page is (``chainermn-rt report``: where its time went, rank by rank)::

    python examples/sandbox_demo.py [--out build/demo] [--iterations 100]
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from chainermn_rt.errors import JobFailed
from chainermn_rt.rank_contract import TIMELINE_FOLDER, VERBOSE_VAR
from chainermn_rt.sandbox import Sandbox
from chainermn_rt.submission import Cluster

HERE = Path(__file__).resolve().parent
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # PrintReport's terminal codes
STARTED = " ranks, communicator "  # train_mnist.py's first line once MPI has started


def render_job(out: Path, iterations: int, site: str = "sandbox",
               python: str = sys.executable) -> tuple[Path, list[str]]:
    """Write ``out/mnist.sh`` with ``chainermn-rt render``; returns it and the command used."""
    script = out / "mnist.sh"
    train = [python, str(HERE / "train_mnist.py"), "--iterations", str(iterations),
             "--log-every", str(max(iterations // 5, 1)), "--no-progress", "--unit", "100",
             "--n-train", "6000", "--n-test", "1000", "--out", str(out / "result")]
    argv = ["chainermn-rt", "render", "--site", site, "--nodes", "2", "--gpus-per-node", "2",
            "--time", "10", "--job-name", "mnist-demo", "--python", python, "--timeline",
            "--env", "OMP_NUM_THREADS=1",
            "--env", f"{VERBOSE_VAR}=1",  # each rank says where it runs
            "--output", str(script), "--", *train]
    subprocess.run([python, "-m", "chainermn_rt", *argv[1:]], check=True)
    return script, argv


def final_accuracy(result_dir: Path) -> dict[str, float]:
    """The last LogReport entry's accuracies (rank 0 writes ``result/log``)."""
    last = json.loads((result_dir / "log").read_text())[-1]
    return {k: last[k] for k in ("main/accuracy", "validation/main/accuracy") if k in last}


def run_demo(sandbox: Sandbox, out: Path, iterations: int, site: str = "sandbox") -> int:
    """Render, submit and report the MNIST job on a sandbox that is up; 0 if it COMPLETED."""
    script, render_argv = render_job(out, iterations, site)
    print(f"\n== 2/4 job script {script}, rendered by:\n{shlex.join(render_argv)}", flush=True)
    started = time.monotonic()
    print(f"\n== 3/4 sbatch {script.name}; waiting for the job's final state", flush=True)
    try:
        job, state, log, text = Cluster(sandbox.site, sandbox.client()).run(
            script, cwd=out, started=STARTED, timeout=900,
            say=lambda line: print(line, flush=True))
    except JobFailed as err:
        print(f"demo FAILED: {err}")
        return 1
    print(f"job {job}: {state.state}, exit code {state.exit_code}, "
          f"{time.monotonic() - started:.0f} s", flush=True)
    text = ANSI.sub("", text)
    ranks = sorted(ln for ln in text.splitlines() if ln.startswith("rank ") and " on " in ln)
    print("\n== 4/4 results\nwhere each rank ran:")
    print("\n".join(f"  {line}" for line in ranks) or "  (no rank reported)")
    print(f"training log ({log}):")
    print("\n".join(f"  {line}" for line in text.splitlines() if line not in ranks))
    if state != ("COMPLETED", 0):
        print(f"demo FAILED: job {job} ended {state.state} with exit code {state.exit_code}")
        return 1
    accuracy = final_accuracy(out / "result")
    print("final accuracy: " + ", ".join(f"{k} {v:.4f}" for k, v in accuracy.items()))
    return report(out, job, shown=text)


def report(out: Path, job: str, shown: str = "") -> int:
    """``chainermn-rt report`` of the job's timeline (``out/timeline/JOB``); 0 if written.
    Its lines that the job's log ``shown`` holds already (the slow-node line: rank 0 prints
    it at the end of training, the report from the records) are not printed again."""
    folder = out / TIMELINE_FOLDER / job
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "report", str(folder)],
                          capture_output=True, text=True)
    seen = set(shown.splitlines())
    print("".join(line for line in (proc.stdout + proc.stderr).splitlines(keepends=True)
                  if line.rstrip("\n") not in seen), end="", flush=True)
    if proc.returncode != 0:
        print(f"demo FAILED: no report of job {job}'s timeline")
        return 1
    print(f"where the job's time went, rank by rank: {folder / 'report.html'} (open it in a "
          f"browser; `chainermn-rt timeline {folder}` writes the trace for Perfetto's UI)",
          flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="ChainerMN MNIST on 2 nodes x 2 ranks of the local Slurm sandbox")
    parser.add_argument("--out", type=Path, default=Path("build/demo"),
                        help="job script, job output and training results (default: %(default)s)")
    parser.add_argument("--iterations", type=int, default=100)
    args = parser.parse_args(argv)
    out = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    sandbox = Sandbox.from_profile()
    print("== 1/4 the Slurm sandbox: chainermn-rt sandbox up\n" + sandbox.up(), flush=True)
    return run_demo(sandbox, out, args.iterations)


if __name__ == "__main__":
    sys.exit(main())
