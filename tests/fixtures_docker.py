"""Docker and Charliecloud fixtures of the image tests: this checkout's dockerd, the images
built from the Debian base (made by debootstrap where no registry answers), and helpers.

Registered in conftest.py (``pytest_plugins``); each image is built once a session and the
docker build cache is shared by all of them.
"""

from __future__ import annotations

import os
import subprocess

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


@pytest.fixture(scope="session")
def engine():
    """This checkout's dockerd: started here (and stopped by PID at the end) unless running."""
    require_commands("dockerd", "debootstrap")
    if not os.access(DOCKER, os.X_OK):
        pytest.fail(f"{DOCKER} missing (run `make setup`)", pytrace=False)
    daemon = Dockerd().start()
    yield daemon
    if daemon.started_here:
        daemon.stop()


@pytest.fixture(scope="session")
def debian_base(engine):
    """The Debian base both stages build FROM: the official one where a registry serves it,
    else the debootstrap base (made once, then reused), as ``make image`` chooses."""
    return image_build.resolve_base("cpu", engine)


def build_image(engine, flavor: str, base: str | None) -> str:
    _run(image_build.build_argv("docker", flavor, base), env=engine.env(), timeout=3600)
    return image_build.tag(flavor)


@pytest.fixture(scope="session")
def cpu_image(engine, debian_base):
    """Tag of the cpu image (layer cache reused)."""
    return build_image(engine, "cpu", debian_base)


@pytest.fixture(scope="session")
def gpu_image(engine, debian_base):
    """Tag of the gpu image: CUDA, cuDNN and NCCL wheels, UCX and Open MPI from Debian sources."""
    return build_image(engine, "gpu", debian_base)


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


