"""Read the images' source of truth: containers/versions.toml and the Python pins of pyproject.toml.

Example::

    >>> load()["debian"]["suite"]
    'bookworm'
    >>> python_pins()["chainer"]
    '7.8.1'
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSIONS = HERE / "versions.toml"
PYPROJECT = HERE.parent / "pyproject.toml"


def load(path: Path = VERSIONS) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def _pins(requirements: list[str]) -> dict[str, str]:
    pins = {}
    for req in requirements:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*==\s*([^;\s]+)\s*", req)
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


def python_pins(extras: tuple[str, ...] = (), path: Path = PYPROJECT) -> dict[str, str]:
    """``name -> version`` for the ``==`` pins of the dependencies (and the named extras)."""
    with open(path, "rb") as f:
        project = tomllib.load(f)["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return _pins(reqs)


def pip_pin(makefile: Path = HERE.parent / "Makefile") -> str:
    """The pip that builds the patched chainer: the one pin the Makefile's venv target holds."""
    match = re.search(r"--upgrade pip==(\S+)", makefile.read_text())
    if not match:
        raise ValueError(f"no `--upgrade pip==VERSION` in {makefile}")
    return match.group(1)


def package_version(path: Path = PYPROJECT) -> str:
    with open(path, "rb") as f:
        return tomllib.load(f)["project"]["version"]
