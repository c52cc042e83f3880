"""Prints, as one JSON line, what a rank sees after `chainermn-rt rank` (job-script tests)."""

import json
import os
import socket
import sys

from chainermn_rt.devices import choose_device
from chainermn_rt.job_env import JobEnvironment

job = JobEnvironment.detect()
print(json.dumps({
    "host": socket.gethostname(),
    "rank": job.global_rank, "size": job.world_size,
    "local_rank": job.local_rank, "local_size": job.local_size,
    "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "device": choose_device(job.local_rank, job.local_size),
    "cpus": sorted(os.sched_getaffinity(0)),
    "ucx": os.environ.get("UCX_NET_DEVICES"), "nccl_hca": os.environ.get("NCCL_IB_HCA"),
    "argv": sys.argv[1:],
}), flush=True)
