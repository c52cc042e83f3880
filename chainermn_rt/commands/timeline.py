"""``chainermn-rt timeline JOB_OR_FOLDER [--output trace.json]``: the ranks' step records
merged into one Chrome trace-event file, for Perfetto's UI or ``chrome://tracing``.

Example::

    $ chainermn-rt timeline 42 --output trace.json        # timeline/42 of job 42
    trace.json: 4 ranks on 2 nodes, 600 steps, clocks aligned to rank 0's within 12 us; ...
    chainermn-rt: slow node: none (every rank's compute within 1.15x its peers', ...)

JOB_OR_FOLDER: a folder of ``rank-NNNNN.jsonl`` files, or a job id (``timeline/<id>`` here or
in the job's working folder). A damaged or missing rank file: one line naming it, exit
status 2; with ``--partial`` the rest is merged and the damaged file named. A job that crashed
merges up to the crash.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from chainermn_rt.arguments import output_file
from chainermn_rt.errors import print_line
from chainermn_rt.files import write_atomically


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_or_folder", metavar="JOB_OR_FOLDER",
                        help="a timeline folder, or a Slurm job id rendered with --timeline")
    parser.add_argument("--output", "-o", type=Path,
                        help="the trace file (default: FOLDER/trace.json)")
    parser.add_argument("--partial", action="store_true",
                        help="merge what can be read when a rank's file is damaged or missing "
                             "(named on stderr)")


def run(args: argparse.Namespace) -> int:
    from chainermn_rt.timeline import locate, merge

    folder = locate.folder_of(args.job_or_folder)
    output = output_file(args.output or folder / "trace.json", "--output", (".json",))
    loaded = merge.load(folder, partial=args.partial)
    for message in loaded.damaged:
        print_line(f"chainermn-rt timeline: warning: left out: {message}")
    trace = merge.trace(loaded)
    write_atomically(output, lambda f: json.dump(trace, f, separators=(",", ":")))
    tables = merge.tables(loaded)
    nodes = len({e["pid"] for e in trace["traceEvents"]})
    print(f"{output}: {len(loaded.parts)} ranks on {nodes} node{'s' * (nodes != 1)}, "
          f"{len(tables.iteration)} steps, clocks aligned to rank 0's within "
          f"{loaded.clock_bound_us():.0f} us; open it in Perfetto's UI (ui.perfetto.dev) or "
          "chrome://tracing", flush=True)
    print(tables.judge().line(loaded.hosts()), flush=True)
    return 0
