"""Processes and namespaces the sandbox starts, recorded so that ``down`` stops exactly those.

A process is identified by its PID *and* its start time (field 22 of /proc/PID/stat), so a
recycled PID is never signalled. Nothing is ever looked up or killed by name.

>>> import os
>>> alive(identify(os.getpid()))
True
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    if fields[0] in ("Z", "X"):  # a zombie has exited
        return None
    return int(fields[19])


def identify(pid: int) -> dict:
    return {"pid": pid, "start": start_time(pid)}


def alive(proc: dict) -> bool:
    return proc.get("start") is not None and start_time(proc["pid"]) == proc["start"]


def reap(pid: int) -> None:
    """Collect an exited child of this process (a no-op for anyone else's)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def spawn(argv: list[str], log: Path, env: dict[str, str]) -> dict:
    """Start a daemon in the foreground in its own session, its output appended to ``log``.

    posix_spawn, not Popen: the daemon outlives this process, which never waits for it. It
    gets none of this process's other descriptors: one inherited from a caller (``flock FILE
    make ...``'s lock) would be held for the daemon's life.
    """
    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644),
               (os.POSIX_SPAWN_DUP2, 1, 2)]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in inherited_fds()]
    pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsid=True)
    return {"pid": pid, "start": start_time(pid), "argv": argv}


def inherited_fds() -> list[int]:
    """This process's descriptors above 2 that a program it starts would inherit."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                found.append(fd)
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return found


def stop(procs: list[dict], grace: float = 10.0) -> list[dict]:
    """SIGTERM the recorded processes still running, SIGKILL after ``grace`` s; returns the
    killed ones."""
    running = [p for p in procs if alive(p)]
    for p in running:
        os.kill(p["pid"], signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        for p in running:
            reap(p["pid"])
        if not any(alive(p) for p in running):
            return []
        time.sleep(0.1)
    killed = [p for p in running if alive(p)]
    for p in killed:
        os.kill(p["pid"], signal.SIGKILL)
        time.sleep(0.05)
        reap(p["pid"])
    return killed


def netns_inode(path: str | Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def members(netns_inodes: set[int], marker: bytes) -> list[dict]:
    """Processes inside the given network namespaces, or whose environment holds ``marker``."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        try:
            inside = os.stat(entry / "ns" / "net").st_ino in netns_inodes
            marked = not inside and marker in (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if inside or marked:
            proc = identify(pid)
            if proc["start"] is not None:
                found.append(proc)
    return found
