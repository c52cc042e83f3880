"""SIF build times and sizes (issue 34): a flavour's SIF made by `make sif`'s code, from the built
Docker image (``docker save`` + ``apptainer build docker-archive:``) and from the generated
definition alone (``Bootstrap: debootstrap`` from the host's mirror, pip from PyPI), each then
checked: its environment (``apptainer exec --cleanenv ... env``) and its chainermn-rt labels the
same for both, VERSIONS the committed one, ``chainermn-rt doctor --image X.sif`` passing.

The definition's build takes minutes on 2 cores (it bootstraps Debian twice and compiles the
patched chainer wheel, as the Docker build does): this is why it is here and not in the test
suite.
Run: ``python -m bench.sif_build [--flavor cpu] [--how image definition]`` (the image first:
``make image FLAVOR=cpu``). Prints one JSON object (bench/RESULTS.md records them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time

from chainermn_rt import apptainer, sif
from containers import build as image_build


def _exec(runner: apptainer.Apptainer, image, *argv: str) -> str:
    proc = runner.run(["exec", "--cleanenv", str(image), *argv], binds=[image.parent],
                      capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"apptainer exec {image} {' '.join(argv)}: {proc.stderr[-2000:]}")
    return proc.stdout


def measure(flavor: str, how: str, runner: apptainer.Apptainer) -> dict:
    path, seconds = image_build.sif(flavor, from_image=how == "image")
    kept = path.with_name(f"{path.stem}-from-{how}.sif")
    shutil.copyfile(path, kept)  # the next build replaces `path`
    env = dict(line.split("=", 1) for line in _exec(runner, kept, "env").splitlines()
               if "=" in line and not line.startswith(("APPTAINER_", "SINGULARITY_")))
    versions = _exec(runner, kept, "cat", "/opt/chainermn_rt/VERSIONS")
    doctor = subprocess.run([sys.executable, "-m", "chainermn_rt", "doctor", "--image",
                             str(kept), "--flavor", flavor, "--json"], capture_output=True,
                            text=True, timeout=600)
    labels = {k: v for k, v in sif.read_labels(kept).items()
              if k.startswith(("io.chainermn-rt.", "org.opencontainers."))}
    return {"how": how, "seconds": round(seconds, 1), "mb": round(kept.stat().st_size / 1e6, 1),
            "file": str(kept), "env": env, "labels": labels,
            "versions_match": versions == (image_build.REPO / "containers" / flavor /
                                           "VERSIONS").read_text(),
            "doctor_exit": doctor.returncode,
            "doctor": {c["name"]: c["status"] for c in json.loads(doctor.stdout or "[]")}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flavor", default="cpu")
    parser.add_argument("--how", nargs="+", default=["image", "definition"],
                        choices=["image", "definition"])
    args = parser.parse_args()
    runner = apptainer.find(say=print)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load = os.getloadavg()
    runs = [measure(args.flavor, how, runner) for how in args.how]
    summary = {"flavor": args.flavor, "apptainer": runner.where, "started": started,
               "machine": f"{platform.node()}, {os.cpu_count()} cores", "load_before":
               [round(x, 1) for x in load], "load_after": [round(x, 1) for x in os.getloadavg()],
               "runs": [{k: v for k, v in r.items() if k not in ("env", "labels")} for r in runs]}
    if len(runs) == 2:
        summary["same_env"] = runs[0]["env"] == runs[1]["env"]
        summary["env_differs"] = {k: (runs[0]["env"].get(k), runs[1]["env"].get(k))
                                  for k in runs[0]["env"].keys() | runs[1]["env"].keys()
                                  if runs[0]["env"].get(k) != runs[1]["env"].get(k)}
        summary["same_labels"] = runs[0]["labels"] == runs[1]["labels"]
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
