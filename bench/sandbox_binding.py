"""`make demo`'s MNIST job on the sandbox under two CPU bindings of its 2 x 2 ranks.

``shared``: the sandbox profile as shipped before (GPUs 0 and 1 of a node on CPU 0, so both
ranks of a node share one core); ``spread``: the profile as shipped now (GPU 0 on CPU 0,
GPU 1 on CPU 1). Each round runs the same rendered job once per binding, in turn, so a change
in the machine's load hits both; prints the images/s of each run and their median, then one
JSON line. Needs the sandbox up (``make sandbox-up``).

Run: ``python -m bench.sandbox_binding [--rounds 3] [--iterations 100]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

from chainermn_rt.sandbox import Sandbox
from examples.sandbox_demo import run_demo

REPO = Path(__file__).resolve().parent.parent

SPREAD = '''[topology.fake4]
slots = [
  { gpu = 0, numa = 0, cpus = "0", hcas = ["sbx_ib0:1"] },
  { gpu = 1, numa = 0, cpus = "1", hcas = ["sbx_ib1:1"] },
  { gpu = 2, numa = 0, cpus = "0", hcas = ["sbx_ib0:1"] },
  { gpu = 3, numa = 0, cpus = "1", hcas = ["sbx_ib1:1"] },
]'''
SHARED = '''[topology.fake4]
slots = [
  { gpu = 0, numa = 0, cpus = "0", hcas = ["sbx_ib0:1"] },
  { gpu = 1, numa = 0, cpus = "0", hcas = ["sbx_ib0:1"] },
  { gpu = 2, numa = 0, cpus = "1", hcas = ["sbx_ib1:1"] },
  { gpu = 3, numa = 0, cpus = "1", hcas = ["sbx_ib1:1"] },
]'''
THROUGHPUT = re.compile(r"throughput: ([\d.]+) images/s")


def profiles(folder: Path) -> dict[str, Path]:
    shipped = (REPO / "slurm" / "sites" / "sandbox.toml").read_text()
    if SPREAD not in shipped:
        sys.exit("bench: the shipped sandbox profile's fake4 topology changed; update SPREAD")
    paths = {}
    for name, topology in (("shared", SHARED), ("spread", SPREAD)):
        paths[name] = folder / f"sandbox-{name}.toml"
        paths[name].write_text(shipped.replace(SPREAD, topology))
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=100)
    args = parser.parse_args()
    sandbox = Sandbox.from_profile()
    sandbox.client()  # says how to start it when it is down
    results: dict[str, list[float]] = {"shared": [], "spread": []}
    with tempfile.TemporaryDirectory() as tmp:
        sites = profiles(Path(tmp))
        for round_ in range(args.rounds):
            for name, site in sites.items():
                out = Path(tmp) / f"{name}-{round_}"
                out.mkdir()
                text = io.StringIO()
                with contextlib.redirect_stdout(text):
                    status = run_demo(sandbox, out, args.iterations, site=str(site))
                found = THROUGHPUT.search(text.getvalue())
                if status != 0 or not found:
                    print(text.getvalue(), file=sys.stderr)
                    return 1
                results[name].append(float(found.group(1)))
                print(f"round {round_} {name}: {found.group(1)} images/s", flush=True)
    medians = {name: statistics.median(v) for name, v in results.items()}
    print(f"median images/s: shared {medians['shared']:.0f}, spread {medians['spread']:.0f}, "
          f"spread/shared {medians['spread'] / medians['shared']:.2f}")
    print(json.dumps({"runs": results, "median": medians,
                      "ratio_spread_vs_shared": medians["spread"] / medians["shared"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
