"""One rank of a job rendered with ``--stage SRC``: finds SRC's node-local copy with
chainermn_rt.staging.local_path, checks it holds SRC's data, and reports it as a JSON line in
OUT/rank<N>.run<R>.json (R: Slurm's restart count) for the test to compare across ranks.

    stage_check.py SRC OUT [--fail] [--wait-for-stop]

``--fail``: exit 1 once every rank has reported (a failing job; waiting first, as srun
ends the other ranks as soon as one fails). ``--wait-for-stop``: in the first run,
wait for the batch shell's stop file, then rank 0 says a snapshot was written (as
chainermn_rt.resumable does) so that the shell requeues the job; later runs just report.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path

from chainermn_rt.data import manifest
from chainermn_rt.rank_contract import STOP_DONE_SUFFIX, STOP_FILE_VAR
from chainermn_rt.staging import STAGE_DIR_VAR, local_path


def main() -> int:
    src, out = sys.argv[1], Path(sys.argv[2])
    rank, run = os.environ["SLURM_PROCID"], os.environ.get("SLURM_RESTART_COUNT", "0")
    local = Path(local_path(src))
    shards = manifest.load(local).shards
    ok = [hashlib.sha256((local / s.name).read_bytes()).hexdigest() == s.sha256
          for s in shards]
    report = {"rank": rank, "run": run, "host": socket.gethostname(), "local": str(local),
              "stage_dir": os.environ[STAGE_DIR_VAR], "inode": local.stat().st_ino,
              "device": local.stat().st_dev, "files": sorted(os.listdir(local)),
              "shards_ok": all(ok) and len(ok) == len(shards)}
    tmp = out / f".rank{rank}.run{run}.json"
    tmp.write_text(json.dumps(report))
    tmp.rename(out / f"rank{rank}.run{run}.json")  # whole: the test reads it while we run
    if "--fail" in sys.argv:
        ranks = int(os.environ["SLURM_NTASKS"])
        deadline = time.monotonic() + 300
        while len(list(out.glob(f"rank*.run{run}.json"))) < ranks:
            if time.monotonic() > deadline:
                return 3
            time.sleep(0.1)
        return 1
    if "--wait-for-stop" in sys.argv and run == "0":
        stop = os.environ[STOP_FILE_VAR]
        deadline = time.monotonic() + 300  # the test sends the signal once every rank reported
        while not os.path.exists(stop):
            if time.monotonic() > deadline:
                return 3
            time.sleep(0.2)
        if rank == "0":
            Path(stop + STOP_DONE_SUFFIX).write_text(f"{out}/snapshots/iter_000000001\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
