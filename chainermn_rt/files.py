"""Files and folders the commands write whole or not at all, small files they read with a
bound, a file's sha256, and the trees an install copies (their sha256, their write bits).

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
>>> umask = os.umask(0o022)
>>> write_atomically(path, lambda f: f.write("done\\n"))
>>> path.read_text(), sorted(p.name for p in path.parent.iterdir()), oct(path.stat().st_mode)
('done\\n', ['a.txt'], '0o100644')
>>> _ = os.umask(umask)
>>> sha256_file(path)[:16]
'd117fa006ba92085'
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def whole_folder(path: Path, mark: str = ".") -> Iterator[Path]:
    """Write the folder ``path`` whole or not at all: yield a new, empty, hidden folder beside
    it (``.<name><mark><random>``, mode 0700) to fill; when the block ends without an error it
    is renamed to ``path`` (one rename: readers see all of it or nothing), else it is removed
    with everything in it and the error goes on. ``path``'s folder must exist, and ``path``
    must not by the rename (an empty folder may): an OSError of making the folder or of the
    rename goes to the caller, the work folder removed. ``mark`` names work folders of one
    kind (a sweep of what killed runs left looks for it).

    >>> top = Path(tempfile.mkdtemp())
    >>> with whole_folder(top / "out") as work:
    ...     _ = (work / "a.txt").write_text("a")
    >>> sorted(p.name for p in top.iterdir()), (top / "out" / "a.txt").read_text()
    (['out'], 'a')
    >>> with whole_folder(top / "other") as work:
    ...     _ = (work / "a.txt").write_text("a")
    ...     raise ValueError("stopped")
    Traceback (most recent call last):
    ValueError: stopped
    >>> sorted(p.name for p in top.iterdir())
    ['out']
    """
    path = Path(path)
    work = Path(tempfile.mkdtemp(prefix=f".{path.name}{mark}", dir=path.parent))
    try:
        yield work
        os.rename(work, path)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def sha256_file(path: Path) -> str:
    """The sha256 of the file ``path``'s bytes, in hexadecimal (read in 1 MiB pieces)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_small(path: Path, limit: int, follow_links: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``; ValueError saying what is
    wrong otherwise: a folder, a device, a FIFO (never opened: opening one may block or act),
    a symbolic link unless ``follow_links`` (then what it names must be a regular file), more
    than ``limit`` bytes. OSError when it cannot be read."""
    path = Path(path)
    if not follow_links and stat.S_ISLNK(os.lstat(path).st_mode):
        raise ValueError("a symbolic link, not a file")
    _regular(os.stat(path).st_mode)
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
        _regular(os.fstat(f.fileno()).st_mode)  # the same file as stat saw
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit} bytes")
    return data


def _regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else \
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
            "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise ValueError(f"{kind}, not a file")


def tree_sha256(path: Path) -> str:
    """sha256 of a file, or of a folder's every entry (name, kind, mode, content or target)."""
    if path.is_file():
        return sha256_file(path)
    digest = hashlib.sha256()
    for entry in sorted(path.rglob("*")):
        info = entry.lstat()
        digest.update(os.fsencode(entry.relative_to(path)) + f"\0{stat.S_IFMT(info.st_mode)}\0"
                      f"{stat.S_IMODE(info.st_mode) & 0o555:o}\0".encode())
        if entry.is_symlink():
            digest.update(os.fsencode(os.readlink(entry)))
        elif entry.is_file():
            digest.update(sha256_file(entry).encode())
    return digest.hexdigest()

def make_read_only(path: Path) -> None:
    """No write bit anywhere below ``path`` (links untouched)."""
    entries = [path] + ([] if path.is_file() else list(path.rglob("*")))
    for entry in reversed(entries):  # children before their folder
        if not entry.is_symlink():
            entry.chmod(stat.S_IMODE(entry.lstat().st_mode) & ~0o222)

def make_writable(path: Path) -> None:
    """Undo :func:`make_read_only` so that a failed stage can be removed."""
    for entry in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if not entry.is_symlink():
            entry.chmod(stat.S_IMODE(entry.lstat().st_mode) | 0o200)

def write_executable(path: Path, text: str) -> None:
    """``text`` as ``path``, mode 0755."""
    path.write_text(text)
    path.chmod(0o755)
