"""The cpu image built for real by this checkout's dockerd, then checked from inside and run.

Builds from a debootstrapped base (no registry), runs the in-image doctor, a 2-rank
MNIST training with mpirun inside the container, and the same image converted for
Charliecloud under ch-run, and under srun on the Slurm sandbox.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import tarfile
import tomllib
from pathlib import Path

import pytest
from fixtures_docker import MNIST, _run, ch_run, charliecloud_site, check_decoders, docker_run

from chainermn_rt.submission import Cluster
from containers import build as image_build
from containers.dockerd import DOCKER
from containers.versions import load, python_pins

from conftest import REPO

pytestmark = pytest.mark.docker
STARTED = " ranks, communicator "  # the MNIST programs' first line once MPI has started


def test_doctor_passes_inside_the_image(engine, cpu_image):
    out = docker_run(engine, cpu_image, "chainermn-rt", "doctor", "--image").stdout
    lines = {line.split()[1]: line.split()[0] for line in out.splitlines()}
    assert lines == {"flavor": "PASS", "mpi": "PASS", "mpi-cuda": "n/a", "ucx": "n/a",
                     "pmix": "PASS", "nccl": "n/a", "cupy": "n/a", "cudnn": "n/a",
                     "mpi4py": "PASS", "imports": "PASS", "jpeg": "PASS", "png": "PASS",
                     "versions": "PASS"}, out
    assert "/usr/lib/x86_64-linux-gnu/libmpi.so" in out  # mpi4py uses Debian's Open MPI
    assert "libjpeg-turbo 2.1.5 (/usr/lib/x86_64-linux-gnu/libjpeg.so.62" in out  # Debian's


def test_a_jpeg_and_a_png_decode_inside_the_image(engine, cpu_image, tmp_path):
    check_decoders(engine, cpu_image, tmp_path)


def test_the_jpeg_check_fails_without_the_runtime_library(engine, cpu_image):
    """The decoder loads the runtime stage's libjpeg62-turbo: without it the doctor says so."""
    proc = docker_run(engine, cpu_image, "sh", "-c", "rm /usr/lib/*/libjpeg.so.62* && "
                      "exec chainermn-rt doctor --image --json", extra=("--user", "0"),
                      check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)}
    assert {n for n, c in checks.items() if c["status"] == "FAIL"} == {"jpeg"}, checks
    assert "libjpeg.so.62: cannot open shared object file" in checks["jpeg"]["reason"]


def test_doctor_fails_when_the_image_disagrees_with_versions(engine, cpu_image, tmp_path):
    versions = tomllib.loads((REPO / "containers/cpu/VERSIONS").read_text())
    text = (REPO / "containers/cpu/VERSIONS").read_text().replace(
        f'openmpi = "{versions["system"]["openmpi"]}"', 'openmpi = "9.9.9"').replace(
        f'libjpeg-turbo = "{versions["system"]["libjpeg-turbo"]}"', 'libjpeg-turbo = "9.9.8"')
    (tmp_path / "VERSIONS").write_text(text)
    tmp_path.chmod(0o755)  # the image's user (uid 1000) reads it
    proc = docker_run(engine, cpu_image, "chainermn-rt", "doctor", "--image", "--json",
                      extra=("-v", f"{tmp_path}:/check:ro", "-e",
                             "CHAINERMN_RT_VERSIONS=/check/VERSIONS"), check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)}
    assert checks["versions"]["status"] == "FAIL"
    assert "openmpi 4.1.4 (want 9.9.9)" in checks["versions"]["reason"]
    assert checks["jpeg"]["status"] == "FAIL"
    assert checks["jpeg"]["reason"].startswith("libjpeg-turbo 2.1.5 (want 9.9.8), /usr/lib/")


def test_two_ranks_train_mnist_inside_the_image(engine, cpu_image):
    proc = docker_run(engine, cpu_image, "mpirun", "-np", "2", "python", "/examples/" + MNIST[0],
                      *MNIST[1:], extra=("-v", f"{REPO / 'examples'}:/examples:ro"))
    digests = re.findall(r"rank (\d) parameters sha256 (\w+)", proc.stdout)
    assert sorted(r for r, _ in digests) == ["0", "1"], proc.stdout
    assert len({d for _, d in digests}) == 1, proc.stdout  # both ranks hold the same model


def test_image_runs_as_a_non_root_user_with_stack_labels(engine, cpu_image):
    info = json.loads(_run([DOCKER, "image", "inspect", cpu_image], env=engine.env()).stdout)[0]
    assert info["Config"]["User"] == "1000:1000"
    labels = info["Config"]["Labels"]
    assert load()["debian"]["openmpi"].startswith(labels["io.chainermn-rt.openmpi"] + "-")
    assert labels["org.opencontainers.image.title"] == "chainermn-rt-cpu"
    assert labels["io.chainermn-rt.chainer"] == "7.8.1"
    assert labels["io.chainermn-rt.mpi4py"] == python_pins()["mpi4py"]
    assert docker_run(engine, cpu_image, "id", "-u").stdout.strip() == "1000"


def test_no_build_caches_or_sources_are_left(engine, cpu_image):
    script = ("find /var/lib/apt/lists /var/cache/apt/archives -type f ! -name lock; "
              "ls -d /root/.cache /home/chainermn/.cache /tmp/wheels /opt/chainermn_rt/src "
              "/usr/bin/gcc /usr/include/jpeglib.h 2>/dev/null; "
              "find / -xdev -name '*.whl' 2>/dev/null; true")
    out = docker_run(engine, cpu_image, "sh", "-c", script).stdout
    assert out.split() == [], out


def test_no_world_writable_files_under_the_application_paths(engine, cpu_image):
    """Nobody but the image's owner may change its Python, its code or the user's home."""
    prefix = load()["image"]["prefix"]
    script = (f"find {prefix} /home -xdev -perm -0002 ! -type l 2>/dev/null; "
              f"test -d {prefix}/venv && echo venv-present")
    out = docker_run(engine, cpu_image, "sh", "-c", script).stdout
    assert out.split() == ["venv-present"], out


def _host_only_certificates() -> list[str]:
    """Base64 bodies of the host bundle's certificates that public bundles lack (a proxy's CA)."""
    from pip._vendor import certifi

    def blocks(text: str) -> set[str]:
        return set(re.findall(r"-----BEGIN CERTIFICATE-----\n(.*?)-----END CERTIFICATE-----",
                              text, flags=re.DOTALL))

    host = blocks(image_build.HOST_CA.read_text())
    public = blocks(Path(certifi.where()).read_text())
    return sorted(host - public)


def _ca_findings(engine, tag, tmp_path) -> tuple[list[str], int]:
    """(files of image ``tag`` that hold the host CA bundle or a host-only CA, files read)."""
    bundle_sha = hashlib.sha256(image_build.HOST_CA.read_bytes()).hexdigest()
    host_only = _host_only_certificates()
    # a host-only CA is found as PEM text (its first base64 line) or as DER bytes
    needles = [b.split()[0].encode() for b in host_only]
    needles += [base64.b64decode(b)[:64] for b in host_only]
    saved = tmp_path / "image.tar"
    _run([DOCKER, "save", "-o", str(saved), tag], env=engine.env())
    found, scanned = [], 0
    with tarfile.open(saved) as image:
        for member in image.getmembers():
            if not member.name.endswith("layer.tar"):
                continue
            with tarfile.open(fileobj=image.extractfile(member)) as layer:
                for entry in layer:
                    if "run/secrets" in entry.name:
                        found.append(entry.name)
                    if not entry.isfile():
                        continue
                    data = layer.extractfile(entry).read()
                    scanned += 1
                    if (hashlib.sha256(data).hexdigest() == bundle_sha
                            or any(needle in data for needle in needles)):
                        found.append(entry.name)
    saved.unlink()
    return found, scanned


def test_the_build_hosts_ca_bundle_is_in_no_layer(engine, cpu_image, tmp_path):
    if not image_build.HOST_CA.exists():
        pytest.fail(f"{image_build.HOST_CA} missing: nothing to check", pytrace=False)
    found, scanned = _ca_findings(engine, cpu_image, tmp_path)
    assert found == [] and scanned > 1000, found  # and it really read the image
    # the same scan finds the bundle once a layer does hold it
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "ca.crt").write_bytes(image_build.HOST_CA.read_bytes())
    (tmp_path / "ctx" / "Dockerfile").write_text(f"FROM {cpu_image}\nCOPY ca.crt /home/x.crt\n")
    _run([DOCKER, "build", "-q", "-t", "chainermn-rt:leaky", str(tmp_path / "ctx")],
         env=engine.env())
    try:
        assert "home/x.crt" in _ca_findings(engine, "chainermn-rt:leaky", tmp_path)[0]
    finally:
        _run([DOCKER, "image", "rm", "chainermn-rt:leaky"], env=engine.env(), check=False)


def test_charliecloud_image_passes_doctor(charliecloud_dir):
    out = ch_run(charliecloud_dir, "chainermn-rt", "doctor", "--image").stdout
    assert re.search(r"^PASS\s+versions", out, flags=re.MULTILINE), out
    assert re.search(r"^PASS\s+mpi4py", out, flags=re.MULTILINE), out


def test_two_ranks_train_mnist_under_ch_run(charliecloud_dir):
    proc = ch_run(charliecloud_dir, "mpirun", "-np", "2", "--oversubscribe", "python",
                  "/mnt/" + MNIST[0], *MNIST[1:])
    digests = re.findall(r"rank (\d) parameters sha256 (\w+)", proc.stdout)
    assert sorted(r for r, _ in digests) == ["0", "1"] and len({d for _, d in digests}) == 1


@pytest.mark.slurm
def test_two_nodes_two_ranks_train_in_charliecloud_on_the_sandbox(sandbox, charliecloud_dir,
                                                                   tmp_path):
    """A job rendered with the charliecloud runtime: srun --mpi=pmix starts every rank in ch-run."""
    from chainermn_rt.job_request import Request
    from chainermn_rt.plan import make_plan
    from chainermn_rt.render import render
    from chainermn_rt.site import load_site

    site = charliecloud_site(sandbox, charliecloud_dir, tmp_path)
    plan = make_plan(load_site(site), Request(
        nodes=2, partition="cpu", job_name="ch-mnist", time="10",
        env=(("OMP_NUM_THREADS", "1"), ("USER", "root")),
        # each rank proves it is inside the image (only it has VERSIONS) before it trains
        command=("sh", "-c", 'test -f /opt/chainermn_rt/VERSIONS && exec python "$@"', "rank",
                 "/mnt/" + MNIST[0], *MNIST[1:-1], str(tmp_path / "result"))))
    assert "ch-run --set-env" in render(plan)
    cluster = Cluster(load_site(site), sandbox.slurm)
    job, state, _, text = cluster.run(tmp_path / "job.sh", plan, started=STARTED, timeout=600)
    assert tuple(state) == ("COMPLETED", 0), f"job {job}: {state}\n{text[-3000:]}"
    digests = re.findall(r"rank (\d) parameters sha256 (\w+)", text)
    assert sorted(r for r, _ in digests) == ["0", "1", "2", "3"], text[-3000:]
    assert len({d for _, d in digests}) == 1, text[-3000:]


@pytest.mark.slurm
def test_two_nodes_two_ranks_train_resnet50_on_jpegs_in_charliecloud_on_the_sandbox(
        sandbox, charliecloud_dir, tmp_path):
    """ImageNet's layout inside the cpu image: a class-folder tree of JPEGs decoded by the
    image's libjpeg-turbo, 4 ranks on 2 nodes, every validation image counted once."""
    from chainermn_rt.data.writers import synthetic
    from chainermn_rt.job_request import Request
    from chainermn_rt.plan import make_plan
    from chainermn_rt.site import load_site

    sizes = [(w // 5, h // 5) for w, h in synthetic.SIZES]
    synthetic.tree(tmp_path / "train", classes=3, per_class=4, sizes=sizes)
    synthetic.tree(tmp_path / "val", classes=3, per_class=2, sizes=sizes, first=100)
    site = charliecloud_site(sandbox, charliecloud_dir, tmp_path)
    plan = make_plan(load_site(site), Request(
        nodes=2, partition="cpu", job_name="ch-imagenet", time="10",
        env=(("OMP_NUM_THREADS", "1"), ("USER", "root")),
        command=("sh", "-c", 'test -f /opt/chainermn_rt/VERSIONS && exec python "$@"', "rank",
                 "/mnt/train_imagenet.py", "--train", str(tmp_path / "train"), "--val",
                 str(tmp_path / "val"), "--n-class", "3", "--insize", "32", "--val-resize",
                 "36", "--batchsize", "2", "--iterations", "2", "--log-every", "2",
                 "--workers", "0", "--no-progress", "--out", str(tmp_path / "result"))))
    cluster = Cluster(load_site(site), sandbox.slurm)
    job, state, _, text = cluster.run(tmp_path / "job.sh", plan, started=STARTED, timeout=900)
    assert tuple(state) == ("COMPLETED", 0), f"job {job}: {state}\n{text[-3000:]}"
    digests = re.findall(r"rank (\d) parameters sha256 (\w+)", text)
    assert sorted(r for r, _ in digests) == ["0", "1", "2", "3"], text[-3000:]
    assert len({d for _, d in digests}) == 1, text[-3000:]
    log = json.loads((tmp_path / "result" / "log").read_text())
    assert [e["validation/images"] for e in log] == [6]


@pytest.mark.slurm
def test_in_charliecloud_a_failing_rank_ends_the_job_and_the_time_limit_requeues_exactly(
        sandbox, charliecloud_dir, tmp_path):
    """Across the container boundary: a rank's exception aborts the job; the batch shell on the
    host traps the time-limit signal, rank 0 inside the image sees its stop file, the ranks
    snapshot, the host requeues, and the job ends bit-identical to an uninterrupted one."""
    from chainermn_rt.job_request import Request
    from chainermn_rt.plan import make_plan
    from chainermn_rt.site import load_site

    site = load_site(charliecloud_site(sandbox, charliecloud_dir, tmp_path, str(REPO / "tests"),
                                      str(REPO / "examples")))
    env = (("OMP_NUM_THREADS", "1"), ("USER", "root"))
    mnist = ["python", str(REPO / "tests" / "programs" / "resumable_mnist.py"), "--n-train",
             "4000", "--n-test", "400", "--unit", "100", "--batchsize", "50", "--iterations",
             "120", "--snapshot-every", "20", "--log-every", "20", "--no-progress"]
    # each job: (command, time limit, what its ranks print once MPI has started)
    jobs = {"fail": (["python", str(REPO / "tests" / "programs" / "fail_rank.py")], "5",
                     ": first allreduce "),
            "reference": ([*mnist, "--out", str(tmp_path / "reference")], "5", STARTED),
            "limit": ([*mnist, "--out", str(tmp_path / "limit"), "--slow-from", "41"], "2",
                      STARTED)}
    logs, cluster = {}, Cluster(site, sandbox.slurm)
    for name, (command, time_limit, started) in jobs.items():
        plan = make_plan(site, Request(nodes=2, partition="cpu", job_name=name, time=time_limit,
                                       env=env, command=tuple(command)))
        _, state, _, logs[name] = cluster.run(tmp_path / f"{name}.sh", plan, started=started,
                                              timeout=600)
        assert state.state == ("FAILED" if name == "fail" else "COMPLETED"), \
            f"{name}: {state}\n{logs[name][-3000:]}"
    assert re.search(r"chainermn-rt: rank 1 on node\d failed: RuntimeError: rank 1 fails on "
                     r"purpose; aborting the job", logs["fail"]), logs["fail"][-3000:]
    for line in ("SIGUSR2: asking the ranks for a snapshot", "written on the job's request",
                 "requeueing job", "chainermn-rt: resuming from"):
        assert line in logs["limit"], f"{line!r} missing:\n{logs['limit'][-3000:]}"
    digest = re.compile(r"^rank 0 parameters sha256 (\w+)$", re.MULTILINE)
    assert digest.findall(logs["limit"]) == digest.findall(logs["reference"]) != []
