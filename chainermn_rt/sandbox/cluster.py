"""Bring the sandbox up and down, tell its status, run client commands and jobs in it.

Layout (netns mode): a "head" network namespace holds the bridge and slurmctld; each compute
node is a slurmd in its own network, UTS and mount namespace with a veth on that bridge, its
own hostname and a private /etc/hosts. munged talks through a socket in the state folder.
Nothing of it touches the host's network. Where namespaces are not permitted, loopback mode
runs every slurmd on 127.0.0.1 with its own port instead.

>>> sb = Sandbox.from_profile(state_dir="/tmp/sbx")    # doctest: +SKIP
>>> print(sb.up()); print(sb.status()); print(sb.down())  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from chainermn_rt.errors import UserError
from chainermn_rt.sandbox import processes
from chainermn_rt.sandbox.config import HEAD, MODES, render_files
from chainermn_rt.sandbox.records import FinalState, read_records, result
from chainermn_rt.sandbox.settings import SandboxSettings, sandbox_settings
from chainermn_rt.site import Site, load_site, resolve_site

RECORD = "sandbox.json"
MARKER_VAR = "CHAINERMN_RT_SANDBOX"   # set in the daemons' environment: finds their leftovers
START_TIMEOUT = 60.0
MOUNT_HOSTS = 'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"'
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE")


class SandboxError(RuntimeError):
    """The sandbox could not be started or stopped; the message says why and where the logs are."""


@dataclass
class Status:
    """What runs now. ``up`` is true only when every recorded daemon runs and every node is idle
    or allocated; ``lines`` say the same for people."""

    up: bool
    mode: str | None = None
    nodes: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(self.lines)


class Sandbox:
    def __init__(self, site: Site, settings: SandboxSettings):
        self.site, self.settings = site, settings
        self._outputs: dict[int, Path] = {}

    @classmethod
    def from_profile(cls, site: str | Path = "sandbox", nodes: int | None = None,
                     state_dir: str | Path | None = None) -> Sandbox:
        loaded = load_site(resolve_site(str(site)))
        return cls(loaded, sandbox_settings(loaded, nodes=nodes, state_dir=state_dir))

    # -- paths and records -------------------------------------------------------------
    @property
    def state_dir(self) -> Path:
        return self.settings.state_dir

    @property
    def conf(self) -> Path:
        return self.state_dir / "etc" / "slurm.conf"

    def _record(self) -> dict | None:
        try:
            return json.loads((self.state_dir / RECORD).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def _save(self, record: dict) -> None:
        tmp = self.state_dir / (RECORD + ".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(self.state_dir / RECORD)

    def _netns_names(self) -> list[str]:
        return [self.settings.netns(HEAD)] + [self.settings.netns(n)
                                               for n in self.settings.node_names()]

    def _mode(self) -> str | None:
        record = self._record()
        return record["mode"] if record else None

    # -- client commands ---------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """The environment for Slurm client commands: SLURM_CONF, and the wrappers on PATH."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = f"{self.state_dir / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` as it must run to reach the controller (inside the head namespace)."""
        if self._mode() == "netns":
            return ["nsenter", f"--net=/run/netns/{self.settings.netns(HEAD)}", "--", *argv]
        return list(argv)

    def run(self, argv: list[str], timeout: float = 120, check: bool = False,
            **kwargs) -> subprocess.CompletedProcess:
        """Run a client command (``sinfo``, ``srun ...``, ``sbatch --test-only ...``) on the
        sandbox; returns the CompletedProcess with text stdout/stderr."""
        kwargs.setdefault("capture_output", True)
        return subprocess.run(self.command(argv), env=kwargs.pop("env", self.env()), text=True,
                              timeout=timeout, check=check, **kwargs)

    # -- jobs ----------------------------------------------------------------------------
    def submit(self, script: str | Path, args: list[str] = (), cwd: str | Path | None = None
               ) -> int:
        """Submit a script (a path, or its text) with ``sbatch``; returns the job id.

        Output goes to ``STATE/jobs/slurm-%j.out`` unless the script or ``args`` say otherwise.
        Slurm's refusal raises UserError with Slurm's message.
        """
        if isinstance(script, Path) or "\n" not in script:
            path = Path(script).absolute()
            text = path.read_text()
        else:
            jobs = self.state_dir / "jobs"
            jobs.mkdir(exist_ok=True)
            text = script
            path = jobs / f"script-{time.time_ns()}.sh"
            path.write_text(script)
        argv = ["sbatch", "--parsable", *args]
        sets_output = any(a.startswith(("-o", "--output")) for a in args) or any(
            line.startswith("#SBATCH") and (" -o" in line or "--output" in line)
            for line in text.splitlines())
        if not sets_output:
            argv.append(f"--output={self.state_dir / 'jobs' / 'slurm-%j.out'}")
            (self.state_dir / "jobs").mkdir(exist_ok=True)
        proc = self.run([*argv, str(path)], cwd=cwd or os.getcwd())
        if proc.returncode != 0:
            raise UserError(f"sbatch refused the job: {(proc.stderr or proc.stdout).strip()}")
        job = int(proc.stdout.strip().split(";")[0])
        shown = self.run(["scontrol", "show", "job", "-o", str(job)]).stdout
        out = next((w[7:] for w in shown.split() if w.startswith("StdOut=")), None)
        if out:
            self._outputs[job] = Path(out)
        return job

    def record(self, job: int) -> dict[str, str] | None:
        """The job's completion record (every field Slurm wrote), or None while it runs."""
        return read_records(self.state_dir / "jobcomp.txt").get(int(job))

    def wait(self, job: int, timeout: float = 600, poll: float = 0.5) -> FinalState:
        """Wait until the job's completion record exists; its (state, exit_code)."""
        deadline = time.monotonic() + timeout
        while (rec := self.record(job)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job} not finished after {timeout:.0f} s; "
                                   f"squeue: {self.run(['squeue', '-j', str(job)]).stdout}")
            time.sleep(poll)
        return result(rec)

    def output_path(self, job: int) -> Path:
        """Where the job's standard output goes (as Slurm said at submission)."""
        return self._outputs.get(int(job), self.state_dir / "jobs" / f"slurm-{job}.out")

    def output(self, job: int) -> str:
        """The job's standard output file, as far as written."""
        path = self.output_path(job)
        return path.read_text(errors="replace") if path.exists() else ""

    # -- life cycle ----------------------------------------------------------------------
    def status(self) -> Status:
        record = self._record()
        where = f"state folder {self.state_dir}"
        if record is None:
            return Status(up=False, lines=[f"sandbox: down ({where} has no running sandbox)"])
        lines, ok = [], True
        for name, proc in record["procs"].items():
            running = processes.alive(proc)
            ok &= running
            lines.append(f"  {name}: pid {proc['pid']} {'running' if running else 'NOT running'}")
        for ns in record["netns"]:
            present = Path(f"/run/netns/{ns}").exists()
            ok &= present
            lines.append(f"  namespace {ns}: {'present' if present else 'MISSING'}")
        nodes = self._node_states() if ok else {}
        for node in self.settings.node_names() if ok else []:
            state = nodes.get(node, "not registered")
            ok &= state.rstrip("*") in ("idle", "mixed", "allocated", "completing")
            lines.append(f"  {node}: {state}")
        head = (f"sandbox: {'up' if ok else 'DEGRADED'} ({record['mode']} mode, "
                f"{len(record['nodes'])} nodes), {where}")
        if record["mode"] == "loopback":
            head += "\n  loopback mode: every node is 127.0.0.1; Open MPI uses TCP only"
        tail = [(f"  client commands: . {self.state_dir / 'env.sh'}"
                 "  (or chainermn-rt sandbox exec -- sbatch job.sh)")]
        return Status(up=ok, mode=record["mode"], nodes=nodes, lines=[head, *lines, *tail])

    def _node_states(self) -> dict[str, str]:
        try:
            proc = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=30)
        except subprocess.TimeoutExpired:
            return {}
        pairs = (line.split() for line in proc.stdout.splitlines())
        return {p[0]: p[1].lower() for p in pairs if len(p) == 2}

    def up(self, mode: str = "auto") -> str:
        """Start the sandbox (idempotent). ``mode``: auto (netns, else loopback), netns,
        loopback."""
        if mode not in ("auto", *MODES):
            raise UserError(f"--mode: {mode!r} is not allowed; allowed: auto, {', '.join(MODES)}")
        if self._record() is not None:
            status = self.status()
            if status.up:
                return f"sandbox already up ({status.mode} mode), {self.state_dir}"
            self.down()
        self._fresh_state_dir()
        for tool in ("munged", "slurmctld", "slurmd"):
            if shutil.which(tool, path="/usr/sbin:/usr/bin:" + os.environ.get("PATH", "")) is None:
                raise SandboxError(f"{tool} is not installed (run `make setup`)")
        record = {"mode": None, "nodes": self.settings.node_names(), "procs": {}, "netns": [],
                  "site": str(self.site.path)}
        self._save(record)
        notice = ""
        try:
            if mode in ("auto", "netns"):
                try:
                    self._make_network(record)
                    record["mode"] = "netns"
                except SandboxError as err:
                    if mode == "netns":
                        raise
                    self._remove_network(record)
                    notice = (f"network namespaces are not permitted here ({err}); "
                              "falling back to loopback mode\n")
            record["mode"] = record["mode"] or "loopback"
            self._save(record)
            self._write_files(record["mode"])
            self._start_daemons(record)
        except BaseException:
            self.down()
            raise
        return notice + str(self.status())

    def _fresh_state_dir(self) -> None:
        state = self.state_dir
        if state.exists() and any(state.iterdir()) and not (state / ".sandbox").exists():
            raise UserError(f"--state: {state} is not empty and not a sandbox state folder; "
                            "allowed: a new or empty folder, or one a sandbox made")
        if state.exists():
            shutil.rmtree(state)
        for sub in ("etc", "bin", "ctld", "run", "log", "munge", "dev", "jobs",
                    *(f"spool/{n}" for n in self.settings.node_names()),
                    *(f"tmp/{n}" for n in self.settings.node_names())):
            (state / sub).mkdir(parents=True, exist_ok=True)
        (state / ".sandbox").write_text("made by chainermn-rt sandbox; `down` keeps it\n")
        os.chmod(state / "munge", 0o755)  # munged: its socket folder must be searchable

    def _ip(self, *args: str) -> None:
        proc = subprocess.run(["ip", *args], check=False, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SandboxError(f"ip {' '.join(args)}: {proc.stderr.strip()}")

    def _make_network(self, record: dict) -> None:
        s = self.settings
        head = s.netns(HEAD)
        for ns in self._netns_names():
            if Path(f"/run/netns/{ns}").exists():
                raise SandboxError(f"namespace {ns} exists but is not recorded in "
                                   f"{self.state_dir}; another sandbox with prefix "
                                   f"{s.prefix!r} runs (or `ip netns del {ns}`)")
        prefix = s.subnet.prefixlen
        self._ip("netns", "add", head)
        record["netns"].append(head)
        self._save(record)
        self._ip("-n", head, "link", "set", "lo", "up")
        self._ip("-n", head, "link", "add", "br0", "type", "bridge", "forward_delay", "0")
        self._ip("-n", head, "addr", "add", f"{s.head_address()}/{prefix}", "dev", "br0")
        self._ip("-n", head, "link", "set", "br0", "up")
        for i, node in enumerate(s.node_names(), start=1):
            ns = s.netns(node)
            self._ip("netns", "add", ns)
            record["netns"].append(ns)
            self._save(record)
            self._ip("-n", ns, "link", "set", "lo", "up")
            self._ip("-n", head, "link", "add", f"veth{i}", "type", "veth",
                     "peer", "name", "eth0", "netns", ns)
            self._ip("-n", head, "link", "set", f"veth{i}", "master", "br0", "up")
            self._ip("-n", ns, "addr", "add", f"{s.node_address(i)}/{prefix}", "dev", "eth0")
            self._ip("-n", ns, "link", "set", "eth0", "up")

    def _remove_network(self, record: dict) -> list[str]:
        """Delete the recorded namespaces (their bridge and veths go with them)."""
        problems = []
        for ns in list(record["netns"]):
            if Path(f"/run/netns/{ns}").exists():
                proc = subprocess.run(["ip", "netns", "del", ns], check=False,
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    problems.append(f"ip netns del {ns}: {proc.stderr.strip()}")
                    continue
            record["netns"].remove(ns)
        return problems

    def _write_files(self, mode: str) -> None:
        inode = processes.netns_inode("/proc/self/ns/net") or 0
        for rel, text in render_files(self.site, self.settings, mode, inode).items():
            path = self.state_dir / rel
            path.write_text(text)
            if rel.startswith("bin/") or rel.endswith(".sh"):
                path.chmod(0o755)
        gpus = max(p.topology.gpus for p in self.site.partitions)
        for i in range(gpus):
            dev = self.state_dir / "dev" / f"fakegpu{i}"
            try:
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # a character device: /dev/null
            except PermissionError:
                dev.touch()  # slurmd only needs the path to exist
        key = self.state_dir / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o600)

    def _daemon_env(self) -> dict[str, str]:
        env = self.env()
        env[MARKER_VAR] = str(self.state_dir)
        return env

    def _start_daemons(self, record: dict) -> None:
        state, env = self.state_dir, self._daemon_env()
        netns = record["mode"] == "netns"

        def start(name: str, argv: list[str]) -> None:
            record["procs"][name] = processes.spawn(argv, state / "log" / f"{name}.out", env)
            self._save(record)

        munge = state / "munge"
        # --force: the state folder may sit below a folder only root can search (pytest's tmp).
        start("munged", ["munged", "--foreground", "--force", f"--key-file={munge / 'munge.key'}",
                         f"--socket={munge / 'munge.socket'}", f"--pid-file={munge / 'munged.pid'}",
                         f"--log-file={state / 'log' / 'munged.log'}",
                         f"--seed-file={munge / 'munged.seed'}"])
        self._wait_for(lambda: (munge / "munge.socket").exists(), "munged's socket", record)
        ctld = ["slurmctld", "-D", "-i", "-f", str(self.conf)]
        if netns:
            ctld = ["nsenter", f"--net=/run/netns/{self.settings.netns(HEAD)}", "unshare",
                    "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', HEAD, *ctld]
        start("slurmctld", ctld)
        self._wait_for(lambda: self.run(["scontrol", "ping"], timeout=20).returncode == 0,
                       "slurmctld to answer", record)
        for node in self.settings.node_names():
            slurmd = ["slurmd", "-D", "-N", node, "-f", str(self.conf)]
            if netns:
                slurmd = ["nsenter", f"--net=/run/netns/{self.settings.netns(node)}", "unshare",
                          "--uts", "--mount", "--propagation", "private", "sh", "-c", MOUNT_HOSTS,
                          node, str(state / "etc" / "hosts"), *slurmd]
            start(f"slurmd-{node}", slurmd)

        def idle() -> bool:
            states = self._node_states()
            return all(states.get(n) == "idle" for n in self.settings.node_names())

        self._wait_for(idle, "every node to be idle", record)

    def _wait_for(self, ready, what: str, record: dict) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            dead = [n for n, p in record["procs"].items() if not processes.alive(p)]
            if dead or time.monotonic() > deadline:
                why = f"{', '.join(dead)} exited" if dead else f"{START_TIMEOUT:.0f} s passed"
                raise SandboxError(f"sandbox did not start: waiting for {what}, {why}; "
                                   f"see {self.state_dir / 'log'}\n{self._log_tail()}")
            time.sleep(0.1)

    def _log_tail(self, lines: int = 12) -> str:
        out = []
        for log in sorted((self.state_dir / "log").glob("*")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            if text:
                out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)

    def down(self) -> str:
        """Cancel jobs, stop every recorded daemon and what they left, delete the namespaces."""
        record = self._record()
        if record is None:
            return f"sandbox not up ({self.state_dir} has no running sandbox)"
        notes = []
        if processes.alive(record["procs"].get("slurmctld", {})):
            self._cancel_jobs()
        rank = {"slurmctld": 1, "munged": 2}  # every slurmd first, then slurmctld, munged last
        order = sorted(record["procs"], key=lambda n: rank.get(n, 0))
        for name in order:
            if processes.stop([record["procs"][name]]):
                notes.append(f"{name} did not stop on SIGTERM: killed")
        inodes = {processes.netns_inode(f"/run/netns/{ns}") for ns in record["netns"]} - {None}
        marker = f"{MARKER_VAR}={self.state_dir}".encode()
        left = processes.members(inodes, marker)
        if left:
            notes.append(f"stopped {len(left)} leftover processes (pids "
                         f"{', '.join(str(p['pid']) for p in left)})")
            processes.stop(left, grace=3)
        notes += self._remove_network(record)
        if record["netns"] or any(processes.alive(p) for p in record["procs"].values()):
            self._save(record)
            raise SandboxError("sandbox not fully down: " + "; ".join(notes))
        (self.state_dir / RECORD).unlink()
        return "\n".join([f"sandbox down ({record['mode']} mode), {self.state_dir}", *notes])

    def _cancel_jobs(self) -> None:
        try:
            jobs = self.run(["squeue", "-h", "-o", "%i"], timeout=20).stdout.split()
            if not jobs:
                return
            self.run(["scancel", *jobs], timeout=20)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.run(
                    ["squeue", "-h", "-o", "%i"], timeout=20).stdout.split():
                time.sleep(0.2)
        except subprocess.TimeoutExpired:
            pass
