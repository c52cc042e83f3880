"""Where a run's records are, and the arguments ``chainermn-rt timeline|report`` share
(JOB_OR_FOLDER, ``--output``, ``--partial``).

A job rendered with ``--timeline`` records into ``timeline/<job id>`` in its working folder
(the job script sets ``CHAINERMN_RT_TIMELINE`` to it; a requeued run appends to the same
files). So JOB_OR_FOLDER is a folder, or a job id: ``timeline/<id>`` in the current folder,
else in the working folder Slurm gives for the job (``scontrol show job``).

>>> import tempfile, pathlib
>>> here = pathlib.Path(tempfile.mkdtemp())
>>> (here / "timeline" / "42").mkdir(parents=True)
>>> folder_of("42", cwd=here).relative_to(here).as_posix()
'timeline/42'
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from chainermn_rt.arguments import output_file
from chainermn_rt.errors import EnvironmentProblem, UserError, print_line
from chainermn_rt.rank_contract import TIMELINE_FOLDER
from chainermn_rt.timeline.records import HOW_TO

JOB = re.compile(r"[0-9]{1,12}(_[0-9]{1,9})?\Z")


def folder_of(text: str, cwd: Path | None = None, slurm=None) -> Path:
    """The records' folder JOB_OR_FOLDER names; a UserError when there is none."""
    cwd = Path.cwd() if cwd is None else Path(cwd)
    path = cwd / text
    if path.is_dir():
        return path
    if not JOB.match(text):
        raise UserError(f"JOB_OR_FOLDER: {text}: no such folder; allowed: a timeline folder "
                        "or a Slurm job id")
    here = cwd / TIMELINE_FOLDER / text
    if here.is_dir():
        return here
    fields = {}
    try:
        if slurm is None:
            from chainermn_rt.slurm_client import Slurm

            slurm = Slurm()
        fields = slurm.show(text)
    except (EnvironmentProblem, OSError):
        pass
    workdir = fields.get("WorkDir")
    if workdir:
        there = Path(workdir) / TIMELINE_FOLDER / fields.get("JobId", text)
        if there.is_dir():
            return there
    where = f" nor in the job's working folder {workdir}" if workdir else ""
    raise UserError(f"JOB_OR_FOLDER: job {text}: no folder {TIMELINE_FOLDER}/{text} here{where}; "
                    f"{HOW_TO}")


def add_arguments(parser: argparse.ArgumentParser, output: str, partial: str) -> None:
    """JOB_OR_FOLDER, ``--output`` (default ``FOLDER/<output>``) and ``--partial``."""
    parser.add_argument("job_or_folder", metavar="JOB_OR_FOLDER",
                        help="a timeline folder, or a Slurm job id rendered with --timeline")
    parser.add_argument("--output", "-o", type=Path, help=f"default: FOLDER/{output}")
    parser.add_argument("--partial", action="store_true",
                        help=f"{partial} when a rank's file is damaged or missing (named on "
                             "stderr)")


def load_arguments(args: argparse.Namespace, output: str, command: str):
    """(the output file, checked, and the loaded run) of the parsed arguments; what
    ``--partial`` left out is named on stderr."""
    from chainermn_rt.timeline import merge

    folder = folder_of(args.job_or_folder)
    path = output_file(args.output or folder / output, "--output", (Path(output).suffix,))
    run = merge.load(folder, partial=args.partial)
    for message in run.damaged:
        print_line(f"chainermn-rt {command}: warning: left out: {message}")
    return path, run
