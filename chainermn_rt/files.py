"""Files the commands write: whole or not at all.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
>>> umask = os.umask(0o022)
>>> write_atomically(path, lambda f: f.write("done\\n"))
>>> path.read_text(), sorted(p.name for p in path.parent.iterdir()), oct(path.stat().st_mode)
('done\\n', ['a.txt'], '0o100644')
>>> _ = os.umask(umask)
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def write_atomically(path: Path, write: Callable[[IO], object], binary: bool = False,
                     mode: int | None = None) -> None:
    """``write(file)`` into a temporary file beside ``path``, flush it to disk (fsync), then
    rename it over ``path`` with permissions ``mode`` (default: what ``open`` would give, 0666
    less the umask); on any error nothing is left behind."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
