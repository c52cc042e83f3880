"""Slurm's ``Key=value`` records: ``scontrol -o show node|partition|job``, the sandbox's job
completion file, and ``scontrol show config``. The one parser of them all.

A one-line record is ``Key=value`` pairs separated by spaces, where a value may hold spaces
itself (``OS=Linux 6.1.0-18-amd64 #1 SMP ...``, ``Reason=node lost [root@...]``): a key is a
word followed by ``=`` at the start or after a space.

>>> [r["NodeName"] for r in records("NodeName=node1 CPUTot=4\\nNodeName=node2 CPUTot=4")]
['node1', 'node2']
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


def gres_gpus(gres: str) -> int:
    """GPUs in a node's ``Gres`` (``gpu:4``, ``gpu:h100:8(S:0-1)``, ``gpu:a:2,gpu:b:2``); 0 when
    none.

    >>> gres_gpus("gpu:h100:8(S:0-1)"), gres_gpus("gpu:4,shard:8"), gres_gpus("(null)")
    (8, 4, 0)
    """
    total = 0
    for part in re.split(r",(?![^(]*\))", gres):
        fields = re.sub(r"\(.*\)", "", part).split(":")
        if fields[0] == "gpu" and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def gres_gpu_type(gres: str) -> str | None:
    """The GPU type in a node's ``Gres`` (``gpu:h100:8(S:0-1)`` -> ``h100``); None without one.

    >>> gres_gpu_type("gpu:h100:8(S:0-1)"), gres_gpu_type("gpu:4")
    ('h100', None)
    """
    for part in re.split(r",(?![^(]*\))", gres):
        fields = re.sub(r"\(.*\)", "", part).split(":")
        if fields[0] == "gpu" and len(fields) == 3:
            return fields[1]
    return None
