"""The one place that runs Slurm's client commands: submit a script, wait for its final state.

>>> slurm = Slurm()                                # doctest: +SKIP
>>> job = slurm.submit(Path("job.sh"))             # doctest: +SKIP
>>> slurm.wait(job)                                # doctest: +SKIP
FinalState(state='COMPLETED', exit_code=0)

The final state is read from Slurm (``scontrol show job`` until it ends, then ``sacct``), never
from ``sbatch --wait``'s status alone: a job whose step timed out can still exit 0. A cluster
without accounting (a sandbox with ``accounting = false``) passes its own ``records`` instead.

What a client command prints is untrusted: read up to :data:`MAX_ANSWER_BYTES`, decoded as
UTF-8 with replacement characters, then checked. An answer that is not what Slurm prints (too
long, a number that is none, a host list or node name that is not one, no MPI plugin) is the
environment's fault, not the person's: EnvironmentProblem (exit 3) naming the command or the
node and field, as is a command that does not end in time (:class:`NoAnswer`).
"""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from chainermn_rt.errors import EnvironmentProblem, JobFailed, UserError, message_value
from chainermn_rt.slurm_records import record, records

FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "BOOT_FAIL", "DEADLINE")
# Seconds a client command that only answers (scontrol show, srun --mpi=list) may take.
ANSWER_S = 30.0
# Seconds ``scontrol show job`` and ``sacct`` may take while a job is waited for.
JOB_ANSWER_S = 60.0
# What one client command may print on each of stdout and stderr; `scontrol show node -o` of
# 10,000 nodes is about 10 MB.
MAX_ANSWER_BYTES = 64 << 20
# Node names and host lists (``node[01-04],gpu7``) as this bundle takes them from Slurm
HOSTNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
HOSTLIST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,\[\]-]*\Z")


class NoAnswer(EnvironmentProblem, subprocess.TimeoutExpired):
    """A client command that did not end within its time (exit 3). Still a TimeoutExpired, for
    callers that wait and ask again."""

    def __init__(self, argv: list[str], timeout: float):
        subprocess.TimeoutExpired.__init__(self, argv, timeout)
        EnvironmentProblem.__init__(self, f"{message_value(' '.join(argv))}: no answer in "
                                    f"{timeout:.0f} s")

    __str__ = EnvironmentProblem.__str__


class FinalState(NamedTuple):
    """A finished job: its final state (``COMPLETED``, ``FAILED``, ``TIMEOUT``...), exit code."""

    state: str
    exit_code: int


@dataclass(frozen=True)
class Slurm:
    """Slurm's client commands, run with ``env`` (default: this process's environment)."""

    env: Mapping[str, str] | None = None
    records: Callable[[str], FinalState | None] | None = None
    accounting: bool = True  # sacct answers (a cluster without slurmdbd: False)

    def run(self, argv: list[str], timeout: float = 120, cwd: str | Path | None = None
            ) -> subprocess.CompletedProcess:
        """Run a client command (``sinfo``, ``srun ...``); a CompletedProcess with its output
        decoded with replacement. :class:`NoAnswer` after ``timeout`` seconds;
        EnvironmentProblem when it prints more than :data:`MAX_ANSWER_BYTES` or cannot start."""
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    cwd=cwd, env=None if self.env is None else dict(self.env))
        except OSError as err:
            why = "not found" if isinstance(err, FileNotFoundError) else \
                (err.strerror or "cannot run it").lower()
            raise EnvironmentProblem(f"{argv[0]}: {why}; run it "
                                     "where Slurm's client commands reach the cluster (for the "
                                     "sandbox: `chainermn-rt sandbox up`)") from None
        with proc:
            out, err = _bounded(proc, argv, timeout)
        return subprocess.CompletedProcess(argv, proc.returncode, _text(out), _text(err))

    def output(self, argv: list[str], timeout: float | None = None) -> str:
        """A client command's standard output; EnvironmentProblem (Slurm's last line) when it
        fails, :class:`NoAnswer` when it does not answer within ``timeout`` seconds (default
        :data:`ANSWER_S`)."""
        proc = self.run(argv, timeout=ANSWER_S if timeout is None else timeout)
        if proc.returncode != 0:
            said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            raise EnvironmentProblem(f"{message_value(' '.join(argv))} failed (exit "
                                     f"{proc.returncode}): "
                                     f"{message_value(said[-1]) if said else 'no message'}")
        return proc.stdout

    def mpi_plugins(self) -> tuple[str, ...]:
        """The MPI plugins ``srun --mpi=list`` names (Slurm 22.05 prefixes each line with
        ``srun:``; later versions indent them); words that are not plugin names are left out.
        EnvironmentProblem for an answer without ``none``, which every Slurm lists: not srun's."""
        proc = self.run(["srun", "--mpi=list"], timeout=ANSWER_S)
        said = proc.stdout + "\n" + proc.stderr
        found = mpi_plugins(said)
        if "none" not in found:
            first = said.strip().splitlines()[:1]
            shown = message_value(first[0], 40, quote=True) if first else "nothing"
            raise EnvironmentProblem(
                f"srun --mpi=list: exit {proc.returncode}, {shown}: names no MPI plugin, not "
                "even none, which every Slurm lists; run it where Slurm's srun reaches the "
                "cluster")
        return found

    def listing(self, kind: str) -> dict[str, dict[str, str]]:
        """``scontrol show partition|node -o``: each record by its name."""
        key = {"partition": "PartitionName", "node": "NodeName"}[kind]
        return {r[key]: r for r in records(self.output(["scontrol", "show", kind, "-o"]))
                if key in r}

    def hostnames(self, hostlist: str) -> list[str]:
        """``node[1-3,5],gpu7`` -> node1 node2 node3 node5 gpu7 (Slurm's own parser); a
        EnvironmentProblem for a list or a name that is not a host's."""
        if not hostlist or hostlist == "(null)":
            return []
        if not HOSTLIST.match(hostlist):
            raise EnvironmentProblem(f"Nodes={message_value(hostlist)}: not a Slurm host list; "
                                     "allowed: names of letters, digits, '.', '_', '-', with "
                                     "[ranges]")
        names = self.output(["scontrol", "show", "hostnames", hostlist]).split()
        for name in names:
            if not HOSTNAME.match(name):
                raise EnvironmentProblem(f"scontrol show hostnames {hostlist}: "
                                         f"{message_value(name)} is not a node name; allowed: "
                                         "letters, digits, '.', '_', '-'")
        return names

    def submit(self, script: Path, args: list[str] = (), cwd: str | Path | None = None) -> str:
        """``sbatch --parsable [ARGS] SCRIPT`` in ``cwd``; the job id. Slurm's refusal is a
        UserError with Slurm's message."""
        proc = self.run(["sbatch", "--parsable", *args, str(Path(script).absolute())],
                        cwd=cwd or os.getcwd())
        if proc.returncode != 0:
            raise UserError("sbatch refused the job: "
                            + (proc.stderr.strip() or proc.stdout.strip()).replace("\n", "; "))
        job = proc.stdout.strip().split(";")[0]
        if not (job.isascii() and job.isdigit()):
            raise EnvironmentProblem(f"sbatch --parsable printed {message_value(proc.stdout)}"
                                     "; expected a job id (digits, then ;cluster)")
        return job

    def show(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o``'s fields, or {} once Slurm has forgotten the job."""
        proc = self.run(["scontrol", "show", "job", "-o", str(job_id)], timeout=JOB_ANSWER_S)
        return record(proc.stdout) if proc.returncode == 0 else {}

    def stdout_path(self, job_id: str) -> Path | None:
        """Where the job's standard output goes, as Slurm says."""
        out = self.show(job_id).get("StdOut")
        return Path(out) if out else None

    def state(self, job_id: str) -> FinalState | None:
        """The job's final state, or None while it is pending, running or requeued: once
        ``scontrol`` says it ended (or has forgotten it), ``sacct``'s record where there is
        accounting, else scontrol's, else ``records``."""
        fields = self.show(job_id)
        current = final_state(fields["JobState"], fields.get("ExitCode", "0:0")) \
            if fields.get("JobState") else None
        if fields.get("JobState") and current is None:
            return None
        if self.accounting and (found := self.accounted(job_id)) is not None:
            return found
        if current is not None or self.records is None:
            return current
        return self.records(str(job_id))

    def accounted(self, job_id: str) -> FinalState | None:
        """``sacct``'s final state of the job's latest run; None when sacct has none (yet), or
        the cluster keeps no accounts (or has no sacct)."""
        try:
            proc = self.run(["sacct", "-n", "-P", "-X", "-j", str(job_id), "-o",
                             "State,ExitCode"], timeout=JOB_ANSWER_S)
        except NoAnswer:
            raise
        except EnvironmentProblem:  # sacct not installed: scontrol's record answers
            return None
        line = proc.stdout.strip().splitlines()[:1] if proc.returncode == 0 else []
        if not line or "|" not in line[0]:
            return None
        return final_state(*line[0].split("|", 1))

    def wait(self, job_id: str, timeout: float | None = None, poll: float = 1.0) -> FinalState:
        """Poll until the job ends; :class:`JobFailed` when ``timeout`` seconds pass first. A
        poll that gets no answer (slurmctld starved on a loaded head node) is asked again
        while ``timeout`` lasts; without one, :class:`NoAnswer` ends the wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (found := self._poll(job_id, deadline)) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise JobFailed(f"job {job_id} did not end within {timeout:.0f} s; it goes on "
                                f"(scancel {job_id} stops it)")
            time.sleep(poll)
        return found

    def _poll(self, job_id: str, deadline: float | None) -> FinalState | None:
        try:
            return self.state(job_id)
        except NoAnswer:
            if deadline is None or time.monotonic() > deadline:
                raise
            return None


def final_state(state: str, exit_code: str) -> FinalState | None:
    """A FinalState from Slurm's words (``TIMEOUT``, ``0:15``), None if not final yet.
    The exit code is the number before ``:`` (after it is the signal)."""
    state = state.split()[0] if state.strip() else ""
    if state not in FINAL_STATES:
        return None
    code = exit_code.partition(":")[0]
    return FinalState(state, int(code) if re.fullmatch(r"[0-9]{1,9}", code) else -1)


def whole(fields: Mapping[str, str], key: str, high: int, where: str) -> int:
    """``fields[key]`` (a record of ``scontrol show``) as a whole number 0..``high``; an
    EnvironmentProblem (a damaged answer) naming ``where`` and the field otherwise.

    >>> whole({"CPUTot": "4"}, "CPUTot", 64, "node n1")
    4
    >>> whole({"CPUTot": "abc"}, "CPUTot", 64, "node n1")
    Traceback (most recent call last):
    chainermn_rt.errors.EnvironmentProblem: node n1: CPUTot=abc; allowed: a whole number 0-64
    """
    text = fields.get(key)
    if text is not None and re.fullmatch(r"[0-9]{1,19}", text) and int(text) <= high:
        return int(text)
    said = f"no {key}" if text is None else f"{key}={message_value(text)}"
    raise EnvironmentProblem(f"{where}: {said}; allowed: a whole number 0-{high}")


_PLUGIN = re.compile(r"(?:srun: )?([a-z][a-z0-9_]*)\Z")


def mpi_plugins(text: str) -> tuple[str, ...]:
    """``srun --mpi=list``'s plugin names, line by line (no pattern spans lines).

    >>> mpi_plugins("srun: MPI types are...\\nsrun: none\\nsrun: pmix_v4\\n\\tpmi2\\n")
    ('none', 'pmix_v4', 'pmi2')
    """
    words = (m.group(1) for m in map(_PLUGIN.match, (line.strip() for line in
                                                      text.splitlines())) if m)
    return tuple(w for w in words if w not in ("mpi", "types", "are"))


def _bounded(proc: subprocess.Popen, argv: list[str], timeout: float) -> tuple[bytes, bytes]:
    """(stdout, stderr) of ``proc`` once it ends: killed and refused past ``timeout`` seconds or
    :data:`MAX_ANSWER_BYTES` on either."""
    deadline = time.monotonic() + timeout
    got: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    sizes = dict.fromkeys(got, 0)
    with selectors.DefaultSelector() as selector:
        for fd in got:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                raise NoAnswer(argv, timeout)
            for key, _ in selector.select(left):
                data = os.read(key.fd, 1 << 16)
                if not data:
                    selector.unregister(key.fd)
                    continue
                got[key.fd].append(data)
                sizes[key.fd] += len(data)
                if sizes[key.fd] > MAX_ANSWER_BYTES:
                    proc.kill()
                    raise EnvironmentProblem(f"{message_value(' '.join(argv))}: printed more "
                                             f"than {MAX_ANSWER_BYTES >> 20} MiB; allowed: a "
                                             "Slurm client's answer, at most that")
    try:
        proc.wait(max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        proc.kill()
        raise NoAnswer(argv, timeout) from None
    return b"".join(got[proc.stdout.fileno()]), b"".join(got[proc.stderr.fileno()])


def _text(data: bytes) -> str:
    """Bytes a command printed as text: UTF-8, undecodable bytes replaced, line ends as
    ``text=True`` gives them."""
    return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
