"""``chainermn-rt install --site FILE [--image IMAGE] --prefix DIR``: the bundle under a
prefix for a site, with Lmod and Environment Modules files (docs/install.md)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from chainermn_rt.install.layout import FLAVORS


def configure(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--site", type=Path, required=True, help="the site profile to install for (.toml)")
    a("--image", type=Path, help="the image its runtime runs (a Charliecloud folder, a .sif, a "
      ".sqsh); none for runtime none")
    a("--prefix", type=Path, required=True,
      help="where: DIR/chainermn-rt/<version>-<flavor>, DIR/modulefiles, DIR/modulefiles-tcl")
    a("--flavor", choices=FLAVORS, help="default: what the image says, else cpu")
    a("--wheels", type=Path, default=Path("build/install-wheels"),
      help="wheels of the host's chainermn-rt (`make install-wheels`); default: %(default)s")
    a("--python", default="python3", help="a Python the package supports, for the host's "
      "chainermn-rt; default: %(default)s")


def run(args: argparse.Namespace) -> int:
    from chainermn_rt.install.installer import install

    start = time.monotonic()
    where = install(args.site, args.image, args.prefix, args.wheels, args.flavor, args.python)
    print(f"installed chainermn-rt {where.module_version} in {where.home} "
          f"({time.monotonic() - start:.0f} s)")
    print(f"modules: module use {where.lua.parent.parent} (Lmod) or "
          f"{where.tcl.parent.parent} (Environment Modules); "
          f"module load chainermn-rt/{where.module_version}")
    return 0
