"""The sandbox's life cycle: up, down, status, and the client environment that reaches it.

Layout: a "head" network namespace holds the bridge and slurmctld; each compute node is a
slurmd in its own network, UTS and mount namespace with a veth on that bridge, its own
hostname and a private /etc/hosts. munged talks through a socket in the state folder.
Nothing of it touches the host's network (docs/sandbox.md).

>>> sb = Sandbox.from_profile(state_dir="/tmp/sbx")        # doctest: +SKIP
>>> print(sb.up()); print(sb.status()); print(sb.down())   # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from chainermn_rt.errors import EnvironmentProblem, UserError
from chainermn_rt.quoting import sh
from chainermn_rt.sandbox import (
    accounting,
    daemons,
    netns,
    processes,
    pyxis,
    pyxis_build,
    scratch,
)
from chainermn_rt.sandbox.config import render_files
from chainermn_rt.sandbox.records import read_records, result
from chainermn_rt.sandbox.root import Root, ensure_root, load_pins
from chainermn_rt.sandbox.settings import (
    DEBIAN12,
    DEBIAN13,
    HOST_USER,
    SandboxSettings,
    sandbox_settings,
    spanning,
)
from chainermn_rt.sandbox.stacks import FUSE, FUSE_NUMBERS, Launcher
from chainermn_rt.sandbox.status import Status, leftovers, status
from chainermn_rt.site import Site, data_dir, load_site, resolve_site
from chainermn_rt.slurm_client import FinalState, Slurm

RECORD = "sandbox.json"
MADE_HERE = ".sandbox"  # marks a state folder `up` made, the only kind it wipes
# What `up` keeps of a state folder it renews: slurmctld's job state, from which `slurmctld -c`
# takes only the last job id, so ids go on increasing across restarts as on a real cluster (a
# job's `<name>-<id>.out` never holds an earlier job's output).
KEPT = ("ctld/job_state", "ctld/job_state.old")


class SandboxError(EnvironmentProblem):
    """The sandbox could not be started, reached or stopped; one line saying why and where."""


class Sandbox:
    def __init__(self, site: Site, settings: SandboxSettings):
        self.site, self.settings = site, settings
        self.slurm = Slurm(env=self.env(), records=self.final_state,
                           accounting=settings.accounting)

    @classmethod
    def from_profile(cls, site: str | Path = "sandbox", nodes: int | None = None,
                     state_dir: str | Path | None = None, stack: str | None = None) -> Sandbox:
        """``stack`` None: the profile's ``[sandbox] stack``; where it names none, the stack of
        the sandbox up in the state folder, else the default."""
        loaded = load_site(resolve_site(str(site)), "--site")
        settings = sandbox_settings(loaded, nodes=nodes, state_dir=state_dir, stack=stack)
        if stack is None and (loaded.sandbox is None or loaded.sandbox.stack is None):
            recorded = cls(loaded, settings)._record()
            if recorded and recorded.get("stack", settings.stack) != settings.stack:
                settings = sandbox_settings(loaded, nodes=nodes, state_dir=state_dir,
                                            stack=recorded["stack"])
        return cls(loaded, settings)

    @property
    def state_dir(self) -> Path:
        return self.settings.state_dir

    def env(self) -> dict[str, str]:
        """The environment for Slurm's client commands: SLURM_CONF, the wrappers on PATH."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
        env["SLURM_CONF"] = str(self.state_dir / "etc" / "slurm.conf")
        env["PATH"] = f"{self.state_dir / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    def client(self) -> Slurm:
        """``self.slurm`` once the sandbox is up; else SandboxError saying how to start it."""
        record = self._record()
        if record is None:
            raise SandboxError(f"the sandbox of {self.site.path} is not up ({self.state_dir}); "
                               f"start it with `{self._up_command()}`")
        wanted = self.site.sandbox.stack if self.site.sandbox else None
        running = record.get("stack", DEBIAN12)
        if wanted is not None and running != wanted:
            raise SandboxError(f"the sandbox in {self.state_dir} runs the {running} stack and "
                               f"site {self.site.name!r} is for the {wanted} stack; start that "
                               f"one with `{self._up_command()}` (it brings the other down)")
        return self.slurm

    def _up_command(self) -> str:
        """`chainermn-rt sandbox up` for this profile: a shipped one by its name."""
        shipped = data_dir() / "sites" / f"{self.site.name}.toml"
        same = shipped.is_file() and shipped.resolve() == Path(self.site.path).resolve()
        name = self.site.name if same else str(self.site.path)
        return "chainermn-rt sandbox up" + ("" if name == "sandbox" else f" --site {sh(name)}")

    # -- jobs: the completion records, sacct's fallback (and stand-in without accounting) --
    def job_record(self, job_id: str) -> dict[str, str] | None:
        """Every field of the job's completion record, or None while it runs."""
        return read_records(self.state_dir / "jobcomp.txt").get(str(job_id))

    def final_state(self, job_id: str) -> FinalState | None:
        record = self.job_record(job_id)
        return result(record) if record else None

    # -- life cycle ----------------------------------------------------------------------
    def _record(self) -> dict | None:
        try:
            return json.loads((self.state_dir / RECORD).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def running_nodes(self) -> int | None:
        """How many nodes the sandbox of this state folder runs (``up --nodes`` chose them);
        None when it is not up."""
        record = self._record()
        nodes = record.get("nodes") if isinstance(record, dict) else None
        return len(nodes) if isinstance(nodes, list) and nodes else None

    def daemons(self) -> dict[str, dict]:
        """The running sandbox's daemons as recorded: name -> pid, start time, argv."""
        record = self._record()
        return dict(record["procs"]) if record else {}

    def _save(self, record: dict) -> None:
        tmp = self.state_dir / (RECORD + ".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(self.state_dir / RECORD)

    def status(self) -> Status:
        return status(self.settings, self._record(), self.slurm)

    def launcher(self, record: dict | None = None) -> Launcher:
        """The stack's command lines; the root as recorded by ``up`` (``record``), else none."""
        record = record if record is not None else self._record()
        folder = (record or {}).get("root")
        tools = (record or {}).get("pyxis")
        docker = (record or {}).get("docker")
        return Launcher(self.settings, Root(Path(folder), load_pins()) if folder else None,
                        pyxis_build.Tools(Path(tools)) if tools else None,
                        Path(docker) if docker else None)

    def up(self, say=lambda line: None) -> str:
        """Start the sandbox (idempotent); what a sandbox that ended without ``down`` left is
        cleared first; one up on another stack is brought down. ``say``: progress lines (the
        Debian 13 root's first build). Returns the status's text."""
        notes = []
        record = self._record()
        if record is not None:
            if record.get("stack", DEBIAN12) == self.settings.stack and self.status().up:
                return f"sandbox already up, {self.state_dir}"
            notes.append(self.down())
        else:
            left = leftovers(self.settings)
            if left:
                self._clear(left)
                notes.append(f"cleared what a sandbox left without `down`: {left}")
        in_root = self.settings.stack == DEBIAN13
        tools = daemons.HOST_TOOLS if in_root else \
            daemons.TOOLS + (accounting.TOOLS if self.settings.accounting else ())
        missing = [t for t in tools
                   if shutil.which(t, path="/usr/sbin:/usr/bin:" + os.environ.get("PATH", ""))
                   is None]
        if missing:
            raise SandboxError(f"not installed: {', '.join(missing)}; run `make setup`")
        root = ensure_root(say=say) if in_root else None
        tools = pyxis_build.find(self.settings.stack, root) if self.settings.pyxis else None
        if tools is not None:
            pyxis.check(self.settings, tools)
        scratch.check(self.settings)
        if self.settings.accounting:
            accounting.account_of(self.site)  # a bad account or QOS: refused before any start
        self._fresh_state_dir()
        scratch.make(self.settings)
        record = {"nodes": self.settings.node_names(), "procs": {}, "site": str(self.site.path),
                  "stack": self.settings.stack}
        if root is not None:
            record["root"] = str(root.folder)
        if tools is not None:
            pyxis.make_folders(self.settings)
            record["pyxis"] = str(tools.folder)
            docker = pyxis.docker_socket(dict(os.environ)) if in_root else None
            if docker is not None:  # enroot import dockerd:// on the nodes
                record["docker"] = str(docker)
        self._save(record)
        launch = self.launcher(record)
        try:
            try:
                netns.create(self.settings)
            except netns.NetworkError as err:
                raise SandboxError(f"network namespaces could not be made ({err}); the sandbox "
                                   "needs root with CAP_SYS_ADMIN") from None
            self._write_files(launch)
            try:
                daemons.start_all(self.settings, self.slurm, record["procs"],
                                  lambda: self._save(record), launch)
            except daemons.StartError as err:
                raise SandboxError(str(err)) from None
        except BaseException:
            self.down()
            raise
        return "\n".join([*notes, str(self.status()), *self._unreachable(launch)])

    def _unreachable(self, launch: Launcher) -> list[str]:
        """A note when the root's unprivileged user cannot reach the state folder (munge's
        socket, the jobs folder): its jobs would fail."""
        if launch.root is None:
            return []
        closed = [p for p in (self.state_dir, *self.state_dir.parents)
                  if not p.stat().st_mode & 0o001]
        user = launch.root.pins.user
        return [f"  note: {closed[-1]} is not searchable by other users: jobs run as {user} "
                "cannot reach the sandbox's munge socket"] if closed else []

    def _fresh_state_dir(self) -> None:
        state = self.state_dir
        if state.exists() and any(state.iterdir()) and not (state / MADE_HERE).exists():
            raise UserError(f"--state: {state} is not empty and not a sandbox state folder; "
                            "allowed: a new or empty folder, or one a sandbox made")
        kept = {rel: (state / rel).read_bytes() for rel in KEPT if (state / rel).is_file()}
        if state.exists():
            shutil.rmtree(state)
        for sub in ("etc", "bin", "ctld", "run", "log", "munge", "dev", "jobs",
                    *(f"spool/{n}" for n in self.settings.node_names()),
                    *(f"tmp/{n}" for n in self.settings.node_names())):
            (state / sub).mkdir(parents=True, exist_ok=True)
        (state / MADE_HERE).write_text("made by chainermn-rt sandbox; `down` keeps it\n")
        for rel, data in kept.items():
            (state / rel).write_bytes(data)
        os.chmod(state / "munge", 0o755)  # munged: its socket folder must be searchable
        os.chmod(state / "jobs", 0o1777)  # as /tmp: jobs of any user write their output there

    def _write_files(self, launch: Launcher) -> None:
        inode = processes.netns_inode("/proc/self/ns/net") or 0
        users = (launch.root.pins.user,) if launch.root else self._host_user()
        for rel, text in render_files(self.site, self.settings, inode, launch, users).items():
            path = self.state_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)  # etc/enroot/hooks.d...
            path.write_text(text)
            if rel.startswith("bin/") or rel.endswith(".sh"):
                path.chmod(0o755)
            elif rel == "etc/slurmdbd.conf":
                path.chmod(0o600)  # slurmdbd refuses a configuration others can read
        for i in range(max(p.topology.gpus for p in self.site.partitions)):
            dev = self.state_dir / "dev" / f"fakegpu{i}"
            try:
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # a character device: /dev/null
            except PermissionError:
                dev.touch()  # slurmd only needs the path to exist
        if (launch.root or launch.tools) and Path("/dev/fuse").exists():
            # users mount SIFs (the root's Apptainer) and SquashFS images (enroot, for pyxis)
            # with squashfuse: a node of their own, the host's stays
            os.mknod(self.state_dir / FUSE, 0o666 | 0o020000, os.makedev(*FUSE_NUMBERS))
            os.chmod(self.state_dir / FUSE, 0o666)
        key = self.state_dir / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o600)

    @staticmethod
    def _host_user() -> tuple[str, ...]:
        """The Debian 12 stack's unprivileged user, in the account where the host has it."""
        try:
            pwd.getpwnam(HOST_USER)
        except KeyError:
            return ()
        return (HOST_USER,)

    def down(self) -> str:
        """Cancel jobs, stop every recorded daemon, then whatever is left in the sandbox's
        namespaces or marked as its daemon, and delete the namespaces."""
        record = self._record()
        left = leftovers(self.settings)
        if record is None and not left:
            return f"sandbox not up ({self.state_dir})"
        notes = []
        procs = record["procs"] if record else {}
        if processes.alive(procs.get("slurmctld", {})):
            self._cancel_jobs()
        for name in daemons.stop_order(procs):
            if processes.stop([procs[name]]):
                notes.append(f"{name} did not stop on SIGTERM: killed")
        if record is None:
            notes.append(f"cleared what a sandbox left without `down`: {left}")
        problems = self._clear(leftovers(self.settings))
        scratch.clear(self.settings)  # the nodes' scratch goes with them
        accounting.clear(self.settings)  # and the job records with the database
        if problems or any(processes.alive(p) for p in procs.values()):
            raise SandboxError("sandbox not fully down: " + "; ".join(notes + problems))
        (self.state_dir / RECORD).unlink(missing_ok=True)
        return "\n".join([f"sandbox down, {self.state_dir}", *notes])

    def fail_node(self, node: str) -> int:
        """Lose ``node`` as a crash would: SIGKILL its slurmd and every process in its network
        namespace (job steps, ranks). Returns how many were killed. :meth:`revive_node` undoes."""
        inode = processes.netns_inode(netns.path(self.settings.netns(node)))
        if node not in self.settings.node_names() or inode is None:
            raise UserError(f"node: {node!r}; allowed: {', '.join(self.settings.node_names())}")
        victims = processes.members({inode}, marker=b"\0")  # the marker never matches
        for proc in victims:
            try:
                os.kill(proc["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(victims)

    def revive_node(self, node: str, timeout: float = 120) -> None:
        """Start ``node``'s slurmd again and return it to service; waits until it is idle."""
        record = self._record()
        if record is None:
            raise SandboxError("sandbox not up; run `chainermn-rt sandbox up`")
        env = {**self.slurm.env, daemons.MARKER_VAR: str(self.state_dir)}
        record["procs"][f"slurmd-{node}"] = processes.spawn(
            daemons.slurmd_argv(self.settings, node, self.launcher(record)),
            self.state_dir / "log" / f"slurmd-{node}.out", env)
        self._save(record)
        deadline = time.monotonic() + timeout
        while (state := daemons.node_states(self.slurm).get(node)) != "idle":
            if state and ("down" in state or "drain" in state):
                self.slurm.run(["scontrol", "update", f"nodename={node}", "state=resume"])
            if time.monotonic() > deadline:
                raise SandboxError(f"{node} did not come back within {timeout:.0f} s ({state})")
            time.sleep(0.5)

    @staticmethod
    def _clear(left) -> list[str]:
        if left.procs:
            processes.stop(left.procs, grace=3)
        return netns.delete(left.namespaces)

    def _cancel_jobs(self) -> None:
        try:
            jobs = self.slurm.run(["squeue", "-h", "-o", "%i"], timeout=20).stdout.split()
            if not jobs:
                return
            self.slurm.run(["scancel", *jobs], timeout=20)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.slurm.run(
                    ["squeue", "-h", "-o", "%i"], timeout=20).stdout.split():
                time.sleep(0.2)
        except subprocess.TimeoutExpired:
            pass


def as_running(site: Site) -> Site:
    """A sandbox profile as its running sandbox serves it: every partition with the sandbox's
    node count (:func:`spanning`), so that ``submit --site sandbox --nodes 16`` after ``sandbox
    up --nodes 16`` is allowed, and its TmpFS and SlurmdSpoolDir (where Slurm's PMIx plugin
    gives the ranks their folders). Any other profile, or one whose sandbox is not up, as it
    is."""
    if site.sandbox is None:
        return site
    settings = sandbox_settings(site)
    nodes = Sandbox(site, settings).running_nodes()
    if nodes is None:
        return site
    return replace(spanning(site, nodes), slurm_tmpfs=settings.tmpfs,
                   slurmd_spool_dir=settings.spool_dir)
