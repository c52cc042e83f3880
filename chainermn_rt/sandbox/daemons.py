"""The sandbox's daemons: munged; with accounting, mariadbd and slurmdbd; slurmctld in the head
namespace, one slurmd per node namespace.

Each runs in the foreground in a session of its own (``processes.spawn``), its output in
``STATE/log/NAME.out``, and is recorded before the next starts, so ``down`` can stop what a
failed start left.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from chainermn_rt.sandbox import accounting, processes
from chainermn_rt.sandbox.settings import SandboxSettings
from chainermn_rt.sandbox.stacks import Launcher
from chainermn_rt.slurm_client import Slurm

MARKER_VAR = "CHAINERMN_RT_SANDBOX_DAEMON"  # in the daemons' environment: finds their leftovers
START_TIMEOUT = 60.0
HOST_TOOLS = ("ip", "nsenter", "unshare")  # every stack's, on the host
TOOLS = ("munged", "slurmctld", "slurmd", *HOST_TOOLS)  # debian12's (and accounting.TOOLS)


class StartError(RuntimeError):
    """A daemon exited or did not become ready in time; one line saying which and where."""


def start_all(s: SandboxSettings, slurm: Slurm, procs: dict[str, dict],
              save: Callable[[], None], launch: Launcher) -> None:
    """Start munged, slurmctld and every slurmd into ``procs`` (saved after each start), then
    wait until every node is idle; each through ``launch``'s stack."""
    state = s.state_dir
    env = {**slurm.env, MARKER_VAR: str(state)}
    conf = str(state / "etc" / "slurm.conf")

    def start(name: str, argv: list[str]) -> None:
        procs[name] = processes.spawn(argv, state / "log" / f"{name}.out", env)
        save()

    def wait_for(ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            dead = [n for n, p in procs.items() if not processes.alive(p)]
            if dead or time.monotonic() > deadline:
                why = f"{', '.join(dead)} exited" if dead else f"{START_TIMEOUT:.0f} s passed"
                raise StartError(f"sandbox did not start: waiting for {what}, {why}; "
                                 f"{last_log_line(s, dead[0] if dead else None)}")
            time.sleep(0.1)

    munge = state / "munge"
    # --force: the state folder may sit below a folder only root can search (pytest's tmp).
    start("munged", [*launch.host(), "munged", "--foreground", "--force",
                     f"--key-file={munge / 'munge.key'}", f"--socket={munge / 'munge.socket'}",
                     f"--pid-file={munge / 'munged.pid'}",
                     f"--log-file={state / 'log' / 'munged.log'}",
                     f"--seed-file={munge / 'munged.seed'}"])
    wait_for(lambda: (munge / "munge.socket").exists(), "munged's socket")
    head = launch.head()
    if s.accounting:
        start_accounting(s, slurm, start, wait_for, launch)
    start("slurmctld", [*head, "slurmctld", "-D", "-c", "-i", "-f", conf])  # -c: the last id
    wait_for(lambda: slurm.run(["scontrol", "ping"], timeout=20).returncode == 0,
             "slurmctld to answer")
    for node in s.node_names():
        start(f"slurmd-{node}", slurmd_argv(s, node, launch))
    wait_for(lambda: all(node_states(slurm).get(n) == "idle" for n in s.node_names()),
             "every node to be idle")


def start_accounting(s: SandboxSettings, slurm: Slurm, start, wait_for,
                     launch: Launcher) -> None:
    """A fresh database, mariadbd and slurmdbd in the head namespace, then the QOS, cluster,
    account and user in one ``sacctmgr`` run."""
    log = s.state_dir / "log" / "mariadb-install.out"
    accounting.tmp_dir(s).mkdir(exist_ok=True)
    with open(log, "w") as out:
        try:
            done = subprocess.run([*launch.host(), *accounting.install_argv(s)],
                                  stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=START_TIMEOUT, check=False,
                                  env={**slurm.env, MARKER_VAR: str(s.state_dir)})
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = f"no end in {START_TIMEOUT:.0f} s"
    if code != 0:
        raise StartError(f"sandbox did not start: mariadb-install-db failed ({code}); "
                         f"{last_log_line(s, 'mariadb-install')}")
    start("mariadbd", [*launch.head(hostname=False), *accounting.mariadbd_argv(s)])
    wait_for(lambda: accounting.socket(s).exists(), "MariaDB's socket")
    start("slurmdbd", [*launch.head(), "env", *launch.slurmdbd_env(),
                       f"MYSQL_UNIX_PORT={accounting.socket(s)}", *accounting.slurmdbd_argv(s)])
    sacctmgr = ["sacctmgr", "-n", "-P", "show", "qos", "format=name"]
    wait_for(lambda: slurm.run(sacctmgr, timeout=20).returncode == 0, "slurmdbd to answer")
    # One run on the fresh database; it exits 0 only when everything was added.
    proc = subprocess.run(["sacctmgr", "-i"], input=(s.state_dir / "etc" / "accounts.sacctmgr")
                          .read_bytes(), capture_output=True, cwd=s.state_dir / "etc",
                          env=slurm.env, timeout=START_TIMEOUT, check=False)
    said = (proc.stdout + proc.stderr).decode(errors="replace")
    (s.state_dir / "log" / "sacctmgr.out").write_text(said)
    if proc.returncode != 0 or "error" in said.lower():
        lines = [line.strip() for line in said.splitlines() if "rror" in line] or ["no message"]
        raise StartError(f"sandbox did not start: sacctmgr could not add the accounts and QOS "
                         f"(exit {proc.returncode}): {lines[0]}; see {s.state_dir / 'log'}")


def slurmd_argv(s: SandboxSettings, node: str, launch: Launcher | None = None) -> list[str]:
    """A node's slurmd in the node's network namespace, with its own hostname, /etc/hosts
    and local scratch folder (``launch``: the stack's, default the host's own)."""
    return [*(launch or Launcher(s)).node(node), "slurmd", "-D", "-N", node, "-f",
            str(s.state_dir / "etc" / "slurm.conf")]


def node_states(slurm: Slurm) -> dict[str, str]:
    """Node name -> Slurm's state of it (``idle``, ``allocated``, ``down*``...)."""
    try:
        proc = slurm.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=30)
    except subprocess.TimeoutExpired:
        return {}
    pairs = (line.split() for line in proc.stdout.splitlines())
    return {p[0]: p[1].lower() for p in pairs if len(p) == 2}


def last_log_line(s: SandboxSettings, name: str | None) -> str:
    """``see STATE/log`` and, for a daemon that exited, its log's last line that says ERROR
    (MariaDB's install ends with a page of advice after it), else its last line."""
    where = f"see {s.state_dir / 'log'}"
    logs = [s.state_dir / "log" / f"{name}.log", s.state_dir / "log" / f"{name}.out"] \
        if name else []
    for log in logs:
        lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
        if lines:
            shown = next((line for line in reversed(lines) if "ERROR" in line), lines[-1])
            return f"{where} ({log.name}: {shown.strip()})"
    return where


def stop_order(names) -> list[str]:
    """Every slurmd first, then slurmctld, slurmdbd, mariadbd, munged last."""
    rank = {"slurmctld": 1, "slurmdbd": 2, "mariadbd": 3, "munged": 4}
    return sorted(names, key=lambda n: rank.get(n, 0))
