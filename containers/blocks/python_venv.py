"""The image's Python: Debian's (or Ubuntu's) python3 with one venv under the image prefix.

Example::

    >>> build("/opt/x", "26.3")[0].commands
    ('python3 -m venv /opt/x/venv', '/opt/x/venv/bin/pip install --no-cache-dir pip==26.3')
    >>> dict(env("/opt/x").values)["PATH"]
    '/opt/x/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
"""

from __future__ import annotations

from containers.recipe import Copy, Env, Run

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BUILD_PACKAGES = ["python3", "python3-venv", "python3-dev", "build-essential", "ca-certificates"]
RUNTIME_PACKAGES = ["python3"]


def env(prefix: str, path_before: str = "") -> Env:
    path = ":".join(p for p in (f"{prefix}/venv/bin", path_before, SYSTEM_PATH) if p)
    return Env((("PATH", path), ("VIRTUAL_ENV", f"{prefix}/venv"),
                ("PIP_NO_CACHE_DIR", "1"), ("PIP_DISABLE_PIP_VERSION_CHECK", "1")))


def build(prefix: str, pip: str) -> list:
    """The venv with the project's pip (the distribution's is too old to build chainer)."""
    return [Run((f"python3 -m venv {prefix}/venv",
                 f"{prefix}/venv/bin/pip install --no-cache-dir pip=={pip}"), network=True)]


def runtime(prefix: str) -> list:
    return [Copy(f"{prefix}/venv", f"{prefix}/venv", from_stage="build")]
