"""The module files of an install: Lmod (Lua) and Environment Modules (Tcl), the same facts.

Both put the install's ``bin/`` first on ``PATH`` and set ``CHAINERMN_RT_SITE`` (the default
``--site`` of render, submit, doctor and scaling). Lmod swaps one version of a name for
another by itself; Environment Modules 5 would load both, so the Tcl file says ``conflict``.

>>> from pathlib import Path
>>> from chainermn_rt.install.layout import Layout
>>> text = lua(Layout(Path("/sw"), "0.1.0", "cpu"), "lab", "chainermn-rt_cpu")
>>> print(*[line for line in text.splitlines() if line.startswith(("prepend", "setenv"))],
...       sep="\\n")
prepend_path("PATH", "/sw/chainermn-rt/0.1.0-cpu/bin")
setenv("CHAINERMN_RT_SITE", "/sw/chainermn-rt/0.1.0-cpu/site.toml")
"""

from __future__ import annotations

import json

from chainermn_rt.install.layout import NAME, Layout
from chainermn_rt.site import SITE_VAR


def _help(where: Layout, site: str, image: str | None) -> list[str]:
    return [
        f"{NAME} {where.module_version}: ChainerMN data-parallel training on Slurm, for site "
        f"{site}.",
        f"Puts {NAME} (render, submit, doctor, scaling) and python3 "
        + (f"(in the image {image})" if image else "(the install's own)") + " on PATH;",
        f"sets {SITE_VAR}={where.site}, the default --site.",
        "Update: install the new version beside this one (make install, or chainermn-rt",
        f"install --site ... --image NEW --prefix {where.prefix}); `module load {NAME}/NEW`",
        "swaps it for this one; remove this version's folder and module files once no job",
        f"uses it: {where.home}",
    ]


def lua(where: Layout, site: str, image: str | None) -> str:
    """Lmod's modulefile."""
    help_text = "\n".join(_help(where, site, image))
    return "\n".join([
        f"-- {NAME} {where.module_version}, written by `chainermn-rt install`",
        f"help([[\n{help_text}\n]])",
        f'whatis("Name: {NAME}")',
        f'whatis("Version: {where.module_version}")',
        f"prepend_path(\"PATH\", {json.dumps(str(where.bin))})",
        f"setenv(\"{SITE_VAR}\", {json.dumps(str(where.site))})",
    ]) + "\n"


def _tcl_word(value: str) -> str:
    """A Tcl word in braces: nothing inside is substituted (paths have no braces: checked)."""
    if any(c in value for c in "{}\\\n"):
        raise ValueError(f"{value!r}: braces, backslashes and newlines cannot be written")
    return "{" + value + "}"


def tcl(where: Layout, site: str, image: str | None) -> str:
    """Environment Modules' modulefile (5.x; Lmod reads it too)."""
    body = "\n".join(f"    puts stderr {_tcl_word(line)}" for line in _help(where, site, image))
    return "\n".join([
        "#%Module1.0",
        f"## {NAME} {where.module_version}, written by `chainermn-rt install`",
        "proc ModulesHelp { } {",
        body,
        "}",
        f"module-whatis {_tcl_word(f'{NAME} {where.module_version}')}",
        f"conflict {NAME}",
        f"prepend-path PATH {_tcl_word(str(where.bin))}",
        f"setenv {SITE_VAR} {_tcl_word(str(where.site))}",
    ]) + "\n"
