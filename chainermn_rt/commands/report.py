"""``chainermn-rt report JOB_OR_FOLDER [--output report.html] [--reference ONE_NODE_RUN]``: a
job's step records as one self-contained HTML page (plots embedded, nothing fetched): images/s
over the run, each rank's step time and phases, the rank the others waited for over time, the
exchange's share, and, against a one-node reference run's records, the parallel efficiency.

Example::

    $ chainermn-rt report 42 --reference timeline/41
    timeline/42/report.html: 4 ranks on 2 nodes, 1800.2 images/s, parallel efficiency 91.0%
    chainermn-rt: slow node: none (every rank's compute within 1.15x its peers', ...)

JOB_OR_FOLDER and ``--partial``: as ``chainermn-rt timeline``'s.
"""

from __future__ import annotations

import argparse

from chainermn_rt.files import write_atomically


def configure(parser: argparse.ArgumentParser) -> None:
    from chainermn_rt.timeline.locate import add_arguments

    add_arguments(parser, "report.html", "report what can be read")
    parser.add_argument("--reference", metavar="ONE_NODE_RUN",
                        help="a one-node run's timeline folder or job id: the page shows the "
                             "parallel efficiency against it")


def run(args: argparse.Namespace) -> int:
    from chainermn_rt.errors import print_line
    from chainermn_rt.timeline import locate, merge, report

    output, loaded = locate.load_arguments(args, "report.html", "report")
    reference = None
    if args.reference:
        reference = merge.load(locate.folder_of(args.reference), partial=args.partial)
        for message in reference.damaged:
            print_line(f"chainermn-rt report: warning: left out of the reference: {message}")
    text = report.page(loaded, reference)
    write_atomically(output, lambda f: f.write(text))
    tables = merge.tables(loaded)
    summary = report.Summary.of(loaded, tables)
    line = (f"{output}: {summary.ranks} ranks on {summary.nodes} node"
            f"{'s' * (summary.nodes != 1)}, {summary.images_per_s:.1f} images/s")
    if reference is not None:
        ref = report.Summary.of(reference, merge.tables(reference))
        line += f", parallel efficiency {report.efficiency(summary, ref):.1%}"
    print(line, flush=True)
    print(tables.judge().line(loaded.hosts()), flush=True)
    return 0
