"""Handwritten hwloc 2 XML for nodes this machine is not: ``dgx_h100()`` mirrors
slurm/sites/dgx-h100.toml (2 packages x 56 cores, one NUMA node each, 8 GPUs each behind a
PCIe switch with its compute HCA, 4 more HCAs on their own root ports). Debian's hwloc 2.9
reads it (tests/test_site_init.py loads it with the real lstopo)."""

from __future__ import annotations

# (GPU bus, its HCA) per switch; package 0 holds the first four
SWITCHES = [("1b", "mlx5_0"), ("43", "mlx5_3"), ("52", "mlx5_4"), ("61", "mlx5_5"),
            ("9d", "mlx5_6"), ("c3", "mlx5_9"), ("d1", "mlx5_10"), ("df", "mlx5_11")]
OTHER_HCAS = [("0c", "mlx5_1", 0), ("0d", "mlx5_2", 0), ("8c", "mlx5_7", 1), ("8d", "mlx5_8", 1)]


def _set(cpus: range) -> str:
    value = sum(1 << c for c in cpus)
    words = []
    while True:
        words.append(f"0x{value & 0xffffffff:08x}")
        value >>= 32
        if not value:
            break
    return ",".join(reversed(words))


def _obj(kind: str, index: int, cpus: range, numa: int, inner: str = "", **attrs) -> str:
    extra = "".join(f' {k}="{v}"' for k, v in attrs.items())
    nodes = _set(range(numa, numa + 1))
    sets = (f'cpuset="{_set(cpus)}" complete_cpuset="{_set(cpus)}" nodeset="{nodes}" '
            f'complete_nodeset="{nodes}"') if cpus else ""
    return f'<object type="{kind}" os_index="{index}" {sets}{extra}>{inner}</object>\n'


def _pci(bus: str, kind: str, name: str | None) -> str:
    pci_type = "0302 [10de:2330] [10de:16c1] a1" if kind == "gpu" else \
        "0207 [15b3:1021] [15b3:0041] 00"
    osdev = f'<object type="OSDev" name="{name}" osdev_type="3"/>' if name else ""
    return (f'<object type="PCIDev" pci_busid="0000:{bus}:00.0" pci_type="{pci_type}" '
            f'pci_link_speed="0.000000">{osdev}</object>\n')


def _bridge(bus: str, inner: str, host: bool = False) -> str:
    kind = "0-1" if host else "1-1"
    down = f' depth="{0 if host else 1}" bridge_pci="0000:[{bus}-{bus}]"'
    return (f'<object type="Bridge" bridge_type="{kind}" pci_busid="0000:{bus}:00.0" '
            f'pci_type="0604 [8086:0000] [0000:0000] 00" pci_link_speed="0.000000"{down}>'
            f'{inner}</object>\n')


def dgx_h100() -> str:
    packages = []
    for p in range(2):
        cpus = range(56 * p, 56 * (p + 1))
        cores = "".join(_obj("Core", c, range(c, c + 1), p, _obj("PU", c, range(c, c + 1), p))
                        for c in cpus)
        io = ""
        for gpu_bus, hca in SWITCHES[4 * p:4 * (p + 1)]:
            switch = _pci(gpu_bus, "gpu", None) + _pci(f"{int(gpu_bus, 16) + 1:02x}", "hca", hca)
            io += _bridge(f"{int(gpu_bus, 16) - 3:02x}", _bridge(f"{int(gpu_bus, 16) - 2:02x}",
                                                                   switch))
        for bus, hca, where in OTHER_HCAS:
            if where == p:
                io += _bridge(f"{int(bus, 16) - 1:02x}", _pci(bus, "hca", hca))
        numa = _obj("NUMANode", p, cpus, p, local_memory=str(1 << 40))
        packages.append(_obj("Package", p, cpus, p, numa + cores
                             + _bridge(f"{16 * p:02x}", io, host=True)))
    machine = (f'<object type="Machine" os_index="0" cpuset="{_set(range(112))}" '
               f'complete_cpuset="{_set(range(112))}" nodeset="0x00000003" '
               f'complete_nodeset="0x00000003">{"".join(packages)}</object>')
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n'
            f'<topology version="2.0">\n{machine}\n</topology>\n')


GPU_BUSIDS = [f"0000:{bus}:00.0" for bus, _ in SWITCHES]
