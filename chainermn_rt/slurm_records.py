"""Slurm's ``Key=value`` records: ``scontrol -o show node|partition|job``, the sandbox's job
completion file, and ``scontrol show config``. The one parser of them all.

A one-line record is ``Key=value`` pairs separated by spaces, where a value may hold spaces
itself (``OS=Linux 6.1.0-18-amd64 #1 SMP ...``, ``Reason=node lost [root@...]``): a key is a
word followed by ``=`` at the start or after a space.

>>> [r["NodeName"] for r in records("NodeName=node1 CPUTot=4\\nNodeName=node2 CPUTot=4")]
['node1', 'node2']
>>> record("P"), record("")
({}, {})
>>> record("NodeName=node2 OS=Linux 6.1 #1 SMP CPUTot=4")["OS"]
'Linux 6.1 #1 SMP'
>>> config("SlurmctldHost[0]    = head(10.0.0.1)\\nMpiDefault          = pmix\\n")["MpiDefault"]
'pmix'
"""

from __future__ import annotations

import re

_KEY = re.compile(r"(?:^|(?<= ))([A-Za-z][A-Za-z0-9_/:.\[\]]*)=")


def record(line: str) -> dict[str, str]:
    """One record as {key: value}; {} for a line without ``Key=``."""
    line = line.strip()
    keys = list(_KEY.finditer(line))
    if not keys:
        return {}
    return {key.group(1): line[key.end():after.start() if after else len(line)].rstrip()
            for key, after in zip(keys, [*keys[1:], None], strict=True)}


def records(text: str) -> list[dict[str, str]]:
    """Every line of ``scontrol -o show ...`` that holds a record, as {key: value}."""
    return [found for found in map(record, text.splitlines()) if found]


def config(text: str) -> dict[str, str]:
    """``scontrol show config``'s ``Key = value`` lines as {key: value}."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            found[key.strip()] = value.strip()
    return found


# Node sizes past which a record is a damaged answer, not a node
MAX_GPUS_PER_NODE = 64
MAX_CPUS_PER_NODE = 65536
MAX_MEMORY_MB = 1 << 30  # 1 PiB
_COUNT = re.compile(r"[0-9]{1,9}\Z")


def _gres_entries(gres: str) -> list[list[str]]:
    """``gpu:h100:8(S:0-1),shard:8`` -> ``[["gpu", "h100", "8"], ["shard", "8"]]``: entries
    split at the commas outside parentheses, each without its parenthesised part (one pass:
    an answer of any length costs its length)."""
    entries, depth, current = [], 0, []
    for c in gres:
        if c == "(":
            depth += 1
        elif c == ")":
            depth = max(depth - 1, 0)
        elif c == "," and depth == 0:
            entries.append("".join(current))
            current = []
        elif depth == 0:
            current.append(c)
    entries.append("".join(current))
    return [entry.split(":") for entry in entries]


def gres_gpus(gres: str) -> int:
    """GPUs in a node's ``Gres`` (``gpu:4``, ``gpu:h100:8(S:0-1)``, ``gpu:a:2,gpu:b:2``); 0 when
    none. ValueError (what is wrong, not the text) for a ``gpu`` entry without a count in
    ASCII digits, or more than :data:`MAX_GPUS_PER_NODE` GPUs in all.

    >>> gres_gpus("gpu:h100:8(S:0-1)"), gres_gpus("gpu:4,shard:8"), gres_gpus("(null)")
    (8, 4, 0)
    >>> gres_gpus("gpu:999999999")
    Traceback (most recent call last):
    ValueError: 999999999 GPUs; allowed: at most 64 in a node
    """
    total = 0
    for fields in _gres_entries(gres):
        if fields[0] != "gpu":
            continue
        if len(fields) not in (2, 3) or not _COUNT.match(fields[-1]):
            raise ValueError("a gpu entry without a GPU count; allowed: gpu[:TYPE]:COUNT")
        total += int(fields[-1])
    if total > MAX_GPUS_PER_NODE:
        raise ValueError(f"{total} GPUs; allowed: at most {MAX_GPUS_PER_NODE} in a node")
    return total


def gres_gpu_type(gres: str) -> str | None:
    """The GPU type in a node's ``Gres`` (``gpu:h100:8(S:0-1)`` -> ``h100``); None without one.

    >>> gres_gpu_type("gpu:h100:8(S:0-1)"), gres_gpu_type("gpu:4")
    ('h100', None)
    """
    return next((fields[1] for fields in _gres_entries(gres)
                 if fields[0] == "gpu" and len(fields) == 3), None)
