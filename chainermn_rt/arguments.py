"""Command-line arguments checked where they are parsed: one line naming the flag, exit 2.

Every command (and the bench scripts) parses with :class:`Parser` and gives numeric flags one
of these types, so a bad value is refused before any work starts; output paths are checked
with :func:`output_file` and :func:`folder` before any work starts too. Light to import:
``chainermn-rt rank`` uses it on every rank.

>>> parser = Parser(prog="demo")
>>> _ = parser.add_argument("--repeat", type=integer(1))
>>> _ = parser.add_argument("--timeout", type=seconds())
>>> parser.parse_args(["--repeat", "3", "--timeout", "1.5"])
Namespace(repeat=3, timeout=1.5)
>>> integer(1)("0")
Traceback (most recent call last):
argparse.ArgumentTypeError: 0; allowed: 1 or more
>>> seconds()("nan")
Traceback (most recent call last):
argparse.ArgumentTypeError: 'nan'; allowed: seconds, a number above 0 and at most 31536000
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

from chainermn_rt.errors import UserError

YEAR_S = 365 * 86400
_BYTES = re.compile(r"([0-9]{1,16})([KMG]?)", re.IGNORECASE)
_UNITS = {"": 0, "K": 10, "M": 20, "G": 30}
MAX_BYTES = 1 << 40


class Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments as one line (``PROG: error: --flag: ...``), exit 2."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message.removeprefix('argument ')}\n")


def integer(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number in ``low..high`` (either end open when None)."""
    allowed = _range(low, high)

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}; allowed: an integer, {allowed}") \
                from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value}; allowed: {allowed}")
        return value

    parse.__name__ = "integer"
    return parse


def seconds(low: float = 0.0, high: float = YEAR_S, zero: bool = False
            ) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds above ``low`` (``zero``: or 0, "off") and at
    most ``high``; nan, inf and negatives are refused."""
    allowed = f"seconds, a number above {_plain(low)} and at most {_plain(high)}" + \
        (", or 0 (off)" if zero else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (low < value <= high or (zero and value == 0))):
            raise argparse.ArgumentTypeError(f"{text!r}; allowed: {allowed}")
        return value

    parse.__name__ = "seconds"
    return parse


def _plain(number: float) -> str:
    return str(int(number)) if number == int(number) else str(number)


def _range(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"{low}-{high}"
    if low is not None:
        return f"{low} or more"
    return "any" if high is None else f"at most {high}"


def output_file(path: Path | None, flag: str, suffixes: tuple[str, ...] = ()) -> Path | None:
    """Check before any work starts that ``path`` can be written: a file (not a folder, nor
    a device or FIFO already there) in an existing folder where a file can be made (one is
    made and removed: ``/proc`` and read-only file systems refuse it), ending in one of
    ``suffixes`` (any case is refused but the exact one)."""
    if path is None:
        return None
    if suffixes and path.suffix not in suffixes:
        raise UserError(f"{flag}: {path}; allowed: a file ending in {' or '.join(suffixes)}")
    if str(path) in ("", ".") or path.is_dir() or path.name in ("", ".", ".."):
        raise UserError(f"{flag}: {path} is a folder; allowed: a file in an existing folder")
    folder = path.absolute().parent
    if not folder.is_dir():
        raise UserError(f"{flag}: {path}; allowed: a file in an existing folder")
    if os.path.lexists(path) and not (path.is_symlink() or path.is_file()):
        raise UserError(f"{flag}: {path} exists and is not a file; allowed: a new or regular "
                        "file")
    import tempfile  # here: the ranks import this module, and never write a file with it

    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.")
    except OSError as err:
        raise UserError(f"{flag}: {path}: cannot make a file in {folder} "
                        f"({(err.strerror or 'refused').lower()}); allowed: a file in a folder "
                        "you can write") from None
    os.close(fd)
    os.unlink(probe)
    return path


def folder(path: Path, flag: str) -> Path:
    """A folder a command fills (made with its parents later): new, or one that exists, not a
    file nor below one."""
    if any(ord(c) < 32 or ord(c) == 127 for c in str(path)):
        raise UserError(f"{flag}: {str(path)!r} contains a control character; allowed: a "
                        "printable path")
    path = path.absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise UserError(f"{flag}: {existing} is a file; allowed: a folder (new or existing)")
    return path


def parse_bytes(text: str, flag: str) -> int:
    """``8``, ``64K``, ``1G`` (1024-based) -> bytes; anything else a UserError naming ``flag``.

    >>> parse_bytes("64k", "--max-bytes"), parse_bytes("1G", "--max-bytes")
    (65536, 1073741824)
    """
    match = _BYTES.fullmatch(text)
    value = int(match.group(1)) << _UNITS[match.group(2).upper()] if match else -1
    if not 0 <= value <= MAX_BYTES:
        raise UserError(f"{flag}: {text!r}; allowed: a whole number of bytes up to 1024G, "
                        "optionally with K, M or G (1024-based), e.g. 8, 64K, 1G")
    return value
