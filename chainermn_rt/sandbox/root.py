"""The Debian 13 root of the sandbox's ``debian13`` stack: Slurm 24.11, PMIx 5, Open MPI 5 and
Apptainer 1.4.5 on this Debian 12 machine.

Built here from Debian's packages at the exact versions of ``slurm/sandbox/debian13.toml``:
debootstrap from the host's own mirror, then the root's own apt (Apptainer's one .deb from
Debian unstable through a private apt configuration). Cached per machine in
``$CHAINERMN_RT_ROOTS`` (default ``~/.cache/chainermn-rt/roots``), in a folder named for a hash
of the pins, and checked against them (``dpkg-query`` inside) whenever it is reused: a stale
or changed root is built again. Built in a temporary folder and renamed into place: a failed
build leaves nothing. Programs run inside it through one wrapper, ``slurm/sandbox/enter-root.sh``
(pivot_root in a mount namespace of their own; what they write into the root goes to a tmpfs).

>>> root = ensure_root()                                        # doctest: +SKIP
>>> run_in_root(root, ["apptainer", "version"], capture_output=True,
...             text=True).stdout                                 # doctest: +SKIP
'1.4.5\\n'
>>> load_pins().packages["slurmctld"].split("-")[0]
'24.11.5'
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from chainermn_rt.errors import EnvironmentProblem, message_value
from chainermn_rt.sandbox.debian import (
    MIRROR_VAR,
    host_apt_settings,
    host_mirror,
    private_apt_conf,
)
from chainermn_rt.site import data_dir

PINS = "debian13.toml"             # in slurm/sandbox/
ENTER = "enter-root.sh"            # in slurm/sandbox/
CACHE_VAR = "CHAINERMN_RT_ROOTS"
# Bumped when the build's own steps change what a root holds: part of the cache key.
REVISION = 1
STAMP = "etc/chainermn-rt-root.json"   # in the root: what it was built from
USED = "used"                          # beside rootfs: touched at each start
KEEP_UNUSED_S = 2 * 86400              # a root of other pins is removed after that unused
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STEP_TIMEOUT_S = 1800
# The root's apptainer.conf: this host lacks CAP_SYS_RESOURCE ("Requesting capability set ...
# while permitted ..."), and many ranks per node need one loop device for one SIF (8 here).
APPTAINER_CONF = {"root default capabilities": "file", "shared loop devices": "yes"}
OLDER = "/opt/chainermn-rt"  # in the root: packages of [older] unpacked, not installed
UNSTABLE_DIR = "/var/tmp/chainermn-rt-unstable"  # the unstable .debs, in the root as it is built
NO_DOCS = "".join(f"path-exclude=/usr/share/{d}/*\n" for d in ("doc", "man", "info", "locale"))


@dataclass(frozen=True)
class Pins:
    """What the root is built from (``slurm/sandbox/debian13.toml``)."""

    suite: str
    user: str
    uid: int
    packages: dict[str, str]          # from ``suite``
    unstable_suite: str
    unstable: dict[str, str]          # single packages from ``unstable_suite``
    older_suite: str = "bookworm"
    older: dict[str, str] = field(default_factory=dict)  # unpacked into OLDER/older_suite

    def versions(self) -> dict[str, str]:
        """What is installed (dpkg knows it): ``packages`` and ``unstable``."""
        return {**self.packages, **self.unstable}

    def suite_of(self, name: str) -> str:
        return (self.unstable_suite if name in self.unstable else
                self.older_suite if name in self.older else self.suite)

    def older_folder(self) -> str:
        """Inside the root: where the ``older`` packages are unpacked."""
        return f"{OLDER}/{self.older_suite}"

    def library_path(self) -> str | None:
        """LD_LIBRARY_PATH for a program that needs the ``older`` libraries."""
        return f"{self.older_folder()}/usr/lib/x86_64-linux-gnu" if self.older else None

    def key(self) -> str:
        """12 hex digits of a hash of everything that makes the root: its cache folder's name."""
        text = json.dumps([REVISION, self.__dict__], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_pins(path: Path | None = None) -> Pins:
    path = path or data_dir() / "sandbox" / PINS
    with open(path, "rb") as f:
        data = tomllib.load(f)
    unstable = dict(data.get("unstable", {}))
    older = dict(data.get("older", {}))
    return Pins(suite=data["root"]["suite"], user=data["root"]["user"],
                uid=int(data["root"]["uid"]), packages=dict(data["packages"]),
                unstable_suite=unstable.pop("suite", "sid"), unstable=unstable,
                older_suite=older.pop("suite", "bookworm"), older=older)


@dataclass(frozen=True)
class Root:
    """A built root: ``folder/rootfs`` is the file tree, ``folder/overlay`` the empty folder
    where each command's writes go (a tmpfs of its own mount namespace)."""

    folder: Path
    pins: Pins

    @property
    def rootfs(self) -> Path:
        return self.folder / "rootfs"

    @property
    def overlay(self) -> Path:
        return self.folder / "overlay"

    def size_mb(self) -> float:
        total = 0
        for base, _dirs, files in os.walk(self.rootfs):
            for name in files:
                try:
                    total += os.lstat(os.path.join(base, name)).st_size
                except OSError:
                    pass
        return total / 1e6


def cache_dir() -> Path:
    if os.environ.get(CACHE_VAR):
        return Path(os.environ[CACHE_VAR]).absolute()
    cache_home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache_home) / "chainermn-rt" / "roots"


def enter_script() -> Path:
    return data_dir() / "sandbox" / ENTER


Bind = str | Path | tuple[str | Path, str | Path]


def bind_pairs(binds: Iterable[Bind]) -> list[str]:
    """``[SOURCE, TARGET, ...]``: a path alone is bound at the same path inside."""
    out: list[str] = []
    for bind in binds:
        source, target = bind if isinstance(bind, tuple) else (bind, bind)
        out += [str(source), str(target)]
    return out


def enter_argv(root: Root, binds: Iterable[Bind] = (), hostname: str | None = None,
               writable: bool = False) -> list[str]:
    """The command line before a program that runs it inside ``root``: a mount namespace
    (and, with ``hostname``, a UTS namespace) of its own, ``binds`` inside, pivot_root."""
    return ["unshare", "--mount", "--propagation", "private", *(["--uts"] if hostname else []),
            "sh", str(enter_script()), str(root.rootfs),
            "-" if writable else str(root.overlay), hostname or "-", *bind_pairs(binds), "--"]


def root_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A plain environment for the root's programs (none of the host's Python or library
    variables)."""
    env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8"}
    env.update({k: v for k, v in os.environ.items() if k in ("TERM",)})
    return {**env, **(extra or {})}


def run_in_root(root: Root, argv: list[str], binds: Iterable[Bind] = (),
                hostname: str | None = None, env: dict[str, str] | None = None,
                **kwargs) -> subprocess.CompletedProcess:
    """Run ``argv`` inside ``root`` (``subprocess.run``'s keywords; ``env`` default
    :func:`root_env`). Exit status 125 with ``enter-root:`` on stderr: the root could not be
    entered."""
    kwargs.setdefault("check", False)
    return subprocess.run([*enter_argv(root, binds, hostname), *argv],
                          env=env if env is not None else root_env(), **kwargs)


# -- the root's versions -------------------------------------------------------------------

def installed(rootfs: Path, names: Iterable[str]) -> dict[str, str]:
    """Package -> version installed in the root, read by the root's own dpkg-query (a package
    that is not installed is absent)."""
    proc = subprocess.run(["chroot", str(rootfs), "dpkg-query", "-W", "-f",
                           "${Package} ${db:Status-Status} ${Version}\\n", *names],
                          capture_output=True, text=True, check=False, timeout=60)
    rows = (line.split() for line in proc.stdout.splitlines())
    return {r[0]: r[2] for r in rows if len(r) == 3 and r[1] == "installed"}


def differences(root: Root) -> list[str]:
    """How the root differs from its pins, one phrase each; empty when it matches."""
    stamp = root.rootfs / STAMP
    try:
        if json.loads(stamp.read_text()).get("key") != root.pins.key():
            return [f"{STAMP} is for other pins"]
    except (OSError, ValueError):
        return [f"no {STAMP}"]
    wanted = root.pins.versions()
    have = {**installed(root.rootfs, wanted), **unpacked(root)}
    return [f"{name} {have.get(name, 'not installed')} (pinned {version})"
            for name, version in {**wanted, **root.pins.older}.items()
            if have.get(name) != version]


def unpacked(root: Root) -> dict[str, str]:
    """Package -> version of the ``older`` packages unpacked in the root (as each .deb said)."""
    folder = root.rootfs / root.pins.older_folder().lstrip("/")
    found = {}
    for name in root.pins.older:
        try:
            found[name] = (folder / f"{name}.version").read_text().strip()
        except OSError:
            pass
    return found


# -- building ------------------------------------------------------------------------------

def check_host() -> None:
    """What the root needs of this machine, each missing part one line (EnvironmentProblem)."""
    if os.geteuid() != 0:
        raise EnvironmentProblem("the Debian 13 root needs root (mount namespaces, "
                                 "debootstrap); run as root")
    missing = [t for t in ("unshare", "chroot", "debootstrap", "mount")
               if shutil.which(t, path=PATH + ":" + os.environ.get("PATH", "")) is None]
    if missing:
        raise EnvironmentProblem(f"not installed: {', '.join(missing)}; run `make setup`")
    if "overlay" not in Path("/proc/filesystems").read_text():
        raise EnvironmentProblem("this kernel has no overlay file system (modprobe overlay): "
                                 "the Debian 13 root's commands write into one")
    if not Path("/dev/loop-control").exists():
        raise EnvironmentProblem("no loop device (/dev/loop-control is missing): Apptainer in "
                                 "the Debian 13 root mounts images on them; load the loop "
                                 "module (modprobe loop) or run on a machine that has it")


def ensure_root(pins: Pins | None = None, cache: Path | None = None,
                say: Callable[[str], None] = lambda line: None) -> Root:
    """The root for ``pins``: the cached one when it matches them, else built (about a minute
    and 230 MB from the mirror the first time). EnvironmentProblem when it cannot be."""
    pins = pins or load_pins()
    cache = cache or cache_dir()
    check_host()
    cache.mkdir(parents=True, exist_ok=True)
    root = Root(cache / f"debian13-{pins.key()}", pins)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the others then reuse it
        if root.rootfs.is_dir():
            stale = differences(root)
            if not stale:
                _remove_others(cache, root)
                _probe(root)
                return root
            say(f"the cached Debian 13 root differs from its pins ({'; '.join(stale)}): "
                "building it again")
            _remove(root.folder)
        say(f"building the Debian 13 root in {root.folder} (the first time: about a minute, "
            "230 MB from the Debian mirror)")
        started = time.monotonic()
        _build(root, cache, say)
        _remove_others(cache, root)
        say(f"Debian 13 root built in {time.monotonic() - started:.0f} s, "
            f"{root.size_mb():.0f} MB")
    _probe(root)
    return root


def _remove(folder: Path) -> None:
    """A root folder out of the way at once (renamed), then deleted."""
    if folder.exists():
        gone = folder.with_name(f".stale-{folder.name}-{os.getpid()}")
        folder.rename(gone)
        shutil.rmtree(gone, ignore_errors=True)


def _remove_others(cache: Path, keep: Root) -> None:
    """What interrupted builds left (the lock is held: no build runs), and roots of other pins
    (another checkout's) unused for :data:`KEEP_UNUSED_S`; ``keep`` marked as used now."""
    (keep.folder / USED).touch()
    now = time.time()
    for other in cache.iterdir():
        if other == keep.folder:
            continue
        if other.name.startswith((".build-", ".stale-")):
            shutil.rmtree(other, ignore_errors=True)
        elif other.name.startswith("debian13-"):
            used = other / USED if (other / USED).exists() else other
            if now - used.stat().st_mtime > KEEP_UNUSED_S:
                shutil.rmtree(other, ignore_errors=True)
                (cache / f"build-{other.name.removeprefix('debian13-')}.log").unlink(
                    missing_ok=True)


def _probe(root: Root) -> None:
    """Enter the root once: the wrapper's own failures (pivot_root refused...) as one line."""
    proc = run_in_root(root, ["true"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        said = [line for line in proc.stderr.splitlines() if line.strip()] or ["no message"]
        raise EnvironmentProblem(f"cannot run commands inside the Debian 13 root "
                                 f"{root.rootfs}: {message_value(said[-1], 200)}")


class _Build:
    """One build's steps, each logged to ``LOG``; a failed step is one line (EnvironmentProblem)
    naming what is missing."""

    def __init__(self, root: Root, work: Root, mirror: str, log: Path):
        self.root, self.work, self.mirror, self.log = root, work, mirror, log

    def run(self, what: str, argv: list[str], env: dict[str, str] | None = None,
            cwd: Path | None = None) -> str:
        with open(self.log, "a") as out:
            out.write(f"\n$ {' '.join(argv)}\n")
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd,
                                  timeout=STEP_TIMEOUT_S, env=env or root_env(
                                      {"DEBIAN_FRONTEND": "noninteractive"}))
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem(f"the Debian 13 root cannot be built: {what} did not end in "
                                     f"{STEP_TIMEOUT_S} s; see {self.log}") from None
        said = proc.stdout + proc.stderr
        with open(self.log, "a") as out:
            out.write(said)
        if proc.returncode != 0:
            raise EnvironmentProblem(f"the Debian 13 root cannot be built: {self.why(what, said)}")
        return said

    def why(self, what: str, said: str) -> str:
        gone = re.search(r"Version '([^']+)' for '([^']+)' was not found", said)
        if gone:
            version, name = gone.groups()
            suite = self.root.pins.suite_of(name)
            return (f"{name} {version} is no longer on {self.mirror} ({suite}); put the version "
                    f"it now has in {data_dir() / 'sandbox' / PINS}")
        if re.search(r"Temporary failure resolving|Could not (connect|resolve)|Failed getting "
                     r"release file|Unable to connect|Network is unreachable|Connection "
                     r"(refused|timed out)", said):
            return (f"{what}: the Debian mirror {self.mirror} cannot be reached (the first start "
                    f"downloads about 230 MB; set {MIRROR_VAR} to a mirror "
                    f"this machine reaches); see {self.log}")
        lines = [line for line in said.splitlines() if line.startswith(("E:", "W:", "dpkg:"))]
        last = (lines or said.strip().splitlines() or ["no message"])[-1]
        return f"{what} failed ({message_value(last, 160)}); see {self.log}"

    def inside(self, what: str, argv: list[str]) -> str:
        return self.run(what, [*enter_argv(self.work, writable=True), *argv])


def _build(root: Root, cache: Path, say: Callable[[str], None]) -> None:
    pins = root.pins
    mirror = host_mirror()
    if not Path(f"/usr/share/debootstrap/scripts/{pins.suite}").exists():
        raise EnvironmentProblem(f"this debootstrap does not know {pins.suite}; install a newer "
                                 "debootstrap (Debian 12's bookworm-backports or later)")
    work = Root(cache / f".build-{pins.key()}-{os.getpid()}", pins)
    log = cache / f"build-{pins.key()}.log"
    log.write_text(f"building the Debian 13 root {root.folder} from {mirror}\n")
    b = _Build(root, work, mirror, log)
    try:
        work.overlay.mkdir(parents=True)
        say(f"looking up the pinned versions on {mirror}")
        apt_env = _check_mirror(b, pins)
        say(f"debootstrap {pins.suite} from {mirror}")
        # in a mount namespace of its own: the /proc and /sys it mounts go with it
        b.run("debootstrap", ["unshare", "--mount", "--propagation", "private", "debootstrap",
                              "--variant=minbase", pins.suite, str(work.rootfs), mirror])
        fs = work.rootfs
        (fs / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")  # no service starts
        (fs / "usr/sbin/policy-rc.d").chmod(0o755)
        (fs / "etc/dpkg/dpkg.cfg.d/chainermn-rt-nodoc").write_text(NO_DOCS)
        (fs / "etc/apt/apt.conf.d/90chainermn-rt").write_text(
            'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n'
            'Acquire::Retries "3";\n' + host_apt_settings())
        (fs / "etc/apt/sources.list").write_text(f"deb {mirror} {pins.suite} main\n")
        debs = _fetch_unstable(b, pins, apt_env)
        _unpack_older(b, pins, apt_env)
        say(f"apt-get install of {len(pins.versions())} pinned packages in the root")
        b.inside("apt-get update", ["apt-get", "update", "--error-on=any"])
        b.inside("apt-get install", ["apt-get", "install", "-y",
                                     *(f"{n}={v}" for n, v in pins.packages.items()), *debs])
        _configure(b, fs, pins)
        b.inside("apt-get clean", ["apt-get", "clean"])
        # apt's lists, the unstable .debs, and the data folder mariadb-server's package made
        # (the sandbox makes its own)
        for junk in ("var/lib/apt/lists", UNSTABLE_DIR.lstrip("/"), "var/lib/mysql"):
            shutil.rmtree(fs / junk, ignore_errors=True)
        (fs / "var/lib/apt/lists/partial").mkdir(parents=True)
        (fs / STAMP).write_text(json.dumps({"key": pins.key(), "revision": REVISION,
                                            "versions": {**pins.versions(), **pins.older},
                                            "mirror": mirror,
                                            "built": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
                                           indent=1) + "\n")
        wrong = differences(work)
        if wrong:
            raise EnvironmentProblem("the Debian 13 root cannot be built as pinned: "
                                     + "; ".join(wrong))
        work.folder.rename(root.folder)
    except BaseException:
        shutil.rmtree(work.folder, ignore_errors=True)
        raise


def _check_mirror(b: _Build, pins: Pins) -> dict[str, str]:
    """Every pinned version is on the mirror: looked up with the host's apt and a private
    configuration (a few seconds) before anything is built. The environment for that apt."""
    folder = b.work.folder / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "none"):
        (folder / sub).mkdir(parents=True)
    suites = [pins.suite, *([pins.unstable_suite] if pins.unstable else []),
              *([pins.older_suite] if pins.older else [])]
    (folder / "sources.list").write_text("".join(f"deb {b.mirror} {suite} main\n"
                                                 for suite in suites))
    (folder / "apt.conf").write_text(private_apt_conf(str(folder))  # one retry: fail soon
                                     + f'Dir::State::status "{folder}/status";\n'
                                     + 'Acquire::Retries "1";\n')
    (folder / "status").touch()
    env = root_env({"APT_CONFIG": str(folder / "apt.conf")})
    b.run("apt-get update (the pinned versions' lists)", ["apt-get", "update", "--error-on=any"],
          env)
    every = {**pins.versions(), **pins.older}
    said = b.run("apt-cache madison", ["apt-cache", "madison", *every], env)
    offered: dict[str, set[tuple[str, str]]] = {}
    for line in said.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 3 and cells[2].endswith("Packages"):
            suite = cells[2].split()[1].split("/")[0]
            offered.setdefault(cells[0], set()).add((cells[1], suite))
    gone = [f"{name} {version} ({pins.suite_of(name)})" for name, version in every.items()
            if (version, pins.suite_of(name)) not in offered.get(name, set())]
    if gone:
        raise EnvironmentProblem(f"the Debian 13 root cannot be built: {b.mirror} no longer has "
                                 f"{', '.join(gone)}; put the versions it now has (apt-cache "
                                 f"policy NAME in the root) in {data_dir() / 'sandbox' / PINS}")
    return env


def _fetch_unstable(b: _Build, pins: Pins, env: dict[str, str]) -> list[str]:
    """The unstable .debs, downloaded by the host's apt with the private configuration of
    :func:`_check_mirror` into the root; their paths inside the root."""
    folder = b.work.rootfs / UNSTABLE_DIR.lstrip("/")
    folder.mkdir(parents=True)
    b.run(f"apt-get download ({pins.unstable_suite})",
          ["apt-get", "download", *(f"{n}={v}" for n, v in pins.unstable.items())], env,
          cwd=folder)
    return [f"{UNSTABLE_DIR}/{p.name}" for p in sorted(folder.glob("*.deb"))]


def _unpack_older(b: _Build, pins: Pins, env: dict[str, str]) -> None:
    """The ``older`` packages, downloaded by the host's apt and unpacked with dpkg-deb into
    their folder in the root (dpkg inside does not know them: nothing of the root's own
    changes), each with a file naming its version."""
    if not pins.older:
        return
    debs = b.work.folder / "older"
    debs.mkdir()
    b.run(f"apt-get download ({pins.older_suite})",
          ["apt-get", "download", *(f"{n}={v}" for n, v in pins.older.items())], env, cwd=debs)
    target = b.work.rootfs / pins.older_folder().lstrip("/")
    target.mkdir(parents=True)
    for deb in sorted(debs.glob("*.deb")):
        b.run(f"dpkg-deb -x {deb.name}", ["dpkg-deb", "-x", str(deb), str(target)])
        fields = b.run(f"dpkg-deb -f {deb.name}", ["dpkg-deb", "-f", str(deb), "Package",
                                                   "Version"])
        info = dict(line.split(": ", 1) for line in fields.splitlines() if ": " in line)
        (target / f"{info['Package']}.version").write_text(info["Version"] + "\n")


def _configure(b: _Build, fs: Path, pins: Pins) -> None:
    """Apptainer's settings for this kind of host, fakeroot's id ranges, the unprivileged
    user of test jobs."""
    conf = fs / "etc/apptainer/apptainer.conf"
    if conf.exists():
        text = conf.read_text()
        for key, value in APPTAINER_CONF.items():
            text, count = re.subn(rf"^{re.escape(key)} = .*$", f"{key} = {value}", text,
                                  flags=re.M)
            if count != 1:
                raise EnvironmentProblem(f"the Debian 13 root cannot be built: {conf} has no line "
                                         f"'{key} = ...' (another Apptainer?)")
        conf.write_text(text)
    for name in ("subuid", "subgid"):  # apptainer --fakeroot as root (builds with %post)
        (fs / "etc" / name).write_text("root:200000:65536\n")
    b.inside(f"useradd {pins.user}", ["useradd", "--uid", str(pins.uid), "--user-group",
                                      "--create-home", "--shell", "/bin/bash", pins.user])
