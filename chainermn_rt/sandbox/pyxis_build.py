"""enroot and pyxis for the sandbox's nodes, built from their release sources (``make setup``).

The sources come from a folder (``make setup SOURCES=DIR``: ``NAME-VERSION.tar``, or ``.tar.gz``),
else from this machine's cache of tars checked before (:func:`source_cache`: a fresh clone's
setup finds them), else from the projects' release URLs; either way the uncompressed tar's
sha256 must be the pin of
``containers/versions.toml`` (``[enroot]``, ``[pyxis]``: ``tar_sha256``). Each stack gets its
own build, on the system its nodes run (:class:`Builder`): ``debian12`` on the host, against
Debian 12's libslurm-dev (Slurm 22.05); ``debian13`` inside the Debian 13 root, against its
Slurm 24.11 and glibc 2.41. A SPANK plugin built against another Slurm release is refused
("Incompatible plugin version").

Installed as the Debian 13 root is cached (root.py): in ``$CHAINERMN_RT_TOOLS``, else
:data:`TOOLS_DIR`, a folder of this machine every user may enter (the nodes' slurmd loads pyxis
from it and job users run enroot from it: not a checkout or a home, which may be 0700),
in ``STACK-KEY`` (KEY: a hash of the pins, the build's revision and the Slurm release), built in
a temporary folder beside it and renamed into place, with a stamp naming the versions. A failed
build leaves nothing but its log; a second :func:`ensure` finds the stamp and does nothing.

>>> sorted(load_pins())
['enroot', 'pyxis']
>>> load_pins()["pyxis"].version
'0.24.0'
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
import tomllib
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from chainermn_rt.errors import EnvironmentProblem, UserError, message_value
from chainermn_rt.files import sha256_file, write_atomically
from chainermn_rt.sandbox.root import Root, ensure_root, enter_argv, root_env
from chainermn_rt.sandbox.settings import DEBIAN12, DEBIAN13, STACKS
from chainermn_rt.site import checkout

CACHE_VAR = "CHAINERMN_RT_TOOLS"
VERSIONS = "containers/versions.toml"  # in the checkout
NAMES = ("enroot", "pyxis")
REVISION = 1                    # bumped when the build's steps change what an install holds
STAMP = "chainermn-rt-tools.json"
SLURM_VERSION_H = "usr/include/slurm/slurm_version.h"  # libslurm-dev's, on the stack's system
STEP_TIMEOUT_S = 600
DOWNLOAD_TIMEOUT_S = 120
# enroot's utilities against glibc (its static musl build needs a submodule the release tar
# lacks). Debian 12's glibc 2.36 has no strlcpy/strlcat: libbsd's overlay declares them and
# libbsd.so links them (`-lbsd` would find enroot's own partial libbsd.a first); Debian 13's
# 2.41 has them.
ENROOT_MAKE = ("FORCE_GLIBC=1",)
GLIBC_236 = {"CPPFLAGS": "-DLIBBSD_OVERLAY -isystem /usr/include/bsd",
             "LDLIBS": "-l:libbsd.a -l:libbsd.so"}
MAKESELF = Path("/usr/bin/makeself")  # the host's Debian 2.4.5, the release enroot pins


@dataclass(frozen=True)
class Pin:
    """One project's release: its version, where it is downloaded, its tar's sha256."""

    name: str
    version: str
    url: str
    tar_sha256: str

    @property
    def tar_name(self) -> str:
        return f"{self.name}-{self.version}.tar"


def load_pins(path: Path | None = None) -> dict[str, Pin]:
    """``[enroot]`` and ``[pyxis]`` of containers/versions.toml (the checkout's)."""
    if path is None:
        top = checkout()
        if top is None:
            raise EnvironmentProblem("enroot and pyxis are built from a checkout of "
                                     f"chainermn-rt ({VERSIONS}); this is an installed wheel")
        path = top / VERSIONS
    with open(path, "rb") as f:
        data = tomllib.load(f)
    pins = {}
    for name in NAMES:
        table = data.get(name, {})
        if not re.fullmatch(r"[0-9a-f]{64}", str(table.get("tar_sha256", ""))):
            raise EnvironmentProblem(f"{path}: [{name}] has no tar_sha256 (64 hex digits)")
        pins[name] = Pin(name, str(table["version"]), str(table["url"]), table["tar_sha256"])
    return pins


@dataclass(frozen=True)
class Tools:
    """An install: ``bin/enroot``, ``lib/slurm/spank_pyxis.so``, ``etc/enroot`` (enroot's
    configuration folder, built in), ``share/enroot/hooks.d`` (the optional hooks)."""

    folder: Path

    @property
    def bin(self) -> Path:
        return self.folder / "bin"

    @property
    def enroot(self) -> Path:
        return self.bin / "enroot"

    @property
    def plugin(self) -> Path:
        return self.folder / "lib" / "slurm" / "spank_pyxis.so"

    @property
    def sysconf(self) -> Path:
        return self.folder / "etc" / "enroot"

    @property
    def extra_hooks(self) -> Path:
        return self.folder / "share" / "enroot" / "hooks.d"

    def stamp(self) -> dict:
        try:
            return json.loads((self.folder / STAMP).read_text())
        except (OSError, ValueError):
            return {}


# where make setup installs enroot and pyxis for the sandbox's nodes (``CACHE_VAR`` overrides)
TOOLS_DIR = Path("/var/lib/chainermn-rt/tools")


def cache_dir() -> Path:
    """``$CHAINERMN_RT_TOOLS``, else :data:`TOOLS_DIR`."""
    if os.environ.get(CACHE_VAR):
        return Path(os.environ[CACHE_VAR]).absolute()
    return TOOLS_DIR


@dataclass(frozen=True)
class Builder:
    """Where a stack's enroot and pyxis are built and run: the host (``debian12``) or the
    Debian 13 root (``debian13``: its programs through the root's wrapper, the cache folder
    bound at the same path)."""

    stack: str
    root: Root | None = None

    @classmethod
    def of(cls, stack: str, root: Root | None = None) -> Builder:
        if stack not in STACKS:
            raise UserError(f"--stack: {stack!r} is not allowed; allowed: {', '.join(STACKS)}")
        if stack == DEBIAN13 and root is None:
            root = ensure_root()
        return cls(stack, root if stack == DEBIAN13 else None)

    def slurm(self) -> str:
        """The Slurm release whose headers pyxis is built against (``22.05.8``)."""
        header = (self.root.rootfs if self.root else Path("/")) / SLURM_VERSION_H
        try:
            text = header.read_text()
        except OSError:
            raise EnvironmentProblem(f"no Slurm headers ({header}): install libslurm-dev "
                                     "(`make setup`)") from None
        found = re.search(r"#define SLURM_VERSION_NUMBER 0x([0-9a-fA-F]{6})", text)
        if not found:
            raise EnvironmentProblem(f"{header} names no SLURM_VERSION_NUMBER")
        number = int(found.group(1), 16)
        return f"{number >> 16:02d}.{(number >> 8) & 0xff:02d}.{number & 0xff}"

    def label(self) -> str:
        """What the install is built on, for its key: the Slurm release, the root's pins."""
        return self.slurm() + (f" root {self.root.pins.key()}" if self.root else "")

    def argv(self, argv: list[str], binds: list[Path]) -> list[str]:
        return [*enter_argv(self.root, binds), *argv] if self.root else argv

    def env(self, work: Path) -> dict[str, str]:
        """make's environment: the host's (git kept inside ``work``: enroot's Makefile runs
        `git submodule update`), or the root's plain one."""
        if self.root:
            return root_env({"LC_ALL": "C"})
        env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(work), "LC_ALL": "C", **GLIBC_236}
        env.pop("MAKEFLAGS", None)
        return env

    def enroot_make(self) -> tuple[str, ...]:
        return (*ENROOT_MAKE, *((f"LDLIBS={GLIBC_236['LDLIBS']}",) if not self.root else ()))


def slurm_release(stack: str = DEBIAN12) -> str:
    return Builder.of(stack).slurm()


def key(pins: dict[str, Pin], stack: str, slurm: str) -> str:
    """12 hex digits of a hash of what makes an install: its folder's name."""
    text = json.dumps([REVISION, stack, slurm, {n: asdict(p) for n, p in pins.items()}],
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def target(stack: str = DEBIAN12, pins: dict[str, Pin] | None = None,
           cache: Path | None = None, root: Root | None = None) -> Tools:
    """Where ``stack``'s install of ``pins`` is (or would be)."""
    pins = pins or load_pins()
    label = Builder.of(stack, root).label()
    return Tools((cache or cache_dir()) / f"{stack}-{key(pins, stack, label)}")


def installed(tools: Tools) -> bool:
    """The install is whole: its stamp names its key, its programs are there."""
    return (tools.stamp().get("key") == tools.folder.name.split("-", 1)[-1]
            and tools.enroot.is_file() and tools.plugin.is_file())


def find(stack: str = DEBIAN12, root: Root | None = None) -> Tools:
    """The install ``stack``'s sandbox uses; EnvironmentProblem naming the command that makes
    it when it is not there."""
    tools = target(stack, root=root)
    if not installed(tools):
        raise EnvironmentProblem(f"enroot and pyxis are not built for the {stack} stack "
                                 f"({tools.folder}); run `make setup` (SOURCES=DIR: a folder "
                                 "with their release tars)")
    return tools


def ensure(sources: Path | None = None, stack: str = DEBIAN12, cache: Path | None = None,
           pins: dict[str, Pin] | None = None,
           say: Callable[[str], None] = lambda line: None, root: Root | None = None) -> Tools:
    """The install for ``stack``: found, or built from ``sources`` (a folder; None: the
    release URLs). Nothing is installed unless every step succeeds."""
    pins = pins or load_pins()
    cache = (cache or cache_dir()).absolute()
    builder = Builder.of(stack, root)
    label = builder.label()
    tools = Tools(cache / f"{stack}-{key(pins, stack, label)}")
    if installed(tools):
        return tools
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the others then find it
        if installed(tools):
            return tools
        for left in cache.glob(f".build-{stack}-*"):  # what an interrupted build left
            shutil.rmtree(left, ignore_errors=True)
        if tools.folder.exists():
            shutil.rmtree(tools.folder)
        work = cache / f".build-{tools.folder.name}-{os.getpid()}"
        log = cache / f"build-{tools.folder.name}.log"
        try:
            work.mkdir()
            tars = {name: fetch(pin, sources, work) for name, pin in pins.items()}
            say(f"building enroot {pins['enroot'].version} and pyxis {pins['pyxis'].version} "
                f"(Slurm {builder.slurm()}'s headers, {stack}) in {tools.folder}")
            started = time.monotonic()
            log.write_text(f"building {tools.folder}\n")
            _build(builder, tars, pins, work, tools, log)
            stage = work / "stage" / tools.folder.relative_to("/")
            (stage / STAMP).write_text(json.dumps(
                {"key": tools.folder.name.split("-", 1)[-1], "stack": stack,
                 "slurm": builder.slurm(), "built_on": label, "revision": REVISION,
                 "pins": {n: asdict(p) for n, p in pins.items()},
                 "built": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=1) + "\n")
            stage.rename(tools.folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _probe(builder, tools, pins["enroot"], log)
        say(f"built in {time.monotonic() - started:.1f} s")
    return tools


def source_cache() -> Path:
    """Where verified release tars are kept for the next build on this machine (another
    checkout's, a fresh clone's): ``$XDG_CACHE_HOME/chainermn-rt/sources``."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache_home) / "chainermn-rt" / "sources"


def fetch(pin: Pin, sources: Path | None, work: Path) -> Path:
    """``pin``'s tar in ``work``, its sha256 checked: from ``sources`` (a folder), else from
    this machine's :func:`source_cache`, else downloaded from its URL; kept in the cache."""
    tar = _fetched(pin, sources, work)
    kept = source_cache() / pin.tar_name
    if not kept.is_file():
        kept.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(kept, lambda f: f.write(tar.read_bytes()), binary=True)
    return tar


def _fetched(pin: Pin, sources: Path | None, work: Path) -> Path:
    tar = work / pin.tar_name
    cached = source_cache() / pin.tar_name
    if sources is None and cached.is_file() and sha256_file(cached) == pin.tar_sha256:
        shutil.copyfile(cached, tar)
        return tar
    if sources is not None:
        found = [p for p in (sources / pin.tar_name, sources / f"{pin.tar_name}.gz")
                 if p.is_file()]
        if not found:
            raise UserError(f"--sources: {sources} has no {pin.tar_name} (or .tar.gz); allowed: "
                            f"a folder with the release tars of {VERSIONS}")
        _uncompressed(found[0], tar)
        got = sha256_file(tar)
        if got != pin.tar_sha256:
            tar.unlink()
            raise UserError(f"--sources: {found[0]}: sha256 {got}, pinned {pin.tar_sha256} "
                            f"({VERSIONS} [{pin.name}] tar_sha256)")
        return tar
    download = work / f"{pin.tar_name}.gz"
    try:
        with urllib.request.urlopen(pin.url, timeout=DOWNLOAD_TIMEOUT_S) as answer, \
                open(download, "wb") as out:
            shutil.copyfileobj(answer, out)
        _uncompressed(download, tar)
    except (OSError, EOFError) as err:
        raise EnvironmentProblem(f"cannot download {pin.url} ({message_value(str(err))}); give "
                                 "the release tars with `make setup SOURCES=DIR`") from None
    got = sha256_file(tar)
    if got != pin.tar_sha256:
        tar.unlink()
        raise EnvironmentProblem(f"{pin.url}: sha256 of its tar {got}, pinned {pin.tar_sha256} "
                                 f"({VERSIONS} [{pin.name}] tar_sha256)")
    return tar


def _uncompressed(source: Path, tar: Path) -> None:
    opener = gzip.open if source.name.endswith(".gz") else open
    with opener(source, "rb") as f, open(tar, "wb") as out:
        shutil.copyfileobj(f, out)


def _unpack(tar: Path, pin: Pin, work: Path) -> Path:
    """The release's folder (``NAME-VERSION/``, as ``git archive --prefix`` makes it)."""
    with tarfile.open(tar) as t:
        t.extractall(work, filter="data")
    folder = work / f"{pin.name}-{pin.version}"
    if not folder.is_dir():
        raise EnvironmentProblem(f"{tar.name} holds no {folder.name}/ folder")
    return folder


def _run(what: str, argv: list[str], cwd: Path, log: Path, env: dict[str, str]) -> None:
    with open(log, "a") as out:
        out.write(f"\n$ cd {cwd} && {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.run(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env,
                              timeout=STEP_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        raise EnvironmentProblem(f"enroot and pyxis cannot be built: {what} exited "
                                 f"{proc.returncode} ({message_value(lines[-1], 160)}); "
                                 f"see {log}")


def _build(builder: Builder, tars: dict[str, Path], pins: dict[str, Pin], work: Path,
           tools: Tools, log: Path) -> None:
    """Both built and installed into ``work/stage/FOLDER`` (their paths are FOLDER's)."""
    system = builder.root.rootfs if builder.root else Path("/")
    missing = [t for t in ("make", "cc") if not (system / "usr/bin" / t).exists()]
    if missing or not MAKESELF.exists():
        raise EnvironmentProblem(f"not installed: {', '.join(missing or ['makeself'])}; run "
                                 "`make setup`")
    stage = work / "stage"
    prefix = str(tools.folder)
    env = builder.env(work)
    binds = [tools.folder.parent]

    def run(what: str, argv: list[str], cwd: Path) -> None:
        _run(what, builder.argv(argv, binds), cwd, log, env)

    enroot = _unpack(tars["enroot"], pins["enroot"], work)
    # the submodules the release tar lacks: Debian's makeself, the system's kernel headers
    (enroot / "deps/makeself").mkdir(parents=True, exist_ok=True)
    shutil.copy(MAKESELF, enroot / "deps/makeself/makeself.sh")
    (enroot / "deps/linux-headers").mkdir(parents=True, exist_ok=True)
    (enroot / "deps/linux-headers/.stamp").touch()
    (enroot / "deps/dist/linux/include").mkdir(parents=True, exist_ok=True)
    # built first without DESTDIR: enroot's Makefile writes it into the paths of the script
    # and enroot.conf it makes; install then only copies
    paths = [*builder.enroot_make(), f"prefix={prefix}", f"sysconfdir={prefix}/etc"]
    run("enroot's make all", ["make", "-j2", "all", *paths], enroot)
    run("enroot's make install", ["make", "install", *paths, f"DESTDIR={stage}"], enroot)
    pyxis = _unpack(tars["pyxis"], pins["pyxis"], work)
    pyxis_env = {k: v for k, v in env.items() if k not in GLIBC_236}
    _run("pyxis's make install", builder.argv(["make", "-j2", "install", f"prefix={prefix}",
                                               f"DESTDIR={stage}"], binds), pyxis, log,
         pyxis_env)
    built = Tools(stage / tools.folder.relative_to("/"))
    if not (built.enroot.is_file() and built.plugin.is_file()):
        raise EnvironmentProblem(f"enroot and pyxis cannot be built: no {built.enroot.name} or "
                                 f"{built.plugin.name} after make install; see {log}")


def _probe(builder: Builder, tools: Tools, pin: Pin, log: Path) -> None:
    """``enroot version`` of the install, on its system, says the pinned version; else the
    install is removed."""
    proc = subprocess.run(builder.argv([str(tools.enroot), "version"], [tools.folder.parent]),
                          capture_output=True, text=True, timeout=60, check=False,
                          env=builder.env(tools.folder) if builder.root else None)
    if proc.returncode != 0 or proc.stdout.strip() != pin.version:
        shutil.rmtree(tools.folder, ignore_errors=True)
        said = (proc.stdout + proc.stderr).strip().splitlines() or ["no output"]
        raise EnvironmentProblem(f"the built enroot does not run: `enroot version` said "
                                 f"{message_value(said[-1])}; see {log}")
