"""Docker and Charliecloud fixtures of the image tests: this checkout's dockerd, the images
built from the Debian base (made by debootstrap where no registry answers), and helpers.

Registered in conftest.py (``pytest_plugins``); each image is built once a session and the
docker build cache is shared by all of them. The builds start in the background, niced, as
the run begins (``ImageBuilds``: a niced dockerd and one niced background process), and the
tests that need Docker run last: on a fresh clone the images (most of the suite's time)
compile while the other tests run.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
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
    """This checkout's dockerd, started at nice 19 (its build steps inherit it), and one
    background process, at nice 19 too, that makes the Debian base and builds the images in
    order with ``python -m containers.build image``, each build's log (BuildKit's plain
    progress: every step and its seconds) and exit status in LOGS. A process, not a thread:
    spawning from a second thread of pytest once failed with EFAULT (CPython's vfork)."""

    def __init__(self, flavors: list[str]) -> None:
        self.flavors = flavors
        self.daemon: Dockerd | None = None
        self.error: str | None = None  # dockerd did not start: every image fails with it
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def _step(flavor: str) -> str:
        log, status = (shlex.quote(str(LOGS / f"image-{flavor}{end}"))
                       for end in (".log", ".status"))
        return (f'"$0" -m containers.build image --flavor {flavor} > {log} 2>&1; '
                f'echo $? > {status}.tmp; mv {status}.tmp {status}')

    def start(self) -> ImageBuilds:
        try:
            self.daemon = Dockerd().start(nice=19)
        except Exception as err:  # noqa: BLE001 - reported by every fixture that needs it
            self.error = f"{type(err).__name__}: {err}"
            return self
        LOGS.mkdir(parents=True, exist_ok=True)
        for flavor in self.flavors:
            (LOGS / f"image-{flavor}.status").unlink(missing_ok=True)
        if self.flavors:
            self.proc = subprocess.Popen(
                ["nice", "-n", "19", "sh", "-c", "; ".join(map(self._step, self.flavors)),
                 sys.executable], cwd=REPO, env=self.daemon.env(), start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def stop(self) -> None:
        """End the builds still running (an interrupted session)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait()

    def engine(self) -> Dockerd:
        if self.error is not None:
            pytest.fail(f"dockerd: {self.error}", pytrace=False)
        return self.daemon

    def image(self, flavor: str) -> str:
        self.engine()
        status = LOGS / f"image-{flavor}.status"
        if flavor not in self.flavors:  # not foreseen at collection: built now, in the foreground
            subprocess.run(["sh", "-c", self._step(flavor), sys.executable], cwd=REPO,
                           env=self.daemon.env(), timeout=3600, check=False)
        while not status.exists():
            if self.proc is None or self.proc.poll() is not None:
                pytest.fail(f"the {flavor} image's build ended without a status; see "
                            f"{LOGS / f'image-{flavor}.log'}", pytrace=False)
            time.sleep(2)
        if status.read_text().strip() != "0":
            log = LOGS / f"image-{flavor}.log"
            pytest.fail(f"building the {flavor} image exited {status.read_text().strip()}; the "
                        f"end of {log}:\n{log.read_text(errors='replace')[-4000:]}",
                        pytrace=False)
        return image_build.tag(flavor)


_builds: ImageBuilds | None = None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Docker's tests last, those of the gpu image (built second, minutes after the cpu
    image) after the others, and the images they need started in the background now."""
    global _builds
    docker = [item for item in items if "docker" in item.keywords]
    docker.sort(key=lambda item: "gpu_image" in item.fixturenames)  # stable: file order kept
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
    _builds.stop()
    if daemon.started_here:
        daemon.stop()


@pytest.fixture(scope="session")
def cpu_image(engine):
    """Tag of the cpu image (layer cache reused)."""
    return _builds.image("cpu")


@pytest.fixture(scope="session")
def cpu_sif(cpu_image, debian13_root) -> Path:
    """build/images/chainermn-rt-cpu.sif from the suite's cpu image (`make sif FLAVOR=cpu`),
    built once a session: tests/test_container_sif.py and the debian13 stack's jobs
    (tests/test_jobs_debian13.py) use it."""
    path, _ = image_build.sif("cpu", from_image=True)
    return path


@pytest.fixture(scope="session")
def cpu_sqfs(cpu_image) -> Path:
    """build/images/chainermn-rt-cpu.sqfs from the suite's cpu image (`make sqfs FLAVOR=cpu`),
    built once a session: the pyxis sandbox's jobs (tests/test_jobs_pyxis.py) run in it; LZ4
    (containers/build.py SQUASH_OPTIONS), checked with unsquashfs."""
    require_commands("mksquashfs", "unsquashfs")
    path = image_build.charliecloud("cpu", "squash")
    told = subprocess.run(["unsquashfs", "-s", str(path)], capture_output=True, text=True,
                          check=True).stdout
    assert "Compression lz4" in told and "Block size 65536" in told, told
    return path


@pytest.fixture(scope="session")
def gpu_image(engine):
    """Tag of the gpu image: CUDA, cuDNN and NCCL wheels, UCX and Open MPI from Debian sources."""
    return _builds.image("gpu")


def docker_run(engine, tag, *argv, extra=(), check=True):
    return _run([DOCKER, "run", "--rm", "--network", "none", "--shm-size", "256m", *extra, tag,
                 *argv], env=engine.env(), check=check)


# Run inside an image: the JPEG decoded by chainermn_rt.data.jpeg through a crop box, a size and
# a flip, the PNG by Pillow; the pixels come back as JSON.
DECODE = """\
import json
import numpy
from PIL import Image
from chainermn_rt.data import jpeg
data = open('/check/quadrants.jpg', 'rb').read()
crop = jpeg.decode(data, (24, 16), box=(24, 16, 72, 48), flip=True)
with Image.open('/check/noise.png') as png:
    mode, noise = png.mode, numpy.asarray(png)
print(json.dumps({'version': jpeg.LIBJPEG_TURBO_VERSION, 'header': list(jpeg.header(data)),
                  'crop': crop.tolist(), 'mode': mode, 'png': noise.tolist()}))
"""


def check_decoders(engine, tag, folder: Path) -> None:
    """Decode a JPEG and a PNG made here inside image ``tag`` and check the pixels: the JPEG's
    crop has its quadrants' colours where the box and the flip put them, bit for bit what this
    machine's decoder makes of it (the same libjpeg-turbo and code); the PNG is exact."""
    import numpy
    from PIL import Image

    from chainermn_rt.data import jpeg
    from chainermn_rt.doctor.stack import QUADRANTS, TOLERANCE

    picture = numpy.empty((64, 96, 3), numpy.uint8)  # quadrants of 48x32: whole 16x16 MCUs
    for i, colour in enumerate(QUADRANTS):
        y, x = divmod(i, 2)
        picture[32 * y:32 * y + 32, 48 * x:48 * x + 48] = colour
    Image.fromarray(picture).save(folder / "quadrants.jpg", quality=95, subsampling=0)
    noise = numpy.random.default_rng(7).integers(0, 256, (30, 40, 3), dtype=numpy.uint8)
    Image.fromarray(noise).save(folder / "noise.png")
    folder.chmod(0o755)  # the image's user (uid 1000) reads it
    got = json.loads(docker_run(engine, tag, "python", "-c", DECODE,
                                extra=("-v", f"{folder}:/check:ro")).stdout)
    assert got["header"] == [96, 64, 3, jpeg.YCBCR, False]
    crop = numpy.array(got["crop"], numpy.int16)
    assert crop.shape == (16, 24, 3)
    # the box's top half is the top quadrants; mirrored, the right one comes first
    for rows, cols, colour in ((slice(0, 7), slice(0, 11), QUADRANTS[1]),
                               (slice(0, 7), slice(13, 24), QUADRANTS[0]),
                               (slice(9, 16), slice(0, 11), QUADRANTS[3]),
                               (slice(9, 16), slice(13, 24), QUADRANTS[2])):
        error = numpy.abs(crop[rows, cols] - colour).max()
        assert error <= TOLERANCE, f"rows {rows}, columns {cols}: {error} levels off {colour}"
    assert got["version"] == jpeg.LIBJPEG_TURBO_VERSION
    here = jpeg.decode((folder / "quadrants.jpg").read_bytes(), (24, 16), box=(24, 16, 72, 48),
                       flip=True)
    assert (crop == here).all()
    assert got["mode"] == "RGB" and (numpy.array(got["png"], numpy.uint8) == noise).all()


@pytest.fixture(scope="session")
def charliecloud_dir(engine, cpu_image):
    require_commands("ch-run")
    return image_build.charliecloud("cpu", "dir")


@pytest.fixture(scope="session")
def charliecloud_gpu_dir(engine, gpu_image):
    require_commands("ch-run")
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
