"""A CPU cgroup with a quota, for slowing one rank for real: the kernel lets its processes run
``share`` of every 4 ms (cgroup v1's ``cpu`` controller, else v2's ``cpu.max``), so every phase
of every step longer than a millisecond is stretched, whatever else the machine runs. Root only;
where no controller is writable the test fails (never skips).

    with cpu_quota(0.25) as folder:   # the rank writes its pid into folder/cgroup.procs
        ...
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")
PERIOD_US = 4000  # short, so that no phase fits in one period's share; the quota's least is 1 ms


@contextlib.contextmanager
def cpu_quota(share: float) -> Iterator[Path]:
    v1 = (V1 / "cpu.cfs_quota_us").exists()
    parent = V1 if v1 else V2
    folder = parent / f"chainermn-rt-test-{uuid.uuid4().hex[:8]}"
    quota = max(1000, int(PERIOD_US * share))
    try:
        folder.mkdir()
        if v1:
            (folder / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (folder / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (folder / "cpu.max").write_text(f"{quota} {PERIOD_US}")
    except OSError as err:
        pytest.fail(f"no CPU cgroup to slow a rank with ({folder}: {err.strerror}); the "
                    "straggler tests need root and a cgroup cpu controller", pytrace=False)
    try:
        yield folder
    finally:
        for pid in (folder / "cgroup.procs").read_text().split():  # a rank still running
            with contextlib.suppress(OSError):
                (parent / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            os.rmdir(folder)
