"""``make demo``: ChainerMN MNIST on 2 sandbox nodes x 2 ranks, from a rendered job script.

Brings the sandbox up (or reuses it), renders the job with ``chainermn-rt render``, submits
it, waits for Slurm's record of the final state, then prints where each rank ran, the
training log and the final accuracy::

    python -m chainermn_rt.sandbox.demo [--out build/demo] [--iterations 200]
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

from chainermn_rt.rank import VERBOSE_VAR
from chainermn_rt.sandbox import Sandbox
from chainermn_rt.site import data_dir

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # PrintReport's terminal codes


def example() -> Path:
    """examples/train_mnist.py of this checkout."""
    return data_dir().parent / "examples" / "train_mnist.py"


def render_job(out: Path, iterations: int, python: str = sys.executable) -> tuple[Path, list]:
    """Write ``out/mnist.sh`` with ``chainermn-rt render``; returns it and the command used."""
    script = out / "mnist.sh"
    train = [python, str(example()), "--iterations", str(iterations), "--log-every",
             str(max(iterations // 5, 1)), "--no-progress", "--unit", "100",
             "--n-train", "6000", "--n-test", "1000", "--out", str(out / "result")]
    argv = [python, "-m", "chainermn_rt", "render", "--site", "sandbox", "--nodes", "2",
            "--gpus-per-node", "2", "--time", "10", "--job-name", "mnist-demo",
            "--python", python, "--env", "OMP_NUM_THREADS=1",
            "--env", f"{VERBOSE_VAR}=1",  # each rank says where it runs
            "--output", str(script), "--", *train]
    subprocess.run(argv, check=True)
    return script, argv


def final_accuracy(result_dir: Path) -> dict[str, float]:
    """The last LogReport entry's accuracies (rank 0 writes ``result/log``)."""
    entries = json.loads((result_dir / "log").read_text())
    last = entries[-1]
    return {k: last[k] for k in ("main/accuracy", "validation/main/accuracy") if k in last}


def run_demo(sandbox: Sandbox, out: Path, iterations: int) -> int:
    """Render, submit and report the MNIST job on a sandbox that is up; 0 if it COMPLETED."""
    script, render_argv = render_job(out, iterations)
    print(f"\n== 2/4 job script {script}, rendered by:\n"
          f"{shlex.join(['chainermn-rt', *render_argv[3:]])}", flush=True)
    started = time.monotonic()
    job = sandbox.submit(script, cwd=out)
    print(f"\n== 3/4 submitted job {job}; waiting for its record", flush=True)
    state = sandbox.wait(job, timeout=900)
    print(f"job {job}: {state.state}, exit code {state.exit_code}, "
          f"{time.monotonic() - started:.0f} s", flush=True)
    text = ANSI.sub("", sandbox.output(job))
    ranks = sorted(ln for ln in text.splitlines() if ln.startswith("rank ") and " on " in ln)
    print("\n== 4/4 results\nwhere each rank ran:")
    print("\n".join(f"  {line}" for line in ranks) or "  (no rank reported)")
    print(f"training log ({sandbox.output_path(job)}):")
    print("\n".join(f"  {line}" for line in text.splitlines() if line not in ranks))
    if state != ("COMPLETED", 0):
        print(f"demo FAILED: job {job} ended {state.state} with exit code {state.exit_code}")
        return 1
    accuracy = final_accuracy(out / "result")
    print("final accuracy: " + ", ".join(f"{k} {v:.4f}" for k, v in accuracy.items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/demo"),
                        help="job script, job output and training results")
    parser.add_argument("--iterations", type=int, default=100)
    args = parser.parse_args(argv)
    out = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    sandbox = Sandbox.from_profile()
    print("== 1/4 the Slurm sandbox\n" + sandbox.up(), flush=True)
    return run_demo(sandbox, out, args.iterations)


if __name__ == "__main__":
    sys.exit(main())
