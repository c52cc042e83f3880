"""What each rank finds of the network it was given, and the checks over it: the MPI library it
really loaded (the profile may bind the host's: docs/site-profiles.md), the fabric (libfabric's
providers, ``fi_info -l``; UCX's transports, ``ucx_info -d``) against the profile's
``[fabric]``, NCCL's net plugin (``NCCL_NET_PLUGIN``) loaded and exporting ``ncclNet_v*``. A
silent fallback to TCP is what these catch: a provider or a plugin missing on a node.

>>> ucx_transports("#      Transport: tcp\\n#      Transport: rc_mlx5\\n#      Transport: tcp\\n")
['tcp', 'rc_mlx5']
>>> nccl_networks("h:1:2 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.\\n"
...               "h:1:2 [0] NCCL INFO Using network Socket\\n")
['Socket']
>>> fabric([{"launcher": {"rank": 0}, "host": "n1", "node": "n1",
...          "network": {"ofi": ["tcp", "udp"], "ucx": None}}], "ofi", "cxi").reason
'cxi expected, found on n1 (rank 0): tcp, udp (fi_info -l)'
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from collections.abc import Mapping

from chainermn_rt.doctor.check import FAIL, NA, PASS, Check

ANSWER_S = 20
MAX_ANSWER = 1 << 20
PLUGIN_SYMBOLS = tuple(f"ncclNet{kind}_v{v}" for v in range(10, 1, -1)
                       for kind in ("", "Plugin"))
# UCX transports that reach another node over InfiniBand or RoCE
UCX_FABRIC = re.compile(r"(rc|dc|ud)(_verbs|_mlx5)?\Z")


def _answer(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, timeout=ANSWER_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout[:MAX_ANSWER].decode("utf-8", "replace") if done.returncode == 0 else ""


def ofi_providers(text: str) -> list[str]:
    """``fi_info -l``'s provider names (``tcp:``, ``verbs;ofi_rxm:``), each once, in order."""
    found = re.findall(r"^([A-Za-z0-9_;]+):\s*$", text, re.MULTILINE)
    return list(dict.fromkeys(p for name in found for p in name.split(";")))


def ucx_transports(text: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"^#\s+Transport:\s+(\S+)\s*$", text, re.MULTILINE)))


def plugin(path: str | None) -> dict | None:
    """NCCL's net plugin as this process loads it (its libfabric and all), without NCCL."""
    if not path:
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError as err:
        return {"path": path, "loaded": False, "error": str(err)[:300], "symbols": []}
    return {"path": path, "loaded": True, "error": None,
            "symbols": [s for s in PLUGIN_SYMBOLS if hasattr(lib, s)]}


def nccl_networks(log: str) -> list[str]:
    """The networks NCCL chose, from its ``NCCL_DEBUG=INFO`` log: the line each communicator's
    start writes (``INFO(NCCL_INIT, "Using network %s", ...)``, the same from 2.21 to 2.29)."""
    found = re.findall(r"NCCL INFO Using network (.+?)\s*$", log, re.MULTILINE)
    return list(dict.fromkeys(found))


def rank_network(environ: Mapping[str, str] | None = None) -> dict:
    """This rank's view, before MPI starts."""
    env = os.environ if environ is None else environ
    ofi, ucx = _answer(["fi_info", "-l"]), _answer(["ucx_info", "-d"])
    return {"ofi": None if ofi is None else ofi_providers(ofi),
            "ucx": None if ucx is None else ucx_transports(ucx),
            "nccl_plugin": plugin(env.get("NCCL_NET_PLUGIN"))}


def loaded_libmpi() -> str | None:
    """The MPI library this process has mapped (after MPI started)."""
    try:
        with open("/proc/self/maps") as f:
            return next((line.split()[-1] for line in f
                         if re.search(r"/libmpi(ch)?[^/]*\.so", line)), None)
    except OSError:
        return None


# -- the checks ------------------------------------------------------------------------------

def _where(rs: list[dict]) -> str:
    hosts = sorted({r.get("node") or r["host"] for r in rs})
    ranks = sorted(r["launcher"]["rank"] for r in rs)
    shown = ",".join(map(str, ranks[:8])) + (",..." if len(ranks) > 8 else "")
    return f"{', '.join(hosts)} (rank{'s' if len(ranks) > 1 else ''} {shown})"


def fabric(reports: list[dict], kind: str | None, provider: str | None) -> Check:
    """The profile's fabric found on every rank (n/a when it states none)."""
    name = "fabric"
    nets = [(r, r.get("network") or {}) for r in reports]
    if kind is None:
        return Check(name, NA, "the profile states no [fabric]")
    if kind == "ofi":
        lacking = [r for r, n in nets if provider not in (n.get("ofi") or [])]
        if lacking:
            seen = sorted({p for r in lacking for p in (r.get("network") or {}).get("ofi")
                           or []})
            said = ", ".join(seen) if seen else "no fi_info, or no provider"
            return Check(name, FAIL, f"{provider} expected, found on {_where(lacking)}: "
                                     f"{said} (fi_info -l)",
                         "bind the site's libfabric and its provider into the container "
                         "([fabric] paths), or run where the NIC is", _hosts(lacking))
        return Check(name, PASS, f"libfabric's {provider} on every rank (fi_info -l)")
    lacking = [r for r, n in nets if not any(UCX_FABRIC.match(t) for t in n.get("ucx") or [])]
    if lacking:
        seen = sorted({t for r in lacking for t in (r.get("network") or {}).get("ucx") or []})
        said = ", ".join(seen) if seen else "no ucx_info, or no transport"
        return Check(name, FAIL, f"an InfiniBand or RoCE transport expected, found on "
                                 f"{_where(lacking)}: {said} (ucx_info -d)",
                     "check the HCAs and /dev/infiniband in the container", _hosts(lacking))
    return Check(name, PASS, "UCX reaches InfiniBand or RoCE on every rank (ucx_info -d)")


def nccl_plugin(reports: list[dict], path: str | None) -> Check:
    name = "nccl-plugin"
    if not path:
        return Check(name, NA, "the profile names no NCCL net plugin")
    bad = [r for r in reports
           if not ((r.get("network") or {}).get("nccl_plugin") or {}).get("symbols")]
    if bad:
        first = (bad[0].get("network") or {}).get("nccl_plugin") or {}
        why = first.get("error") or "it exports no ncclNet_v* symbol"
        return Check(name, FAIL, f"{path} does not load on {_where(bad)}: {why}",
                     "bind the plugin and the libfabric it needs ([nccl], [fabric] paths)",
                     _hosts(bad))
    symbols = sorted({s for r in reports for s in r["network"]["nccl_plugin"]["symbols"]})
    return Check(name, PASS, f"{path} loads on every rank, exporting {', '.join(symbols)}")


def mpi_library(reports: list[dict], bound: str | None) -> Check:
    """Which libmpi every rank loaded: one, and the profile's where it binds one."""
    name = "mpi-library"
    loaded = {}
    for r in reports:
        loaded.setdefault((r.get("mpi") or {}).get("libmpi"), []).append(r)
    if None in loaded and len(loaded) == 1:
        return Check(name, NA, "MPI did not start")
    want = os.path.realpath(bound) if bound else None
    odd = {path: rs for path, rs in loaded.items()
           if path is None or (want and os.path.realpath(path) != want)}
    if len(loaded) > 1 or odd:
        parts = "; ".join(f"{path or 'none'} on {_where(rs)}" for path, rs in loaded.items())
        return Check(name, FAIL, f"{parts}" + (f"; the profile binds {bound}" if bound else ""),
                     "one MPI for every rank: MPI4PY_MPIABI and the library path decide "
                     "(docs/site-profiles.md)", _hosts([r for rs in odd.values() for r in rs]))
    path = next(iter(loaded))
    version = (reports[0].get("mpi") or {}).get("library", "")
    return Check(name, PASS, f"every rank loaded {path} ({version.split(',')[0]})")


def _hosts(rs: list[dict]) -> tuple[str, ...]:
    return tuple(sorted({r.get("node") or r["host"] for r in rs}))
