"""Where an install puts things, for one version and flavour under a prefix.

>>> where = Layout(Path("/opt/sw"), "0.1.0", "cpu")
>>> print(where.home, where.lua, where.tcl, sep="\\n")
/opt/sw/chainermn-rt/0.1.0-cpu
/opt/sw/modulefiles/chainermn-rt/0.1.0-cpu.lua
/opt/sw/modulefiles-tcl/chainermn-rt/0.1.0-cpu
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NAME = "chainermn-rt"  # the package's folder and the module's name
# the images' flavours (one module each in containers/flavors/)
FLAVORS = ("cpu", "gpu", "gpu-upstream", "gpu-dali")


@dataclass(frozen=True)
class Layout:
    prefix: Path
    version: str
    flavor: str

    @property
    def module_version(self) -> str:
        return f"{self.version}-{self.flavor}"

    @property
    def home(self) -> Path:
        """``PREFIX/chainermn-rt/<version>-<flavor>``: everything but the module files."""
        return self.prefix / NAME / self.module_version

    @property
    def bin(self) -> Path:
        return self.home / "bin"

    @property
    def venv(self) -> Path:
        """The host's ``chainermn-rt`` (it calls sbatch, which the image lacks)."""
        return self.home / "venv"

    @property
    def site(self) -> Path:
        return self.home / "site.toml"

    @property
    def manifest(self) -> Path:
        return self.home / "MANIFEST.json"

    def image(self, name: str) -> Path:
        """The copied image, keeping the source's name (a folder, .sif or .sqsh)."""
        return self.home / "image" / name

    @property
    def lua(self) -> Path:
        """Lmod's file: the tree Lmod's MODULEPATH names, outside ``home`` (Lmod warns about
        executables inside a modulefile tree)."""
        return self.prefix / "modulefiles" / NAME / f"{self.module_version}.lua"

    @property
    def tcl(self) -> Path:
        """Environment Modules' file, in a tree of its own."""
        return self.prefix / "modulefiles-tcl" / NAME / self.module_version
