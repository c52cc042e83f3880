"""One JSON line per rank: where it runs (its working folder), the variables named on the
command line as the rank sees them (None: unset), and what it wrote to a relative path
(tests/test_jobs_pyxis_path.py: pyxis's working folder and environment)."""

import json
import os
import socket
import sys

rank = int(os.environ.get("SLURM_PROCID", "0"))
os.makedirs("ranks", exist_ok=True)
with open(f"ranks/rank{rank}.txt", "w") as f:  # relative: in the job's folder
    f.write(socket.gethostname())
print(json.dumps({"rank": rank, "host": socket.gethostname(), "cwd": os.getcwd(),
                  "env": {name: os.environ.get(name) for name in sys.argv[1:]}}), flush=True)
