"""What the NVIDIA driver says about a node's GPUs, without NVML.

Slurm numbers a node's GPUs in the order of their device files (``gres.conf``'s
``File=/dev/nvidia[0-7]``), which follow the driver's device minors, not always NVML's index:
:func:`slurm_order` reads ``/proc/driver/nvidia/gpus/*/information``.

>>> info = "Model: \\t NVIDIA H100\\nBus Location: \\t 0000:1B:00.0\\nDevice Minor: \\t 1\\n"
>>> read_information(info)
('0000:1b:00.0', 1)
>>> slurm_order([("0000:1b:00.0", 1), ("0000:29:00.0", 0)])
['0000:29:00.0', '0000:1b:00.0']
"""

from __future__ import annotations

import re

from chainermn_rt.errors import message_value
from chainermn_rt.site_init.hwloc import PCI_BUSID

_MINOR = re.compile(r"[0-9]{1,3}\Z")  # the driver's minors: 0-254 (255 is nvidiactl)


def read_information(text: str) -> tuple[str, int]:
    """(PCI bus id in lower case, device minor) from one GPU's ``information`` file;
    ValueError naming the field when either is missing or not what the driver writes."""
    fields = {}
    for line in text.splitlines():  # `Key: value` (no pattern: a line of any length is cheap)
        key, sep, value = line.partition(":")
        if sep and key:
            fields[key] = value.strip()
    missing = [key for key in ("Bus Location", "Device Minor") if key not in fields]
    if missing:
        raise ValueError(f"no {' and no '.join(map(repr, missing))}; allowed: the NVIDIA "
                         "driver's information file")
    for key, pattern, allowed in (("Bus Location", PCI_BUSID, "a PCI bus id such as "
                                   "0000:1B:00.0"), ("Device Minor", _MINOR, "a number 0-254")):
        if not pattern.match(fields[key]) or (key == "Device Minor" and int(fields[key]) > 254):
            raise ValueError(f"{key}: {message_value(fields[key], 40)}; allowed: {allowed}")
    return fields["Bus Location"].lower(), int(fields["Device Minor"])


def slurm_order(gpus: list[tuple[str, int]]) -> list[str]:
    """Bus ids in Slurm's GPU order: by device minor."""
    return [busid for busid, _ in sorted(gpus, key=lambda g: g[1])]


def topo_matrix(text: str) -> dict[int, dict[str, str]]:
    """``nvidia-smi topo -m``: for each ``GPUn`` row its columns by header (``GPU1``,
    ``NIC0``, ``CPU Affinity``, ``NUMA Affinity`` ...). The affinities are those of the
    calling process's cgroup: a cross-check only.

    >>> text = "\\tGPU0\\tGPU1\\tCPU Affinity\\tNUMA Affinity\\n" \\
    ...        "GPU0\\t X \\tNV18\\t0-55\\t0\\nGPU1\\tNV18\\t X \\t56-111\\t1\\n\\nLegend: ..."
    >>> topo_matrix(text)[1]["CPU Affinity"], topo_matrix(text)[0]["GPU1"]
    ('56-111', 'NV18')
    """
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((line for line in lines if line.startswith(("\t", " ")) and "GPU0" in line),
                  None)
    if header is None:
        return {}
    columns = [c.strip() for c in header.strip("\n").split("\t")][1:]
    rows = {}
    for line in lines:
        match = re.match(r"GPU([0-9]{1,3})\t", line)
        if match:
            cells = [c.strip() for c in line.split("\t")[1:]]
            rows[int(match.group(1))] = dict(zip(columns, cells, strict=False))
    return rows


def numa_affinity(row: dict[str, str]) -> int | None:
    """A row's ``NUMA Affinity``: its node, or None where nvidia-smi gives none (``N/A``, a
    list or range); ValueError for anything else.

    >>> numa_affinity({"NUMA Affinity": "1"}), numa_affinity({"NUMA Affinity": "N/A"})
    (1, None)
    """
    said = row.get("NUMA Affinity", "")
    if re.fullmatch(r"[0-9]{1,5}", said):
        return int(said)
    if re.fullmatch(r"N/A|[0-9,-]*", said):
        return None
    raise ValueError(f"NUMA Affinity {message_value(said, 40)}; allowed: a NUMA node number "
                     "or N/A")
