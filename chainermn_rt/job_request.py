"""What a user asks for (the ``render`` and ``submit`` arguments), and its own checks.

:func:`checked` holds a request to what the partition allows and to Slurm's value rules
(slurm_rules.py) before the Plan decides anything; it returns the request with the time limit
filled in, so every value the Plan writes has been checked once, here.

>>> from chainermn_rt.site import load_site
>>> part = load_site("slurm/sites/sandbox.toml").partition(None)
>>> checked(Request(nodes=2, command=("true",)), part).time == part.max_time
True
>>> checked(Request(nodes=2, command=("true",), time="99:00:00"), part)  # doctest: +ELLIPSIS
Traceback (most recent call last):
chainermn_rt.errors.UserError: --time: 99:00:00 is over partition 'gpu''s limit; allowed: ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from chainermn_rt.errors import UserError
from chainermn_rt.rank_contract import check_settings
from chainermn_rt.site import ENV_NAME, Partition
from chainermn_rt.slurm_rules import check_printable, check_variable, parse_memory_mb, parse_time

# The job's log (#SBATCH --output), unless --log says otherwise.
LOG_PATTERN = "%x-%j.out"
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


@dataclass(frozen=True)
class Request:
    """What a user asks for (the ``chainermn-rt render`` arguments)."""

    nodes: int
    command: tuple[str, ...] = ()
    gpus_per_node: int | None = None
    ranks_per_node: int | None = None
    partition: str | None = None
    time: str | None = None
    job_name: str = "chainermn"
    image: str | None = None
    runtime: str | None = None
    launcher: str | None = None
    account: str | None = None
    qos: str | None = None
    memory: str | None = None
    python: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    per_rank_logs: bool = False
    log: str = LOG_PATTERN
    # Run ``python -m MODULE COMMAND...`` with the interpreter the Plan chooses (the doctor's
    # probe, the scaling study's benchmark); None: COMMAND is the whole program.
    module: str | None = None
    # folders on the shared file system copied to every node's local_scratch before the ranks
    # start (``--stage``; chainermn_rt.staging)
    stage: tuple[str, ...] = ()
    # record every rank's step phases (``--timeline``; chainermn_rt.timeline)
    timeline: bool = False
    # nodes the job must not run on (``--exclude-from FILE``; chainermn_rt.host_list)
    exclude: tuple[str, ...] = ()


def checked(req: Request, part: Partition, slurm: tuple[int, int] | None = None) -> Request:
    """``req`` with every value checked against ``part`` and the rules of Slurm ``slurm``
    (the profile's version; None: today's), and its time limit filled in (the partition's
    when it names none); UserError names the first wrong field and what is allowed."""
    if not 1 <= req.nodes <= part.nodes:
        raise UserError(f"--nodes: {req.nodes} on partition {part.name!r}; allowed: "
                        f"1-{part.nodes}")
    if not req.command and req.module is None:
        raise UserError("COMMAND: missing; allowed: the program to run, after `--`")
    if req.module is not None and not MODULE.match(req.module):
        raise ValueError(f"module {req.module!r} is not a Python module name")
    for i, arg in enumerate(req.command):
        if "\0" in arg:
            raise UserError(f"COMMAND[{i}]: contains a NUL byte; allowed: any other text")
    time = req.time or part.max_time
    if parse_time(time, "--time") > part.max_time_s:
        raise UserError(f"--time: {time} is over partition {part.name!r}'s limit; allowed: up "
                        f"to {part.max_time}")
    memory_mb = None if req.memory is None else parse_memory_mb(req.memory, "--mem")
    if memory_mb is not None and part.memory_mb is not None and memory_mb > part.memory_mb:
        raise UserError(f"--mem: {req.memory} is more than a node of partition {part.name!r} "
                        f"has; allowed: up to {part.memory_mb}M")
    if not re.match(r"[^/\s]", req.job_name or ""):
        raise UserError(f"--job-name: {req.job_name!r}; allowed: a non-empty name not starting "
                        "with a space or /")
    check_printable(req.job_name, "--job-name")
    check_printable(req.log, "--log")
    if req.python and "\0" in req.python:
        raise UserError("--python: contains a NUL byte; allowed: an interpreter's path or name")
    for value, where in ((req.image, "--image"), (req.account, "--account"),
                         (req.qos, "--qos"), (",".join(req.exclude), "--exclude-from")):
        if value is not None:
            check_printable(value, where)
    for key, value in req.env:
        if not ENV_NAME.match(key):
            raise UserError(f"--env: {key!r} is not a variable name; allowed: KEY=VALUE with "
                            "KEY made of letters, digits and _")
        check_printable(value, f"--env {key}")
        check_variable(key, "--env", slurm)
    check_settings(dict(req.env), "--env ")
    return replace(req, time=time)
