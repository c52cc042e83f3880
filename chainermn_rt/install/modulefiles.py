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

from chainermn_rt.install.layout import NAME, Layout
from chainermn_rt.quoting import comment
from chainermn_rt.quoting import lua as quote_lua
from chainermn_rt.quoting import tcl as quote_tcl
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
    """Lmod's modulefile; every value a Lua string literal (:func:`chainermn_rt.quoting.lua`)."""
    help_lines = ",\n     ".join(quote_lua(line + "\n", "the module help")
                                  for line in _help(where, site, image))
    return "\n".join([
        f"-- {NAME} {comment(where.module_version)}, written by `chainermn-rt install`",
        f"help({help_lines})",  # Lmod joins the strings
        f"whatis({quote_lua(f'Name: {NAME}')})",
        f"whatis({quote_lua(f'Version: {where.module_version}')})",
        f"prepend_path(\"PATH\", {quote_lua(str(where.bin), '--prefix')})",
        f"setenv(\"{SITE_VAR}\", {quote_lua(str(where.site), '--prefix')})",
    ]) + "\n"


def tcl(where: Layout, site: str, image: str | None) -> str:
    """Environment Modules' modulefile (5.x; Lmod reads it too); every value one Tcl word
    (:func:`chainermn_rt.quoting.tcl`)."""
    body = "\n".join(f"    puts stderr {quote_tcl(line, 'the module help')}"
                     for line in _help(where, site, image))
    return "\n".join([
        "#%Module1.0",
        f"## {NAME} {comment(where.module_version)}, written by `chainermn-rt install`",
        "proc ModulesHelp { } {",
        body,
        "}",
        f"module-whatis {quote_tcl(f'{NAME} {where.module_version}')}",
        f"conflict {NAME}",
        f"prepend-path PATH {quote_tcl(str(where.bin), '--prefix')}",
        f"setenv {SITE_VAR} {quote_tcl(str(where.site), '--prefix')}",
    ]) + "\n"
