"""What an install costs a user: ``module load`` under Lmod and Environment Modules, and
``python3 -c pass`` through the install's wrapper against the same interpreter direct.

    python -m bench.modules --prefix PREFIX --version 0.1.0-cpu [--modulecmd PATH] [--repeat 20]

Rounds are interleaved (each round runs every case once); medians in ms. The wrapper's
``direct`` case is what the wrapper execs: the venv's python3 (runtime none), or ``ch-run``
of the image with the same binds and its python3 (charliecloud).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import time
from pathlib import Path

LMOD_INIT = "/usr/share/lmod/lmod/init/bash"


def _cases(prefix: Path, version: str, modulecmd: Path | None) -> dict[str, list[str]]:
    load = f"module load chainermn-rt/{version}"
    cases = {"lmod: module load": ["bash", "-c", f"source {LMOD_INIT}; module use "
                                   f"{prefix / 'modulefiles'}; {load}"],
             "lmod: init only": ["bash", "-c", f"source {LMOD_INIT}"]}
    if modulecmd is not None:
        cases["environment modules: module load"] = [
            "bash", "-c", f'export MODULEPATH={prefix / "modulefiles-tcl"}; '
            f'eval "$(tclsh {modulecmd} bash load chainermn-rt/{version})"']
    wrapper = prefix / "chainermn-rt" / version / "bin" / "python3"
    cases["python3 -c pass: the wrapper"] = [str(wrapper), "-c", "pass"]
    exec_line = wrapper.read_text().splitlines()[-1]  # exec ARGV... "$@"
    direct = shlex.split(exec_line.removeprefix("exec ").removesuffix(' "$@"'))
    cases["python3 -c pass: what it execs"] = [*direct, "-c", "pass"]
    return cases


def measure(cases: dict[str, list[str]], repeat: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, argv in cases.items():
            start = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", type=Path, required=True)
    parser.add_argument("--version", required=True, help="e.g. 0.1.0-cpu")
    parser.add_argument("--modulecmd", type=Path, help="Environment Modules' modulecmd.tcl")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    results = measure(_cases(args.prefix, args.version, args.modulecmd), args.repeat)
    print(f"| case (median of {args.repeat}, interleaved) | ms |\n| --- | ---: |")
    for name, ms in results.items():
        print(f"| {name} | {ms:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
