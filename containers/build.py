"""Build the images with the engine this machine has (docker, podman, buildah); then SIF/SquashFS.

Example::

    python -m containers.build image --flavor cpu            # engine found on PATH, or ENGINE=
    python -m containers.build image --flavor gpu            # the Debian/PyPI gpu image
    python -m containers.build image --flavor cpu --base chainermn-rt/base:bookworm
    python -m containers.build sif --flavor cpu              # from the built image
    python -m containers.build sif --flavor cpu --from-definition   # from the .def alone
    python -m containers.build sqfs --flavor cpu             # SquashFS for Charliecloud and enroot
    python -m containers.build doctor --flavor gpu           # `chainermn-rt doctor --image` inside

Docker builds go to DOCKER_HOST, else to a running system Docker service, else to this
checkout's own dockerd (containers/dockerd.py, stopped again afterwards). The build
host's CA bundle reaches the build as a secret only.

The Debian-based flavours (cpu, gpu) build FROM the official ``debian:bookworm-slim``
when the engine has it or a registry serves it; where none answers, from the
debootstrap base of containers/base.py, made the first time and reused after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chainermn_rt import apptainer
from chainermn_rt.errors import EnvironmentProblem
from chainermn_rt.files import write_atomically
from chainermn_rt.sandbox.debian import host_mirror
from containers import recipe
from containers.base import make_base
from containers.dockerd import DOCKER, Dockerd
from containers.flavors import FLAVORS, debian_based
from containers.recipe import CA_SECRET, HOST_CA_ARG, MIRROR_ARG
from containers.versions import load, package_version

REPO = Path(__file__).resolve().parent.parent
HOST_CA = Path(recipe.HOST_CA)
ENGINES = ("docker", "podman", "buildah")
OUT = REPO / "build" / "images"


class BuildError(RuntimeError):
    """A build tool is missing or failed; the message says which and what to do."""


def tag(flavor: str) -> str:
    return f"{load()['image']['name']}:{package_version()}-{flavor}"


def find_engine(requested: str | None = None) -> str:
    if requested:
        if requested not in ENGINES:
            raise BuildError(f"ENGINE={requested}; allowed: {', '.join(ENGINES)}")
        if requested == "docker" and not os.access(DOCKER, os.X_OK):
            raise BuildError(f"{DOCKER} is missing: install docker.io")
        if requested != "docker" and shutil.which(requested) is None:
            raise BuildError(f"ENGINE={requested} but {requested} is not installed")
        return requested
    if os.access(DOCKER, os.X_OK):
        return "docker"
    for name in ENGINES[1:]:
        if shutil.which(name):
            return name
    raise BuildError("no container engine: install docker.io, podman or buildah")


def build_argv(engine: str, flavor: str, base: str | None) -> list[str]:
    dockerfile = REPO / "containers" / flavor / "Dockerfile"
    argv = {"docker": [DOCKER, "build"], "podman": ["podman", "build"],
            "buildah": ["buildah", "bud", "--isolation", "chroot", "--pull-never"]}[engine]
    argv += ["--network", "host", "-f", str(dockerfile), "-t", tag(flavor)]
    if HOST_CA.exists():
        argv += ["--secret", f"id={CA_SECRET},src={HOST_CA}"]
    if base:
        argv += ["--build-arg", f"BUILD_BASE={base}", "--build-arg", f"RUNTIME_BASE={base}"]
    return argv + [str(REPO)]


class _SystemDocker:
    """The engine behind DOCKER_HOST or the system service, shaped like ``Dockerd``."""

    docker = DOCKER

    def env(self) -> dict[str, str]:
        return dict(os.environ, DOCKER_BUILDKIT="1")


def _has_image(engine, name: str) -> bool:
    return subprocess.run([engine.docker, "image", "inspect", name], env=engine.env(),
                          capture_output=True, check=False).returncode == 0


def resolve_base(flavor: str, engine, pull_timeout: float = 120) -> str | None:
    """The base both stages build FROM: None for the recipe's own (official) one, else the tag
    of the debootstrap base, made here when no registry serves the official image."""
    if not debian_based(flavor):
        return None  # gpu-upstream needs the CUDA images of a registry
    debian = load()["debian"]
    if _has_image(engine, debian["base"]):
        return None
    try:
        pulled = subprocess.run([engine.docker, "pull", "-q", debian["base"]], env=engine.env(),
                                capture_output=True, timeout=pull_timeout, check=False)
        if pulled.returncode == 0:
            return None
    except subprocess.TimeoutExpired:
        pass
    local = debian["local_base"]
    if _has_image(engine, local):
        print(f"no registry serves {debian['base']}: building from {local} (made earlier)")
    else:
        print(f"no registry serves {debian['base']}: making {local} by debootstrap")
        try:
            make_base(local, debian["suite"], engine)
        except (RuntimeError, subprocess.CalledProcessError) as err:
            raise BuildError(f"making the base {local}: {err}") from None
    return local


def id_file(flavor: str) -> Path:
    """``build/images/chainermn-rt-FLAVOR.image-id``: the tag and id of the image last built,
    written by every build; the Makefile's mark that the image is there (``make sif``)."""
    return OUT / f"chainermn-rt-{flavor}.image-id"


def image_id_argv(engine: str, name: str) -> list[str]:
    if engine == "buildah":
        return ["buildah", "images", "--quiet", "--no-trunc", name]
    return [DOCKER if engine == "docker" else engine, "image", "inspect", "--format",
            "{{.Id}}", name]


def _write_id(flavor: str, engine: str, env: dict[str, str]) -> None:
    """The id file of the image just built (its id where the engine tells it)."""
    found = subprocess.run(image_id_argv(engine, tag(flavor)), env=env, capture_output=True,
                           text=True, check=False)
    ident = found.stdout.split()[0] if found.returncode == 0 and found.stdout.split() else ""
    OUT.mkdir(parents=True, exist_ok=True)
    write_atomically(id_file(flavor), lambda f: f.write(f"{tag(flavor)} {ident}".rstrip()
                                                        + "\n"))


def image(flavor: str, engine_name: str | None, base: str | None) -> float:
    """Build the flavour's image and write its id file; returns the seconds it took."""
    engine = find_engine(engine_name)
    start = time.monotonic()
    if engine == "docker":
        with _null(_SystemDocker()) if _existing_docker() else Dockerd() as daemon:
            argv = build_argv(engine, flavor, base or resolve_base(flavor, daemon))
            rc = subprocess.run(argv, env=daemon.env(), check=False).returncode
            if rc == 0:
                _write_id(flavor, engine, daemon.env())
    else:
        argv = build_argv(engine, flavor, base)
        rc = subprocess.run(argv, env=dict(os.environ, DOCKER_BUILDKIT="1"),
                            check=False).returncode
        if rc == 0:
            _write_id(flavor, engine, dict(os.environ))
    if rc != 0:
        hint = ""
        if not base and not debian_based(flavor):
            hint = ("; the gpu-upstream flavour needs the CUDA images named in "
                    "containers/versions.toml [cuda] (a registry, or local copies with those "
                    "names); the gpu flavour needs none")
        elif not base and engine != "docker":
            hint = (f"; without a registry run `make base`, then `make image FLAVOR={flavor} "
                    f"BASE={load()['debian']['local_base']}`")
        raise BuildError(f"{' '.join(argv[:2])} of {flavor} exited {rc}{hint}")
    seconds = time.monotonic() - start
    print(f"built {tag(flavor)} with {engine} in {seconds:.0f} s")
    return seconds


def sif_binds(work: Path) -> list:
    """What a SIF build in the folder ``work`` binds into the root: ``work/tmp`` as /tmp (the
    scratch of ``%post``, on disk), then ``work`` itself at its own path. In that order: a
    checkout below /tmp (a CI clone) would have ``work`` hidden by a /tmp bound after it.
    ``work/tmp`` is made as /tmp is, writable by all and sticky: apt's unprivileged ``_apt``
    writes its temporary files there (without it apt-get update fails in the gpu ``.def``)."""
    scratch = work / "tmp"
    scratch.mkdir(exist_ok=True)
    scratch.chmod(0o1777)
    return [(scratch, "/tmp"), work]


def sif(flavor: str, from_image: bool) -> tuple[Path, float]:
    """``build/images/chainermn-rt-FLAVOR.sif`` with a real Apptainer (the host's, else the
    Debian 13 root's), written whole or not at all; (its path, the seconds it took).

    From the built image (default): ``docker save`` to a tarball, then ``apptainer build
    docker-archive:...``, which keeps the image's ENV (Apptainer's environment script), labels
    and files.
    From the definition: ``containers/FLAVOR/chainermn-rt.def`` with Apptainer alone, the Debian
    flavours bootstrapped from the host's Debian mirror, the host's CA bundle copied into the
    build stage only."""
    try:
        runner = apptainer.find(say=print)
    except EnvironmentProblem as err:
        raise BuildError(f"{err} (or build the SIF on a machine that has Apptainer, from "
                         f"containers/{flavor}/chainermn-rt.def)") from None
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / f"chainermn-rt-{flavor}.sif"
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".sif-", dir=OUT) as tmp:
        work = Path(tmp)
        binds = sif_binds(work)
        # Apptainer's own scratch, and /tmp of the build's %post steps, on disk beside the SIF
        env = {"APPTAINER_TMPDIR": str(work / "tmp")}
        built = work / target.name
        if from_image:
            archive = work / "image.tar"
            _save(flavor, archive)
            args = ["build", "--disable-cache", str(built), f"docker-archive://{archive}"]
        else:
            args = ["build", "--disable-cache", *_definition_args(runner, flavor, work, binds),
                    str(built), str(REPO / "containers" / flavor / "chainermn-rt.def")]
            binds.append(REPO)
        proc = runner.run(args, binds=binds, env=env, cwd=REPO)
        if proc.returncode != 0:
            raise BuildError(f"apptainer build of {target.name} ({runner.where}) exited "
                             f"{proc.returncode}")
        built.rename(target)
    seconds = time.monotonic() - start
    print(f"built {target} ({target.stat().st_size / 1e6:.0f} MB) with {runner.where} from the "
          f"{'image' if from_image else 'definition'} in {seconds:.0f} s")
    return target, seconds


def _save(flavor: str, archive: Path) -> None:
    """``docker save`` of the built image: the docker-archive Apptainer builds from (no
    registry, no daemon socket inside the root)."""
    with _null(_SystemDocker()) if _existing_docker() else Dockerd() as daemon:
        if not _has_image(daemon, tag(flavor)):
            stale = id_file(flavor)
            said = ""
            if stale.exists():  # the image was removed after: the next make sif builds it
                stale.unlink()
                said = f" (removed {stale}, which said it was)"
            raise BuildError(f"image {tag(flavor)} is not built{said}: `make sif "
                             f"FLAVOR={flavor}` builds it first (or `make sif FROM_DEF=1` "
                             "builds from the definition)")
        subprocess.run([daemon.docker, "save", "-o", str(archive), tag(flavor)],
                       env=daemon.env(), check=True)


def _definition_args(runner: apptainer.Apptainer, flavor: str, work: Path,
                     binds: list) -> list[str]:
    """The build arguments of a definition: the host's Debian mirror (the Debian flavours) and
    its CA bundle (an empty file where it has none); ``--fakeroot`` in the Debian 13 root,
    where ``%post`` lacks CAP_SYS_RESOURCE as real root (its /etc/subuid maps root)."""
    text = (REPO / "containers" / flavor / "chainermn-rt.def").read_text()
    ca = HOST_CA if HOST_CA.exists() else work / "no-ca-bundle"
    if ca != HOST_CA:
        ca.touch()
    args = []
    if runner.root is not None:
        args.append("--fakeroot")
        inside = Path("/run/chainermn-rt-host-ca.crt")  # the root's own bundle stays as it is
        binds.append((ca, inside))
        ca = inside
    if f"{{{{ {HOST_CA_ARG} }}}}" in text:
        args += ["--build-arg", f"{HOST_CA_ARG}={ca}"]
    if f"{{{{ {MIRROR_ARG} }}}}" in text:
        try:
            args += ["--build-arg", f"{MIRROR_ARG}={host_mirror()}"]
        except EnvironmentProblem as err:
            raise BuildError(str(err)) from None
    return args


def charliecloud_env() -> dict[str, str]:
    """ch-* need Debian's python3 (lark) first on PATH and USER set."""
    env = dict(os.environ) if _existing_docker() else Dockerd().env()
    env["PATH"] = "/usr/bin:/usr/sbin:" + env.get("PATH", "")
    env.setdefault("USER", "root")
    return env


# folders and files ch-run binds onto, as ch-convert makes them (ch-convert's mount_points_ensure)
CH_MOUNT_DIRS = ("bin", "dev", "etc", "mnt", "proc", "usr", *(f"mnt/{i}" for i in range(10)))
CH_MOUNT_FILES = ("etc/hosts", "etc/resolv.conf")
# mksquashfs's options for `make sqfs`: ch-convert's 64 KiB blocks and owners, LZ4 instead of
# its gzip. squashfuse (enroot's .sqsh steps) decompresses every block a rank reads:
# `import chainermn` from the cpu image 0.47 s with LZ4, 1.05 s with gzip, 0.44 s
# uncompressed, 0.16 s unpacked; 178 MB against 129 MB (bench/RESULTS.md, issue 41).
SQUASH_OPTIONS = ("-comp", "lz4", "-b", "65536", "-noappend", "-all-root", "-mkfs-time", "0",
                  "-no-progress")


def docker_to_dir(image: str, target: Path, env: dict[str, str]) -> None:
    """What ``ch-convert -i docker -o dir`` does, streamed: ch-convert gzips the whole export to
    a file, reads it twice and unpacks it (7 min for the 4.6 GB gpu image here). Export, unpack
    without /dev, the image's ENV as ``ch/environment`` (for ``ch-run --set-env``), the mount
    points."""
    cid = subprocess.run([DOCKER, "create", "--read-only", image, "/bin/true"], env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        target.mkdir(parents=True)
        export = subprocess.Popen([DOCKER, "export", cid], stdout=subprocess.PIPE, env=env)
        untar = subprocess.run(["tar", "-x", "-p", "-f", "-", "-C", str(target), "--anchored",
                                "--exclude=dev/*", "--exclude=./dev/*"], stdin=export.stdout,
                               check=False)
        export.stdout.close()
        if export.wait() != 0 or untar.returncode != 0:
            raise BuildError(f"docker export of {image} into {target} failed")
    finally:
        subprocess.run([DOCKER, "rm", cid], env=env, capture_output=True, check=False)
    environment = subprocess.run(
        [DOCKER, "image", "inspect", image, "--format",
         "{{range .Config.Env}}{{println .}}{{end}}"],
        env=env, capture_output=True, text=True, check=True).stdout
    (target / "ch").mkdir(exist_ok=True)
    (target / "ch" / "environment").write_text(environment)
    for name in CH_MOUNT_DIRS:
        if not os.path.lexists(target / name):
            (target / name).mkdir()
    for name in CH_MOUNT_FILES:
        if not os.path.lexists(target / name):
            (target / name).touch()
    for folder, _, _ in os.walk(target):  # writable, so that it can be removed again
        mode = os.lstat(folder).st_mode
        if mode & 0o700 != 0o700:
            os.chmod(folder, mode | 0o700)


def charliecloud(flavor: str, fmt: str) -> Path:
    """Convert the built Docker image to a Charliecloud directory (``dir``) or SquashFS."""
    if fmt == "squash" and shutil.which("mksquashfs") is None:
        raise BuildError("mksquashfs is missing: install squashfs-tools")
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / (f"chainermn-rt-{flavor}" + (".sqfs" if fmt == "squash" else ""))
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    with _null() if _existing_docker() else Dockerd():
        if fmt == "dir":
            docker_to_dir(tag(flavor), target, charliecloud_env())
        else:
            docker_to_squash(tag(flavor), target, charliecloud_env())
    return target


def docker_to_squash(image: str, target: Path, env: dict[str, str]) -> None:
    """A SquashFS for Charliecloud and for enroot (pyxis): :func:`docker_to_dir`'s folder (with
    ch-run's mount points), then ``mksquashfs`` with :data:`SQUASH_OPTIONS`. For enroot also
    the image's ENV in ``etc/environment`` (where enroot reads a container's environment:
    ``enroot import`` writes it there; ch-run reads ``ch/environment``; the image's PATH for
    enroot's login shell is the recipe's, ``compose.PROFILE_PATH``). Without them pyxis's
    ranks ran Debian's python3, not the image's venv ("No module named chainermn_rt")."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as work:
        folder = Path(work) / "image"
        docker_to_dir(image, folder, env)
        variables = (folder / "ch" / "environment").read_text()
        environ = folder / "etc" / "environment"
        before = environ.read_text() if environ.is_file() and not environ.is_symlink() else ""
        environ.unlink(missing_ok=True)
        environ.write_text(before + variables)
        subprocess.run(["mksquashfs", str(folder), str(target), *SQUASH_OPTIONS],
                       check=True, env=env, stdout=subprocess.DEVNULL)


def doctor(flavor: str) -> int:
    """Run ``chainermn-rt doctor --image`` inside the built image; its exit status (1: a FAIL)."""
    if not os.access(DOCKER, os.X_OK):
        raise BuildError(f"{DOCKER} is missing: install docker.io")
    with _null(_SystemDocker()) if _existing_docker() else Dockerd() as daemon:
        if not _has_image(daemon, tag(flavor)):
            raise BuildError(f"image {tag(flavor)} is not built: run `make image FLAVOR={flavor}`")
        argv = [DOCKER, "run", "--rm", "--network", "none", tag(flavor),
                "chainermn-rt", "doctor", "--image"]
        return subprocess.run(argv, env=daemon.env(), check=False).returncode


def _existing_docker() -> bool:
    """True when DOCKER_HOST is set or a system Docker service answers on its default socket."""
    if os.environ.get("DOCKER_HOST"):
        return True
    if not Path("/var/run/docker.sock").exists():
        return False
    return subprocess.run([DOCKER, "version"], capture_output=True, timeout=30,
                          check=False).returncode == 0


class _null:
    """A context manager that yields ``value`` and does nothing on exit."""

    def __init__(self, value=None):
        self.value = value

    def __enter__(self):
        return self.value

    def __exit__(self, *exc):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["image", "sif", "sqfs", "chdir", "tag", "doctor"])
    parser.add_argument("--flavor", default="cpu", choices=FLAVORS)
    parser.add_argument("--engine", default=os.environ.get("ENGINE") or None)
    parser.add_argument("--base", default=os.environ.get("BASE") or None,
                        help="base image for both stages (e.g. the one `make base` made)")
    parser.add_argument("--from-definition", action="store_true",
                        help="sif: build from the .def instead of the built image")
    args = parser.parse_args(argv)
    try:
        if args.what == "image":
            image(args.flavor, args.engine, args.base)
        elif args.what == "sif":
            sif(args.flavor, not args.from_definition)
        elif args.what == "tag":
            print(tag(args.flavor))
        elif args.what == "doctor":
            return doctor(args.flavor)
        else:
            print(charliecloud(args.flavor, "squash" if args.what == "sqfs" else "dir"))
    except BuildError as err:
        print(f"containers/build.py {args.what}: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
