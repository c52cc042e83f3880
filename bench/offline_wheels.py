"""Wheels for bench/gpu_check.sh on an offline GPU machine with its own Python 3.12.

Builds the patched chainer wheel and the chainermn_rt wheel here, and downloads the
pure-Python dependencies they and the GPU tests need (pins from pyproject.toml) for
CPython 3.12 on x86-64 Linux. NumPy, CuPy, mpi4py and PyTorch are the machine's own.

    python bench/offline_wheels.py --out build/offline-wheels     # `make offline-wheels`
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from containers.versions import python_pins  # noqa: E402

LIMIT = 64 * 2**20
# what chainer, chainermn_rt and the GPU tests import beyond NumPy, CuPy, mpi4py and PyTorch
DEPENDENCIES = ("six", "filelock", "protobuf", "typing-extensions", "jinja2", "markupsafe",
                "packaging", "tqdm", "pytest", "hypothesis")
TARGET = ("--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
          "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
          "--only-binary=:all:")


def build(out: Path) -> list[Path]:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    python = sys.executable
    subprocess.run([python, "-m", "chainermn_rt.compat.build_chainer", "--out", str(out)],
                   check=True, cwd=REPO)
    subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(REPO)], check=True)
    pins = python_pins(("test",))
    subprocess.run([python, "-m", "pip", "download", "-q", "-d", str(out), *TARGET,
                    *(f"{name}=={pins[name]}" for name in DEPENDENCIES)], check=True)
    return sorted(out.glob("*.whl"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "offline-wheels")
    args = parser.parse_args(argv)
    wheels = build(args.out)
    size = sum(w.stat().st_size for w in wheels)
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
    print(f"{size / 2**20:7.2f} MiB  in {args.out} ({len(wheels)} wheels)")
    if size > LIMIT:
        print(f"offline_wheels: {size / 2**20:.1f} MiB is over the {LIMIT // 2**20} MiB a copy "
              "may carry", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
