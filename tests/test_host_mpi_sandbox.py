"""The bind model on the Debian 12 sandbox: a site's MPICH (MPICH's own wheel, ch4:ofi over
libfabric's tcp provider, in build/mpich: ``make setup``) as the ranks' MPI, chosen by the
profile's ``[mpi]`` and started by Slurm's pmi2 plugin, through ``chainermn-rt submit --wait``:
one world, and MNIST trains on it. The same profile under ``--mpi=pmix`` is refused before
anything is submitted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fixtures_docker import charliecloud_site

from conftest import PYTHON, REPO, json_objects

pytestmark = pytest.mark.slurm
MPICH = REPO / "build" / "mpich" / "lib" / "libmpi.so.12"
BIND = (f'\n[mpi]\nmodel = "bind"\nfamily = "mpich"\nlibrary = "{MPICH}"\n'
        f'paths = ["{MPICH.parent}"]\n\n[fabric]\nkind = "ofi"\nprovider = "tcp"\n')


@pytest.fixture
def mpich_site(tmp_path):
    assert MPICH.is_file(), f"{MPICH} is missing: make setup installs MPICH's wheel there"
    text = (REPO / "slurm/sites/sandbox.toml").read_text()
    assert 'srun_mpi = "pmix"' in text
    path = tmp_path / "sandbox-mpich.toml"
    path.write_text(text.replace('srun_mpi = "pmix"', 'srun_mpi = "pmi2"') + BIND)
    return path


def _submit(sandbox, site, cwd, *command, name="mpich"):
    return subprocess.run([PYTHON, "-m", "chainermn_rt", "submit", "--site", str(site),
                           "--nodes", "2", "--gpus-per-node", "2", "--job-name", name, "--wait",
                           "--wait-timeout", "300", "--", PYTHON, *command],
                          cwd=cwd, env=sandbox.env(), capture_output=True, text=True,
                          timeout=400)


def test_the_sites_mpich_bare_metal_is_one_world_and_trains(sandbox, mpich_site, tmp_path):
    done = _submit(sandbox, mpich_site, tmp_path, str(REPO / "tests/programs/report_mpi.py"))
    job = re.search(r"submitted job (\d+)", done.stdout)
    log = (tmp_path / f"mpich-{job.group(1)}.out").read_text() if job else ""
    assert done.returncode == 0, done.stdout + done.stderr + log[-3000:]
    ranks = sorted(json_objects(log), key=lambda r: r["rank"])
    assert [(r["rank"], r["size"]) for r in ranks] == [(i, 4) for i in range(4)], log
    assert {r["mpi"] for r in ranks} == {"MPICH Version:      5.0.2"}, log
    assert {r["libmpi"] for r in ranks} == {str(MPICH)}, log
    assert sorted({r["host"] for r in ranks}) == ["node1", "node2"]
    done = _submit(sandbox, mpich_site, tmp_path, str(REPO / "examples/train_mnist.py"),
                   "--n-train", "2000", "--n-test", "200", "--unit", "50", "--iterations", "20",
                   "--log-every", "10", "--no-progress", "--out", str(tmp_path / "result"),
                   name="mnist")
    job = re.search(r"submitted job (\d+)", done.stdout)
    log = (tmp_path / f"mnist-{job.group(1)}.out").read_text() if job else ""
    assert done.returncode == 0, done.stdout + done.stderr + log[-3000:]
    digests = set(re.findall(r"^rank \d parameters sha256 (\w+)$", log, re.MULTILINE))
    assert len(digests) == 1 and len(json.loads((tmp_path / "result/log").read_text())) == 2


def test_mpich_under_pmix_is_refused_before_submitting(sandbox, mpich_site, tmp_path):
    site = tmp_path / "pmix.toml"
    site.write_text(mpich_site.read_text().replace('srun_mpi = "pmi2"', 'srun_mpi = "pmix"'))
    done = _submit(sandbox, site, tmp_path, "x.py")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("chainermn-rt submit: error: srun_mpi: pmix cannot start mpich's "
                           "ranks in one world (they would start as one-rank worlds); allowed "
                           "with mpi.family = \"mpich\": pmi2 | cray_shasta\n")


def _site_mpich(which: str, folder: Path) -> tuple[Path, str, str]:
    """A site's MPICH laid out in ``folder``: (the library the profile names, the file the
    ranks map, what MPI says it is). ``debian``: Debian 12's MPICH 4.0.2 (ch4:ucx) and the
    ``libmpi.so.12`` name mpi4py's mpich back-end links; ``wheel``: MPICH's wheel (ch4:ofi, its
    libfabric and UCX beside it)."""
    if which == "debian":
        folder.mkdir()
        shutil.copy2("/usr/lib/x86_64-linux-gnu/libmpich.so.12", folder / "libmpich.so.12")
        (folder / "libmpi.so.12").symlink_to("libmpich.so.12")
        return folder / "libmpi.so.12", str(folder / "libmpich.so.12"), "MPICH Version:\t4.0.2"
    shutil.copytree(MPICH.parent, folder, symlinks=True, ignore=shutil.ignore_patterns("python*"))
    return folder / "libmpi.so.12", str(folder / "libmpi.so.12"), "MPICH Version:      5.0.2"


@pytest.mark.docker  # the cpu image as a Charliecloud folder
@pytest.mark.parametrize("which", ["debian", "wheel"])
def test_a_sites_mpich_bound_into_the_cpu_image(sandbox, charliecloud_dir, tmp_path, which):
    """Issue 42's bind model in a container on the Debian 12 stack: a site's MPICH bound into
    the cpu image by ch-run, the image's mpi4py choosing it (MPI4PY_MPIABI), Slurm's pmi2
    plugin starting the ranks: one world of 4 over 2 nodes (Debian 12's MPICH, and MPICH's
    wheel over libfabric's tcp); then MNIST on Debian's."""
    library, mapped, version = _site_mpich(which, tmp_path / "site-mpich")
    shutil.copy2(REPO / "tests/programs/report_mpi.py", tmp_path / "report_mpi.py")
    site = charliecloud_site(sandbox, charliecloud_dir, tmp_path)  # binds tmp_path
    text = site.read_text()
    # UCX between processes of a user namespace (ch-run's), which may not look into each
    # other: shared memory by a file in /dev/shm, not through the peer's /proc/PID/fd
    # ("Shared memory error" at MPI_Init), and no cross-memory attach (process_vm_readv
    # refused in the first large Bcast)
    text = text.replace("[environment]\n", '[environment]\nUCX_POSIX_USE_PROC_LINK = "n"\n'
                        'UCX_TLS = "^cma"\n'
                        # MPICH's own shared-memory copy: the same process_vm_readv
                        + ('MPIR_CVAR_CH4_CMA_ENABLE = "0"\n' if which == "wheel" else ""))
    site.write_text(text.replace('srun_mpi = "pmix"', 'srun_mpi = "pmi2"')
                    + f'\n[mpi]\nmodel = "bind"\nfamily = "mpich"\n'
                    f'library = "{library}"\npaths = ["{library.parent}"]\n'
                    + ('\n[fabric]\nkind = "ofi"\nprovider = "tcp"\n' if which == "wheel"
                       else ""))
    env = {**sandbox.env(), "USER": "root"}  # ch-run wants $USER

    def submit(name, *command):
        done = subprocess.run([PYTHON, "-m", "chainermn_rt", "submit", "--site", str(site),
                               "--nodes", "2", "--gpus-per-node", "2", "--job-name", name,
                               "--wait", "--wait-timeout", "300", "--", "python3", *command],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=400)
        job = re.search(r"submitted job (\d+)", done.stdout)
        log = (tmp_path / f"{name}-{job.group(1)}.out").read_text() if job else ""
        assert done.returncode == 0, done.stdout + done.stderr + log[-3000:]
        return log

    log = submit("report", str(tmp_path / "report_mpi.py"))
    ranks = sorted(json_objects(log), key=lambda r: r["rank"])
    assert [(r["rank"], r["size"]) for r in ranks] == [(i, 4) for i in range(4)], log
    assert {(r["mpi"], r["libmpi"], r["os"]) for r in ranks} == {
        (version, mapped, "Debian GNU/Linux 12 (bookworm)")}, log
    if which == "wheel":
        return
    log = submit("mnist", "/mnt/train_mnist.py", "--n-train", "2000", "--n-test", "200",
                 "--unit", "50", "--iterations", "20", "--log-every", "10", "--no-progress",
                 "--out", str(tmp_path / "mnist-result"))
    digests = re.findall(r"^rank \d parameters sha256 (\w+)$", log, re.MULTILINE)
    assert len(digests) == 4 and len(set(digests)) == 1, log[-3000:]


@pytest.mark.parametrize("provider", ["tcp", "cxi"])
def test_the_doctor_names_the_library_and_the_missing_provider(sandbox, mpich_site, tmp_path,
                                                              provider):
    """The doctor's ranks on the bound MPICH report the library they loaded; a stated provider
    the nodes lack (Slingshot's cxi here) fails the fabric check in one line naming them."""
    site = tmp_path / f"doctor-{provider}.toml"
    site.write_text(mpich_site.read_text().replace('provider = "tcp"',
                                                   f'provider = "{provider}"'))
    done = subprocess.run([PYTHON, "-m", "chainermn_rt", "doctor", "--site", str(site),
                           "--nodes", "2", "--gpus-per-node", "2", "--json",
                           "--wait-timeout", "300"], cwd=tmp_path, env=sandbox.env(),
                          capture_output=True, text=True, timeout=400)
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["mpi-library"]["status"] == "PASS", done.stdout
    assert checks["mpi-library"]["reason"].startswith(
        f"every rank loaded {MPICH.resolve()} (MPICH Version:"), checks["mpi-library"]
    if provider == "tcp":
        assert (done.returncode, checks["fabric"]["status"]) == (0, "PASS"), done.stdout
    else:
        assert done.returncode == 1 and checks["fabric"]["status"] == "FAIL", done.stdout
        assert checks["fabric"]["reason"].startswith(
            "cxi expected, found on node1, node2 (ranks 0,1,2,3): "), checks["fabric"]
        assert checks["fabric"]["reason"].endswith(" (fi_info -l)")
