"""What Slurm accepts in the values the bundle writes into a job script or reads back: time
strings, memory sizes, printable text. Every check names where the value came from.

>>> parse_time("1-02:00:00", "--time"), parse_memory_mb("64G", "--mem")
(93600, 65536)
>>> check_printable("a\\nb", "--job-name")  # doctest: +ELLIPSIS
Traceback (most recent call last):
chainermn_rt.errors.UserError: --job-name: 'a\\nb' contains a control character; ...
"""

from __future__ import annotations

import re

from chainermn_rt.errors import UserError, message_value
from chainermn_rt.slurm_records import MAX_MEMORY_MB

MEMORY = re.compile(r"([0-9]{1,16})([KMGT]?)\Z")
_TIME = re.compile(r"(?:([0-9]{1,9})-)?([0-9]{1,9})(?::([0-9]{1,9}))?(?::([0-9]{1,9}))?\Z")


def parse_time(text: str, where: str) -> int:
    """Seconds in a Slurm time string: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``.

    >>> parse_time("1-02:00:00", "time"), parse_time("90", "time"), parse_time("5:30", "time")
    (93600, 5400, 330)
    """
    m = _TIME.match(text) if isinstance(text, str) else None  # no blanks: a #SBATCH value
    if not m:
        shown = message_value(text, quote=True) if isinstance(text, str) else repr(text)
        raise UserError(f"{where}: {shown} is not a Slurm time; allowed: MIN, MIN:SEC, "
                        "HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS")
    days, a, b, c = m.groups()
    if days is None:
        if b is None:
            return int(a) * 60
        if c is None:
            return int(a) * 60 + int(b)
        return int(a) * 3600 + int(b) * 60 + int(c)
    return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)


def parse_memory_mb(text: str, where: str) -> int:
    """Megabytes in a Slurm memory string (``4000``, ``64G``, ``2T``)."""
    m = MEMORY.match(str(text)) if isinstance(text, (str, int)) else None
    if not m:
        shown = message_value(text, quote=True) if isinstance(text, str) else repr(text)
        raise UserError(f"{where}: {shown} is not a memory size; allowed: a number with an "
                        "optional K, M, G or T suffix (default M), e.g. 64G")
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2)]
    mb = int(int(m.group(1)) * scale)
    if mb > MAX_MEMORY_MB:
        raise UserError(f"{where}: {text} is more than a node has; allowed: at most "
                        f"{MAX_MEMORY_MB >> 20}T")
    return mb


def check_printable(value: str, where: str) -> str:
    """Refuse control characters (a newline would end a #SBATCH line); the rest gets quoted."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UserError(f"{where}: {value!r} contains a control character; allowed: printable "
                        "text")
    return value
