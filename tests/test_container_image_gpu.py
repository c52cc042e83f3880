"""The gpu image, built here from what a site without a registry reaches, checked without a GPU.

CUDA, cuDNN and NCCL come from NVIDIA's PyPI wheels; UCX and Open MPI are built CUDA-aware
from Debian 12's source packages. No GPU or driver is needed for these tests: the doctor
reads NCCL's and cuDNN's versions from the libraries, UCX's CUDA transport from its build,
and ranks exchange over ``pml ucx`` with UCX's host transports.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib

import pytest
from fixtures_docker import MNIST, _run, ch_run, check_decoders, docker_run

from containers.dockerd import DOCKER
from containers.versions import load, python_pins

from conftest import PYTHON, REPO

pytestmark = pytest.mark.docker

GPU_CHECKS = ("flavor", "mpi", "mpi-cuda", "ucx", "pmix", "nccl", "cupy", "cudnn", "mpi4py",
              "imports", "jpeg", "png", "versions")
# `pml ucx` on a host with neither an HCA nor a GPU (Open MPI 4.1 refuses it otherwise)
UCX_ANYWHERE = (("OMPI_MCA_pml", "ucx"), ("OMPI_MCA_pml_ucx_tls", "any"),
                ("OMPI_MCA_pml_ucx_devices", "any"),
                ("OMPI_MCA_opal_warn_on_missing_libcuda", "0"))


def _doctor(engine, tag, versions_text=None, tmp_path=None, extra=()):
    """``chainermn-rt doctor --image --json`` in ``tag``: (exit status, checks by name)."""
    if versions_text is not None:
        (tmp_path / "VERSIONS").write_text(versions_text)
        tmp_path.chmod(0o755)  # the image's user (uid 1000) reads it
        extra = (*extra, "-v", f"{tmp_path}:/check:ro", "-e",
                 "CHAINERMN_RT_VERSIONS=/check/VERSIONS")
    proc = docker_run(engine, tag, "chainermn-rt", "doctor", "--image", "--json", extra=extra,
                      check=False)
    return proc.returncode, {c["name"]: c for c in json.loads(proc.stdout)}


def test_doctor_passes_inside_the_gpu_image(engine, gpu_image):
    rc, checks = _doctor(engine, gpu_image)
    assert {n: c["status"] for n, c in checks.items()} == dict.fromkeys(GPU_CHECKS, "PASS"), checks
    assert rc == 0
    pins = python_pins(("gpu",))
    assert checks["mpi-cuda"]["reason"] == "mpi_built_with_cuda_support=true"
    assert "cuda (built; no GPU driver here)" in checks["ucx"]["reason"]
    assert "ib" in checks["ucx"]["reason"]
    assert checks["pmix"]["reason"] == f"PMIx {load()['debian']['pmix']}, Open MPI component ext3x"
    assert checks["nccl"]["reason"] == f"NCCL {pins['nvidia-nccl-cu12']} (read from libnccl.so.2)"
    cudnn = ".".join(pins["nvidia-cudnn-cu12"].split(".")[:3])
    assert checks["cudnn"]["reason"] == f"cuDNN {cudnn} (read from libcudnn.so.8)"
    assert checks["cupy"]["reason"].startswith(f"CuPy {pins['cupy-cuda12x']}, CUDA runtime 12.")
    assert "/opt/openmpi/lib/libmpi.so" in checks["mpi4py"]["reason"]
    assert checks["jpeg"]["reason"].startswith(
        "libjpeg-turbo 2.1.5 (/usr/lib/x86_64-linux-gnu/libjpeg.so.62")


def test_a_jpeg_and_a_png_decode_inside_the_gpu_image(engine, gpu_image, tmp_path):
    check_decoders(engine, gpu_image, tmp_path)


def test_make_image_doctor_exits_by_the_checks(engine, gpu_image, cpu_image):
    env = dict(os.environ, DOCKER_HOST=engine.host)
    for flavor in ("gpu", "cpu"):
        proc = subprocess.run([PYTHON, "-m", "containers.build", "doctor", "--flavor", flavor],
                              cwd=REPO, env=env, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "FAIL" not in proc.stdout and re.search(r"^PASS\s+versions", proc.stdout, re.M)


def test_the_gpu_checks_fail_against_the_cpu_image(engine, cpu_image, tmp_path):
    """The cpu image told it is the gpu one: every GPU check finds what is missing."""
    rc, checks = _doctor(engine, cpu_image, (REPO / "containers/gpu/VERSIONS").read_text(),
                         tmp_path)
    assert rc == 1
    failed = {n for n, c in checks.items() if c["status"] == "FAIL"}
    assert failed == {"mpi-cuda", "ucx", "nccl", "cupy", "cudnn", "versions"}, checks
    assert "not CUDA-aware" in checks["mpi-cuda"]["reason"]
    assert "libnccl.so.2 does not load" in checks["nccl"]["reason"]
    assert "libcudnn.so.8 does not load" in checks["cudnn"]["reason"]
    assert "ucx 1.13.1" in checks["versions"]["reason"] or "ucx ?" in checks["versions"]["reason"]


def test_gpu_checks_fail_when_the_image_disagrees_with_versions(engine, gpu_image, tmp_path):
    versions = tomllib.loads((REPO / "containers/gpu/VERSIONS").read_text())
    text = (REPO / "containers/gpu/VERSIONS").read_text()
    for section, name, wrong in (("system", "pmix", "9.9.9"),
                                 ("python", "nvidia-nccl-cu12", "2.1.1"),
                                 ("python", "nvidia-cudnn-cu12", "8.1.1.1"),
                                 ("system", "libjpeg-turbo", "9.9.8")):
        text = text.replace(f'{name} = "{versions[section][name]}"', f'{name} = "{wrong}"')
    # a broken chainermn on the path: the imports check sees it
    (tmp_path / "py").mkdir()
    (tmp_path / "py" / "chainermn.py").write_text("raise ImportError('provoked')\n")
    rc, checks = _doctor(engine, gpu_image, text, tmp_path,
                         extra=("-e", "PYTHONPATH=/check/py"))
    assert rc == 1
    failed = {n for n, c in checks.items() if c["status"] == "FAIL"}
    assert failed == {"pmix", "nccl", "cudnn", "imports", "jpeg", "versions"}, checks
    assert "(want 9.9.9)" in checks["pmix"]["reason"]
    assert "(want 2.1.1)" in checks["nccl"]["reason"]
    assert "(want 8.1.1.1)" in checks["cudnn"]["reason"]
    assert "libjpeg-turbo 2.1.5 (want 9.9.8)" in checks["jpeg"]["reason"]
    assert "provoked" in checks["imports"]["reason"]


# 4 doubles (eager) and 4 Mi doubles (32 MiB: rendezvous, where UCX's CMA would abort)
ALLREDUCE = ("from mpi4py import MPI; import numpy as np; c = MPI.COMM_WORLD; "
             "s = np.zeros(4); c.Allreduce(np.full(4, c.rank + 1.0), s); "
             "b = np.zeros(1 << 22); c.Allreduce(np.full(1 << 22, c.rank + 1.0), b); "
             "assert (b == 3.0).all(); "
             "print('rank', c.rank, 'of', c.size, 'sum', s.tolist(), "
             "MPI.Get_library_version().split(',')[0])")


def test_two_ranks_allreduce_over_pml_ucx(engine, gpu_image):
    env = [a for k, v in UCX_ANYWHERE for a in ("-e", f"{k}={v}")]
    proc = docker_run(engine, gpu_image, "mpirun", "-np", "2", "--mca", "pml_base_verbose",
                      "10", "python", "-c", ALLREDUCE, extra=env)
    sums = re.findall(r"rank (\d) of 2 sum \[3\.0, 3\.0, 3\.0, 3\.0\] Open MPI v4\.1\.4",
                      proc.stdout)
    assert sorted(sums) == ["0", "1"], proc.stdout + proc.stderr
    assert re.search(r"select: component ucx selected", proc.stdout + proc.stderr), proc.stderr


def test_no_compilers_stubs_sources_or_caches_in_the_gpu_image(engine, gpu_image):
    script = ("find /var/lib/apt/lists /var/cache/apt/archives -type f ! -name lock; "
              "ls -d /root/.cache /home/chainermn/.cache /tmp/wheels /tmp/src /tmp/cuda-wheels "
              "/opt/chainermn_rt/src /usr/local/cuda /usr/bin/gcc /usr/bin/cc /usr/bin/make "
              "/usr/include/stdio.h 2>/dev/null; "
              "find / -xdev \\( -name '*.whl' -o -name 'libcuda.so*' -o -name 'libnvidia-ml.so*' "
              "-o -name '*.dsc' \\) 2>/dev/null; true")
    out = docker_run(engine, gpu_image, "sh", "-c", script).stdout
    assert out.split() == [], out


def test_every_library_of_the_image_resolves_but_the_drivers(engine, gpu_image):
    """Only the host driver's libcuda/libnvidia-ml are left to the runtime (--nv and the like);
    nothing the image removed from the wheels is needed, and ssh is there for mpirun."""
    script = ("find /opt/ucx /opt/openmpi /opt/chainermn_rt/venv -name '*.so*' -type f "
              "-exec ldd {} + 2>/dev/null | grep 'not found' | sort -u")
    missing = {line.split()[0] for line in
               docker_run(engine, gpu_image, "sh", "-c", script).stdout.splitlines()}
    assert docker_run(engine, gpu_image, "sh", "-c", "command -v ssh").stdout.strip()
    # cuTENSOR is optional to CuPy (its binding fails to import, nothing else does); mpi4py's
    # mpich back-end links libmpi.so.12, which a site's MPICH bound in brings (the bind model)
    assert missing == {"libcuda.so.1", "libnvidia-ml.so.1", "libcutensor.so.2",
                       "libmpi.so.12"}, missing
    conf = docker_run(engine, gpu_image, "cat", "/etc/ld.so.conf.d/chainermn-rt.conf").stdout
    assert "/nvidia/cublas/lib" in conf and "/opt/ucx/lib" in conf and "stubs" not in conf


def test_gpu_image_runs_as_a_non_root_user_with_stack_labels(engine, gpu_image):
    info = json.loads(_run([DOCKER, "image", "inspect", gpu_image], env=engine.env()).stdout)[0]
    assert info["Config"]["User"] == "1000:1000"
    labels = info["Config"]["Labels"]
    assert labels["org.opencontainers.image.title"] == "chainermn-rt-gpu"
    assert labels["io.chainermn-rt.ucx"] == "1.13.1"
    assert labels["io.chainermn-rt.nvidia-nccl-cu12"] == python_pins(("gpu",))["nvidia-nccl-cu12"]
    assert docker_run(engine, gpu_image, "id", "-u").stdout.strip() == "1000"


@pytest.mark.slurm
def test_two_nodes_two_ranks_train_in_the_gpu_image_on_the_sandbox(sandbox, charliecloud_gpu_dir,
                                                                    tmp_path):
    """srun --mpi=pmix (the host's Slurm PMIx) starts each rank in ch-run, where the image's
    Open MPI (Debian's PMIx, pml ucx) takes over."""
    from chainermn_rt.job_request import Request
    from chainermn_rt.plan import make_plan
    from chainermn_rt.render import render
    from chainermn_rt.site import load_site

    site_text = (REPO / "slurm/sites/sandbox.toml").read_text()
    binds = [f"{REPO / 'examples'}:/mnt", str(sandbox.state_dir), str(tmp_path)]
    for path in binds[1:]:
        (charliecloud_gpu_dir / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    container = ('[container]\nruntime = "charliecloud"\n'
                 f'image = "{charliecloud_gpu_dir}"\nbinds = {json.dumps(binds)}')
    site = tmp_path / "sandbox-charliecloud-gpu.toml"
    site.write_text(site_text.replace('[container]\nruntime = "none"', container))
    plan = make_plan(load_site(site), Request(
        nodes=2, partition="cpu", job_name="ch-gpu-mnist", time="10",
        env=(("OMP_NUM_THREADS", "1"), ("USER", "root"), *UCX_ANYWHERE),
        # each rank proves it is in the gpu image and uses its UCX-backed Open MPI
        command=("sh", "-c", 'grep -q \'flavor = "gpu"\' /opt/chainermn_rt/VERSIONS && '
                 'test "$(command -v mpirun)" = /opt/openmpi/bin/mpirun && exec python "$@"',
                 "rank", "/mnt/" + MNIST[0], *MNIST[1:-1], str(tmp_path / "result"))))
    script = tmp_path / "job.sh"
    script.write_text(render(plan))
    assert "srun" in script.read_text() and "--mpi=pmix" in script.read_text()
    job = sandbox.slurm.submit(script, cwd=tmp_path)
    state = sandbox.slurm.wait(job, timeout=900, poll=0.5)
    out = next(tmp_path.glob(f"*-{job}.out"), None)
    text = out.read_text(errors="replace") if out else ""
    assert tuple(state) == ("COMPLETED", 0), f"job {job}: {state}\n{text[-3000:]}"
    digests = re.findall(r"rank (\d) parameters sha256 (\w+)", text)
    assert sorted(r for r, _ in digests) == ["0", "1", "2", "3"], text[-3000:]
    assert len({d for _, d in digests}) == 1, text[-3000:]


def test_gpu_image_passes_doctor_under_ch_run(charliecloud_gpu_dir):
    out = ch_run(charliecloud_gpu_dir, "chainermn-rt", "doctor", "--image").stdout
    for name in GPU_CHECKS:
        assert re.search(rf"^PASS\s+{name}\s", out, flags=re.MULTILINE), out
