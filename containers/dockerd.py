"""A private Docker engine for builds: start dockerd, use it, stop it by its PID.

The build host need not run a Docker service: this starts Debian's dockerd with
its own data root and pidfile under ``build/docker``, exec root and socket under
/run (no iptables, no bridge: builds use the host network) and stops exactly that
process. The Makefile and the test suite's session fixture share it.

Example::

    python -m containers.dockerd exec -- docker build ...   # start if needed, run, stop if started
    python -m containers.dockerd start; python -m containers.dockerd stop

or from Python::

    with Dockerd() as engine:
        subprocess.run([engine.docker, "info"], env=engine.env(), check=True)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STATE = REPO / "build" / "docker"
# Debian's client; another `docker` may come first on PATH.
DOCKER = "/usr/bin/docker"
DOCKERD = "/usr/sbin/dockerd"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


class Dockerd:
    """This checkout's dockerd: ``start`` reuses a running one, ``stop`` ends only that PID."""

    def __init__(self, state: Path = STATE) -> None:
        self.state = Path(state)
        # sockets live under /run: a long checkout path would pass the 108-byte socket limit
        tag = hashlib.sha256(str(self.state.resolve()).encode()).hexdigest()[:10]
        self.run_dir = Path("/run") / f"chainermn-rt-docker-{tag}"
        self.socket = self.run_dir / "docker.sock"
        self.pidfile = self.state / "dockerd.pid"
        self.log = self.state / "dockerd.log"
        self.docker = DOCKER
        self.started_here = False
        self._proc: subprocess.Popen | None = None  # kept, so stop() can reap it

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def env(self) -> dict[str, str]:
        """Environment for clients: this engine's socket, BuildKit on, Debian's tools first."""
        env = dict(os.environ, DOCKER_HOST=self.host, DOCKER_BUILDKIT="1")
        env["PATH"] = "/usr/bin:/usr/sbin:" + env.get("PATH", "")
        return env

    def pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def responding(self) -> bool:
        return subprocess.run([self.docker, "version"], env=self.env(), capture_output=True,
                              timeout=30, check=False).returncode == 0

    def start(self, timeout: float = 60, nice: int = 0) -> Dockerd:
        """Start this checkout's dockerd (``nice``: its niceness, and so its builds'), or reuse
        the one running."""
        if self.pid() and self.responding():
            return self
        for path in (DOCKER, DOCKERD):
            if not os.access(path, os.X_OK):
                raise RuntimeError(f"{path} is missing: install Debian's docker.io (`make apt`)")
        (self.state / "data").mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            niced = ["nice", "-n", str(nice)] if nice else []
            proc = subprocess.Popen(
                [*niced, DOCKERD, "--iptables=false", "--ip-masq=false", "--bridge=none",
                 "--data-root", str(self.state / "data"), "--exec-root", str(self.run_dir / "exec"),
                 "--pidfile", str(self.pidfile), "-H", self.host],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"dockerd exited {proc.returncode}; see {self.log}")
            if self.socket.exists() and self.responding():
                self.started_here, self._proc = True, proc
                return self
            time.sleep(0.5)
        proc.terminate()
        proc.wait(timeout)
        raise RuntimeError(f"dockerd did not answer within {timeout:.0f} s; see {self.log}")

    def stop(self, timeout: float = 60) -> None:
        """End this engine (SIGTERM, SIGKILL after ``timeout``) and remove its /run folder."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        if self._proc is not None and self._proc.pid == pid:  # our child: reap it
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        else:
            deadline = time.monotonic() + timeout
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.3)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def __enter__(self) -> Dockerd:  # noqa: PYI034 - returns the started engine
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.started_here:
            self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop", "status", "exec"])
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="for exec: the command, after --, run with DOCKER_HOST set")
    args = parser.parse_args(argv)
    engine = Dockerd()
    if args.action == "start":
        engine.start()
        print(engine.host)
    elif args.action == "stop":
        engine.stop()
    elif args.action == "status":
        print(f"running pid {engine.pid()} at {engine.host}" if engine.pid() else "not running")
        return 0 if engine.pid() else 1
    else:
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        with engine:
            return subprocess.run(command, env=engine.env(), check=False).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
