"""Build the patched chainer wheel: PyPI's chainer 7.8.1 sdist plus the modern-stack fixes.

Standard library and pip only, so it runs from a source checkout before anything is
installed (``make venv``, container recipes). A current wheel already in ``--out``
is reused, so a second run takes a moment.

Example::

    python -m chainermn_rt.compat.build_chainer --out build/wheels
    pip install --find-links build/wheels chainer==7.8.1   # installs 7.8.1+rt<digest>
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from chainermn_rt.compat import chainer_fixes as fixes

# pip prepares the metadata of the *unpatched* sdist while downloading it, which runs its
# setup.py and so needs pkg_resources: only that step gets setuptools<82. The patched
# sdist builds with any setuptools.
_DOWNLOAD_BUILD_CONSTRAINT = "setuptools<82\n"


def wheel_name() -> str:
    """File name of the patched wheel, e.g. ``chainer-7.8.1+rt84584d59-py3-none-any.whl``."""
    return f"chainer-{fixes.wheel_version()}-py3-none-any.whl"


def is_current(wheel: Path) -> bool:
    """True when ``wheel`` carries exactly the current fix set (its marker module matches)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            marker = archive.read(fixes.MARKER_MODULE).decode("utf-8")
    except (OSError, KeyError, zipfile.BadZipFile):
        return False
    return marker == fixes.marker_source(fixes.FIXES)


def _run(argv: list[str], **kwargs) -> None:
    print("build_chainer: " + " ".join(argv), flush=True)
    subprocess.run(argv, check=True, **kwargs)


def sdist_path(out: Path) -> Path:
    """Where the pristine, checksum-verified sdist is kept (a subfolder: pip's
    ``--find-links out`` does not look into it)."""
    return out / "sdist" / f"chainer-{fixes.CHAINER_VERSION}.tar.gz"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def download_sdist(out: Path) -> Path:
    """``pip download`` the pristine sdist into ``sdist_path(out)`` unless it is there."""
    sdist = sdist_path(out)
    if sdist.is_file() and _sha256(sdist) == fixes.SDIST_SHA256:
        return sdist
    sdist.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="chainer-download-") as tmp:
        _pip_download(Path(tmp))
        fetched = Path(tmp) / sdist.name
        digest = _sha256(fetched)
        if digest != fixes.SDIST_SHA256:
            raise fixes.FixError(f"{sdist.name}: sha256 {digest}, expected {fixes.SDIST_SHA256}")
        fetched.replace(sdist)
    return sdist


def _pip_download(dest: Path) -> None:
    constraint = dest / "download-build-constraint.txt"
    constraint.write_text(_DOWNLOAD_BUILD_CONSTRAINT)
    env = dict(os.environ, PIP_BUILD_CONSTRAINT=str(constraint))
    if "PIP_CONSTRAINT" not in env:  # pip < 25.3 passes only this one to build environments
        env["PIP_CONSTRAINT"] = str(constraint)
    _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
          "--no-binary", "chainer", f"chainer=={fixes.CHAINER_VERSION}", "--dest", str(dest)],
         env=env)


def unpack(sdist: Path, dest: Path) -> Path:
    """Unpack ``sdist`` under ``dest``; return its top directory."""
    with tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(dest, filter="data")
        else:  # Python < 3.10.12 / 3.11.4
            archive.extractall(dest)  # noqa: S202 - checksum-verified PyPI sdist
    return dest / f"chainer-{fixes.CHAINER_VERSION}"


def build(out: Path) -> Path:
    """Return the patched wheel in ``out``, building it unless a current one is there."""
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / wheel_name()
    if wheel.is_file() and is_current(wheel):
        print(f"build_chainer: {wheel} is current", flush=True)
        return wheel
    for stale in out.glob(f"chainer-{fixes.CHAINER_VERSION}*.whl"):
        stale.unlink()
    with tempfile.TemporaryDirectory(prefix="chainer-build-") as tmp:
        tmp_path = Path(tmp)
        source = unpack(download_sdist(out), tmp_path)
        applied = fixes.apply_all(source)
        print(f"build_chainer: applied {len(applied)} fixes", flush=True)
        # No ChainerX (C++): chainer's setup.py builds it only when asked to.
        env = dict(os.environ, CHAINER_BUILD_CHAINERX="0")
        _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
              "--wheel-dir", str(out), str(source)], env=env)
    if not (wheel.is_file() and is_current(wheel)):
        raise fixes.FixError(f"pip wheel did not produce {wheel} with the current fixes")
    print(f"build_chainer: built {wheel}", flush=True)
    return wheel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chainermn_rt.compat.build_chainer",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the wheel")
    args = parser.parse_args(argv)
    try:
        build(args.out.resolve())
    except (fixes.FixError, subprocess.CalledProcessError) as err:
        print(f"build_chainer: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
