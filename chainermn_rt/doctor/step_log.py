"""What a doctor job's log says of how its tasks ended: srun's line for a task killed by a
signal of its own (a crash), not by Slurm ending the others after it.

>>> text = ("srun: error: node1: task 0: Exited with exit code 14\\n"
...         "srun: error: node6: task 5: Killed\\n"
...         "srun: error: node2: task 1: Segmentation fault (core dumped)\\n")
>>> crashed_task(text)
'task 1 on node2: Segmentation fault (core dumped)'
>>> crashed_task("srun: error: node1: tasks 0-1: Exited with exit code 1\\n") is None
True
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

# srun's report of a task's end, e.g. "srun: error: node2: task 1: Segmentation fault"
_TASK_END = re.compile(r"^srun: error: (\S+): (tasks? [0-9,\-]+): (.+?)\s*$", re.MULTILINE)
# how the other tasks end once one failed (srun --kill-on-bad-exit, the step cancelled)
_AFTERMATH = ("Exited with exit code", "Killed", "Terminated")
TAIL_BYTES = 1 << 20  # srun's lines come last


def crashed_task(text: str) -> str | None:
    """The first task that srun says a signal ended, as ``task 1 on node2: Segmentation
    fault``; None when none did."""
    for node, tasks, what in _TASK_END.findall(text):
        if not what.startswith(_AFTERMATH):
            return f"{tasks} on {node}: {what}"
    return None


def tail(path: Path, size: int = TAIL_BYTES) -> str:
    """The last ``size`` bytes of the regular file ``path`` as text; '' where there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    with open(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            return ""
        f.seek(max(0, info.st_size - size))
        return f.read(size).decode("utf-8", errors="replace")
