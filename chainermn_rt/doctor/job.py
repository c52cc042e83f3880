"""A doctor job from request to verdict.

The job is planned like any training job (plan.py: same binding, same launcher, same
container); only its program is the probe (``python -m chainermn_rt.doctor.probe``, with the
interpreter the Plan chooses). :meth:`chainermn_rt.submission.Cluster.run` submits it and
waits; then its folder's reports (reports.py) go through the checks (cluster.py), as
``chainermn-rt doctor --site`` does (commands/doctor.py)::

    out = folder_for(None)
    plan = doctor_plan(site, request, out)
    job_id, final, _, _ = Cluster.of(site).run(make_folder(out) / SCRIPT, plan)
    checks = collect(out, expected(site, plan), final, job_id)
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path

from chainermn_rt.arguments import folder
from chainermn_rt.doctor.check import FAIL, PASS, Check
from chainermn_rt.doctor.cluster import Expected, run_checks
from chainermn_rt.doctor.node_check import with_check
from chainermn_rt.doctor.reports import load_reports
from chainermn_rt.doctor.step_log import crashed_task, tail
from chainermn_rt.errors import UserError
from chainermn_rt.job_request import Request
from chainermn_rt.plan import Plan, make_plan
from chainermn_rt.site import Site
from chainermn_rt.slurm_client import FinalState
from chainermn_rt.slurm_rules import parse_time

PROBE = "chainermn_rt.doctor.probe"
JOB_NAME = "chainermn-doctor"
SCRIPT = "doctor.sh"
LOG = "doctor-%j.out"
DEFAULT_TIME = "00:10:00"  # unless --time; the partition's limit where that is shorter
DEFAULT_BANDWIDTH_BYTES = 64 << 20  # when the profile expects a bandwidth


def folder_for(out: Path | None) -> Path:
    """The job's folder, not made yet: ``out`` (new or empty), else a new
    ``doctor-XXXXXXXX`` here."""
    if out is None:
        while (found := Path.cwd() / f"doctor-{secrets.token_hex(4)}").exists():
            pass
        return found
    out = folder(out, "--out")
    if out.exists() and any(out.iterdir()):
        raise UserError(f"--out: {out} is not an empty folder; allowed: a new or empty folder "
                        "(the reports of one run)")
    return out


def make_folder(out: Path) -> Path:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--out: {out}: {err.strerror}; allowed: a folder this user can "
                        "create") from None
    return out


def doctor_plan(site: Site, request: Request, out: Path,
                bandwidth_bytes: int | None = None) -> Plan:
    """The Plan of ``request`` with the probe as its program, its log in ``out``, and the node
    check its runtime needs (node_check.py).
    ``bandwidth_bytes`` None: measure 64 MiB when the profile expects a bandwidth."""
    if bandwidth_bytes is None:
        bandwidth_bytes = DEFAULT_BANDWIDTH_BYTES if site.allreduce_busbw_gbps else 0
    if bandwidth_bytes < 0 or bandwidth_bytes % 4:
        raise UserError(f"--bandwidth-bytes: {bandwidth_bytes}; allowed: 0 (no measurement) or "
                        "a multiple of 4 (float32 elements)")
    part = site.partition(request.partition)
    time = request.time or (DEFAULT_TIME if parse_time(DEFAULT_TIME, "time") <= part.max_time_s
                            else None)
    arguments = ("--out", str(out))
    if bandwidth_bytes:
        arguments += ("--bandwidth-bytes", str(bandwidth_bytes))
    plan = make_plan(site, replace(request, time=time, job_name=JOB_NAME, log=str(out / LOG),
                                   per_rank_logs=False, module=PROBE, command=arguments))
    return with_check(plan, out)


def expected(site: Site, plan: Plan) -> Expected:
    return Expected(ranks=plan.world_size, busbw_gbps=site.allreduce_busbw_gbps,
                    mpi_library=site.mpi.library if site.mpi.bound else None,
                    fabric=site.fabric.kind, provider=site.fabric.provider,
                    nccl_plugin=site.nccl.net_plugin)


def job_check(final: FinalState, job: str, out: Path) -> Check:
    """The job's end; where it failed, the task a signal ended as its log says (step_log)."""
    log = out / LOG.replace("%j", str(job))
    if tuple(final) == ("COMPLETED", 0):
        return Check("job", PASS, f"job {job} COMPLETED, exit code 0")
    crashed = crashed_task(tail(log))
    return Check("job", FAIL, f"job {job} {final.state}, exit code {final.exit_code}"
                 + (f"; srun: {crashed}" if crashed else ""), f"read {log}")


def collect(out: Path, expect: Expected, final: FinalState | None = None,
            job: str | None = None) -> list[Check]:
    """The checks over the reports in ``out``; with the job's final state, its row first."""
    reports, gathered = load_reports(out)
    checks = run_checks(reports, gathered, expect)
    return ([job_check(final, job, out)] if final is not None else []) + checks
