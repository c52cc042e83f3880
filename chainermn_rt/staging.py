"""Staging (``render --stage PATH``): data copied to every node's local storage for one job.
The one owner of its contract: the Plan's copy and removal steps, the node-local folder's
name (built here, parsed back here), where copy i lives, and how a rank finds its copy.

The job script exports the node-local folder (``STAGE_DIR``: the partition's local_scratch,
``FOLDER_PREFIX`` and the job id) and the staged folders (``STAGE_FROM``, a JSON list); its copy
step (:mod:`chainermn_rt.stage_copy`) puts copy i at ``STAGE_DIR/<i>``. A program keeps naming
the shared path and reads the local copy:

>>> env = {"CHAINERMN_RT_STAGE_DIR": "/tmp/chainermn-rt-stage-7",
...        "CHAINERMN_RT_STAGE_FROM": '["/lustre/shards/train", "/lustre/shards/val"]'}
>>> local_path("/lustre/shards/val", env)
'/tmp/chainermn-rt-stage-7/1'
>>> local_path("/lustre/shards/train/shard-000003.tar", env)
'/tmp/chainermn-rt-stage-7/0/shard-000003.tar'
>>> local_path("/lustre/shards/train2", env), local_path("/lustre/other", {})
('/lustre/shards/train2', '/lustre/other')
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from chainermn_rt.errors import UserError
from chainermn_rt.quoting import Expanding
from chainermn_rt.rank_contract import STAGE_DIR_VAR, STAGE_FROM_VAR, STAGE_LIVE_JOBS_VAR
from chainermn_rt.slurm_rules import check_printable, one_per_node

# The variables the job script exports (their names in rank_contract, which the timeline reads
# too).
VARIABLES = (STAGE_DIR_VAR, STAGE_FROM_VAR, STAGE_LIVE_JOBS_VAR)
# A job's node-local folder: this prefix and the job id, in the partition's local_scratch.
FOLDER_PREFIX = "chainermn-rt-stage-"
_JOB_FOLDER = re.compile(re.escape(FOLDER_PREFIX) + r"([0-9]+)\Z")


# -- the node-local folder: built and parsed ----------------------------------------------

def folder_prefix(scratch: str) -> str:
    """The node-local folder's path up to the job id the job script appends."""
    return posixpath.join(scratch, FOLDER_PREFIX)


def job_of(name: str) -> str | None:
    """The job id in a node-local folder's name; None for any other name.

    >>> job_of("chainermn-rt-stage-42"), job_of("chainermn-rt-stage-42.old")
    ('42', None)
    """
    m = _JOB_FOLDER.match(name)
    return m.group(1) if m else None


def copy_of(folder: str, index: int) -> str:
    """Where copy ``index`` (the ``index``-th staged folder) lives in the node-local folder."""
    return posixpath.join(folder, str(index))


# -- the Plan's side -----------------------------------------------------------------------

@dataclass(frozen=True)
class Stage:
    """Data copied to node-local storage: before the ranks start, ``copy`` (one task per node)
    copies source i to :func:`copy_of` (STAGE_DIR, i); once the batch shell ends (also on
    failure, and before it requeues the job), ``remove`` + STAGE_DIR deletes it on every node.
    ``list_jobs`` prints the user's job ids: the copy step removes the folders of other jobs
    no longer listed that a kill left on its node."""

    sources: tuple[str, ...]
    scratch: str
    copy: tuple[str | Expanding, ...]
    remove: tuple[str, ...]
    list_jobs: tuple[str, ...] = ("squeue", "--me", "--noheader", "--format=%A")
    dir_var: str = STAGE_DIR_VAR
    from_var: str = STAGE_FROM_VAR
    live_var: str = STAGE_LIVE_JOBS_VAR

    @property
    def folder(self) -> str:
        return folder_prefix(self.scratch)

    @property
    def sources_json(self) -> str:
        return json.dumps(list(self.sources))


def stage_sources(paths: tuple[str, ...]) -> tuple[str, ...]:
    """``--stage`` folders, normalised: absolute, printable, none inside another.

    >>> stage_sources(("/lustre/a/train/", "/lustre/a//val"))
    ('/lustre/a/train', '/lustre/a/val')
    >>> stage_sources(("/lustre/a", "/lustre/a/val"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    chainermn_rt.errors.UserError: --stage: '/lustre/a/val' lies in '/lustre/a', staged already; ...
    """
    allowed = "an absolute path of a folder on the shared file system, other than /"
    sources: list[str] = []
    for path in paths:
        if "\0" in path:
            raise UserError(f"--stage: {path!r} contains a NUL byte; allowed: {allowed}")
        check_printable(path, "--stage")
        if not path.startswith("/"):
            raise UserError(f"--stage: {path!r} is a relative path; allowed: {allowed}")
        norm = "/" + posixpath.normpath(path).lstrip("/")
        if norm == "/":
            raise UserError(f"--stage: {path!r}; allowed: {allowed}")
        for other in sources:
            inner, outer = sorted((norm, other), key=len, reverse=True)
            if inner == outer or inner.startswith(outer + "/"):
                what = "given twice" if inner == outer else f"lies in {outer!r}, staged already"
                raise UserError(f"--stage: {inner!r} {what}; allowed: folders that do not "
                                "contain each other")
        sources.append(norm)
    return tuple(sources)


def plan_stage(paths: tuple[str, ...], scratch: str | None, where: str, nodes: int,
               before_python: tuple[str | Expanding, ...], python: str) -> Stage | None:
    """The copy and removal steps for ``--stage paths``: srun whatever the ranks' launcher
    (every Slurm allocation has it, and a copy needs no MPI), one task on each node, the copy
    after ``before_python`` (a container's flags and argv). ``scratch``: the partition's
    local_scratch, ``where`` names that partition in an error."""
    if not paths:
        return None
    if scratch is None:
        raise UserError(f"--stage: {where} has no local_scratch; allowed: a partition whose "
                        "profile entry names its node-local folder in local_scratch "
                        "(docs/site-profiles.md)")
    each = one_per_node(nodes)
    return Stage(sources=stage_sources(paths), scratch=scratch,
                 copy=(*each, *before_python, python, "-m", "chainermn_rt", "data", "stage",
                       "--job"),
                 remove=(*each, "rm", "-rf", "--"))


# -- the rank's side -----------------------------------------------------------------------

@dataclass(frozen=True)
class StagedJob:
    """This job's node-local folder and the staged folders, in order (copy i of sources[i])."""

    folder: str
    sources: tuple[str, ...]

    def copy(self, index: int) -> str:
        return copy_of(self.folder, index)


def staged_job(environ: Mapping[str, str] | None = None) -> StagedJob | None:
    """What the job script says it staged; None when it staged nothing. A malformed value is a
    UserError naming the variable.

    >>> staged_job({"CHAINERMN_RT_STAGE_DIR": "/s/x", "CHAINERMN_RT_STAGE_FROM": '["/a"]'})
    StagedJob(folder='/s/x', sources=('/a',))
    >>> staged_job({"CHAINERMN_RT_STAGE_DIR": "/s/x", "CHAINERMN_RT_STAGE_FROM": '"/a"'})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    chainermn_rt.errors.UserError: CHAINERMN_RT_STAGE_FROM: '"/a"'; allowed: a JSON list of ...
    """
    env = os.environ if environ is None else environ
    folder, text = env.get(STAGE_DIR_VAR, ""), env.get(STAGE_FROM_VAR, "")
    if not folder and not text:
        return None
    try:
        sources = json.loads(text)
    except ValueError:
        sources = None
    if not isinstance(sources, list) or not all(
            isinstance(s, str) and s.startswith("/") for s in sources):
        raise UserError(f"{STAGE_FROM_VAR}: {text[:200]!r}; allowed: a JSON list of absolute "
                        "paths, as the job script writes it")
    if not folder.startswith("/"):
        raise UserError(f"{STAGE_DIR_VAR}: {folder[:200]!r}; allowed: an absolute path, as the "
                        "job script writes it")
    return StagedJob(folder, tuple(posixpath.normpath(s) for s in sources))


def local_path(path: str, environ: Mapping[str, str] | None = None) -> str:
    """The node-local copy of ``path`` when it is a staged folder or lies below one (the
    longest staged folder wins), else ``path`` unchanged. Paths compare as text after
    normalising (``a//b/``, ``a/./b``); relative paths are taken from the current folder;
    symbolic links are not followed."""
    job = staged_job(environ)
    if job is None:
        return path
    full = posixpath.normpath(path if path.startswith("/") else posixpath.join(os.getcwd(), path))
    best = None
    for i, source in enumerate(job.sources):
        if full == source or full.startswith(source.rstrip("/") + "/"):
            if best is None or len(source) > len(job.sources[best]):
                best = i
    if best is None:
        return path
    rest = full[len(job.sources[best]):].lstrip("/")
    return posixpath.join(job.copy(best), rest) if rest else job.copy(best)
