"""Docker and Charliecloud fixtures of the image tests: this checkout's dockerd, the images
built from the Debian base (made by debootstrap where no registry answers), and helpers.

Registered in conftest.py (``pytest_plugins``); each image is built once a session and the
docker build cache is shared by all of them. The builds start in the background, niced, as
the run begins (``ImageBuilds``), and the tests that need Docker run last: on a fresh clone
the images (most of the suite's time) compile while the other tests run.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from containers import build as image_build
from containers.dockerd import DOCKER, Dockerd

from conftest import REPO, require_commands

MNIST = ["train_mnist.py", "--iterations", "20", "--n-train", "2000", "--n-test", "200",
         "--unit", "100", "--no-progress", "--out", "/tmp/result"]


def _run(argv, env=None, timeout=900, check=True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False, **kw)
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, argv))} exited {proc.returncode}\n--- stdout\n"
                    f"{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}", pytrace=False)
    return proc


# where the builds' logs go (BuildKit's plain progress: each step and its seconds)
LOGS = REPO / "build" / "test-logs"
# which image each fixture needs, directly or through another fixture
IMAGE_OF_FIXTURE = {"cpu_image": "cpu", "gpu_image": "gpu"}


class ImageBuilds:
    """This checkout's dockerd, the Debian base and the images, made in order by one
    background thread at nice 19 (the thread's niceness passes to dockerd, debootstrap and
    the build steps it starts), so the foreground tests keep the CPUs they ask for."""

    def __init__(self, flavors: list[str]) -> None:
        self.flavors = flavors
        self.daemon: Dockerd | None = None
        self.base: str | None = None
        self.error: str | None = None  # dockerd or the base failed: every image fails with it
        self.results: dict[str, subprocess.CompletedProcess | str] = {}
        self._ready = {name: threading.Event() for name in ("engine", *flavors)}
        self._thread = threading.Thread(target=self._run, name="image-builds", daemon=True)

    def start(self) -> ImageBuilds:
        self._thread.start()
        return self

    def _run(self) -> None:
        os.setpriority(os.PRIO_PROCESS, 0, 19)  # on Linux: this thread and its children
        try:
            self.daemon = Dockerd().start()
            self.base = image_build.resolve_base("cpu", self.daemon)
        except Exception as err:  # noqa: BLE001 - reported by every fixture that waits here
            self.error = f"{type(err).__name__}: {err}"
        finally:
            self._ready["engine"].set()
        for flavor in self.flavors:
            try:
                if self.error is None:
                    self.results[flavor] = self._build(flavor)
            except Exception as err:  # noqa: BLE001 - as above
                self.results[flavor] = f"{type(err).__name__}: {err}"
            finally:
                self._ready[flavor].set()

    def _build(self, flavor: str) -> subprocess.CompletedProcess:
        """``docker build`` with its step-by-step log (each step's seconds) in LOGS."""
        argv = image_build.build_argv("docker", flavor, self.base)
        argv[2:2] = ["--progress=plain"]
        LOGS.mkdir(parents=True, exist_ok=True)
        with open(LOGS / f"image-{flavor}.log", "w") as log:
            return subprocess.run(argv, env=self.daemon.env(), stdout=log,
                                  stderr=subprocess.STDOUT, timeout=3600, check=False)

    def engine(self) -> Dockerd:
        self._ready["engine"].wait()
        if self.error is not None:
            pytest.fail(f"dockerd or the Debian base: {self.error}", pytrace=False)
        return self.daemon

    def image(self, flavor: str) -> str:
        self.engine()
        if flavor in self._ready:
            self._ready[flavor].wait()
        else:  # not foreseen at collection: built now, in the foreground
            self.results[flavor] = self._build(flavor)
        result = self.results[flavor]
        if isinstance(result, str):
            pytest.fail(f"building the {flavor} image: {result}", pytrace=False)
        if result.returncode != 0:
            log = LOGS / f"image-{flavor}.log"
            pytest.fail(f"{' '.join(result.args)} exited {result.returncode}; the end of {log}:"
                        f"\n{log.read_text(errors='replace')[-4000:]}", pytrace=False)
        return image_build.tag(flavor)


_builds: ImageBuilds | None = None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Docker's tests last, and the images they need started in the background now."""
    global _builds
    docker = [item for item in items if "docker" in item.keywords]
    items[:] = [item for item in items if "docker" not in item.keywords] + docker
    needed = {IMAGE_OF_FIXTURE[name] for item in docker for name in item.fixturenames
              if name in IMAGE_OF_FIXTURE}
    if docker and not config.option.collectonly and _builds is None:
        _builds = ImageBuilds([f for f in ("cpu", "gpu") if f in needed]).start()


@pytest.fixture(scope="session")
def engine():
    """This checkout's dockerd: started here (and stopped by PID at the end) unless running."""
    require_commands("dockerd", "debootstrap")
    if not os.access(DOCKER, os.X_OK):
        pytest.fail(f"{DOCKER} missing (run `make setup`)", pytrace=False)
    global _builds
    _builds = _builds or ImageBuilds([]).start()
    daemon = _builds.engine()
    yield daemon
    if daemon.started_here:
        daemon.stop()


@pytest.fixture(scope="session")
def cpu_image(engine):
    """Tag of the cpu image (layer cache reused)."""
    return _builds.image("cpu")


@pytest.fixture(scope="session")
def gpu_image(engine):
    """Tag of the gpu image: CUDA, cuDNN and NCCL wheels, UCX and Open MPI from Debian sources."""
    return _builds.image("gpu")


def docker_run(engine, tag, *argv, extra=(), check=True):
    return _run([DOCKER, "run", "--rm", "--network", "none", "--shm-size", "256m", *extra, tag,
                 *argv], env=engine.env(), check=check)


@pytest.fixture(scope="session")
def charliecloud_dir(engine, cpu_image):
    require_commands("ch-convert", "ch-run")
    return image_build.charliecloud("cpu", "dir")


@pytest.fixture(scope="session")
def charliecloud_gpu_dir(engine, gpu_image):
    require_commands("ch-convert", "ch-run")
    return image_build.charliecloud("gpu", "dir")


def ch_run(image_dir, *argv, check=True):
    env = image_build.charliecloud_env()
    # CI runs as root: ch-run keeps the caller's uid, and Open MPI then wants this consent.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # the examples go to /mnt, a folder every Debian image has (ch-run binds onto existing ones)
    return _run(["ch-run", "--set-env", "-b", f"{REPO / 'examples'}:/mnt", str(image_dir),
                 "--", *argv], env=env, check=check)


def charliecloud_site(sandbox, image_dir: Path, tmp_path: Path, *more_binds: str) -> Path:
    """The sandbox profile with the charliecloud runtime: the sandbox's state (slurmd's spool
    with the PMIx sockets), the job's folder and ``more_binds`` appear at the same paths inside
    (ch-run binds only onto folders that exist in the image); examples/ at /mnt."""
    site_text = (REPO / "slurm/sites/sandbox.toml").read_text()
    binds = [f"{REPO / 'examples'}:/mnt", str(sandbox.state_dir), str(tmp_path), *more_binds]
    for path in binds[1:]:
        (image_dir / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    container = ('[container]\nruntime = "charliecloud"\n'
                 f'image = "{image_dir}"\nbinds = {json.dumps(binds)}')
    assert '[container]\nruntime = "none"' in site_text
    site = tmp_path / "sandbox-charliecloud.toml"
    site.write_text(site_text.replace('[container]\nruntime = "none"', container))
    return site
