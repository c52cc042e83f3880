"""On one GPU: which network NCCL chooses when a communicator starts, and what it logged about
its net plugin (``NCCL_NET_PLUGIN``; ``NCCL_NET`` pinned makes a missing one an error). Prints
one JSON line: ``network`` (NCCL's "Using network" names), ``plugin_lines`` (its NET/Plugin
lines), the variables that steer the choice."""

from __future__ import annotations

import json
import os
import re
import tempfile

from chainermn_rt.doctor.network import nccl_networks

STEERING = ("NCCL_NET", "NCCL_NET_PLUGIN", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME")

with tempfile.TemporaryDirectory() as folder:
    log = os.path.join(folder, "nccl.log")
    # read by NCCL when its first communicator starts
    os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET", NCCL_DEBUG_FILE=log)
    from cupy.cuda import nccl

    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    comm.destroy()
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
print(json.dumps({"network": nccl_networks(text),
                  "plugin_lines": re.findall(r"NET/Plugin.*", text)[:5],
                  "nccl": nccl.get_version(),
                  "env": {k: os.environ[k] for k in STEERING if k in os.environ}}))
