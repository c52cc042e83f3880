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

from chainermn_rt.files import write_atomically


def configure(parser: argparse.ArgumentParser) -> None:
    from chainermn_rt.timeline.locate import add_arguments

    add_arguments(parser, "trace.json", "merge what can be read")


def run(args: argparse.Namespace) -> int:
    from chainermn_rt.timeline import merge
    from chainermn_rt.timeline.locate import load_arguments

    output, loaded = load_arguments(args, "trace.json", "timeline")
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
