"""The cpu image as a SIF, made by `make sif`'s code with a real Apptainer (the Debian 13 root's
1.4.5 here) from the suite's cpu image, then run the ways the bundle runs it: the doctor inside
it, and the rank step exactly as a job script renders it, as root and as an unprivileged user.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fixtures_docker import _run, docker_run
from test_container_doctor import CPU_CHECKS

from chainermn_rt import sif
from chainermn_rt.plan import Request, make_plan
from chainermn_rt.rank_contract import SLOTS_VAR
from chainermn_rt.sandbox.root import Root, enter_argv, root_env, run_in_root
from chainermn_rt.site import load_site
from containers.dockerd import DOCKER

from conftest import PYTHON, REPO

pytestmark = pytest.mark.docker
# what Apptainer itself sets in every container (the rest comes from the image)
APPTAINER_OWN = ("APPTAINER_", "SINGULARITY_", "HOME", "LANG", "LD_LIBRARY_PATH", "PS1",
                 "PROMPT_COMMAND", "PWD", "OLDPWD", "TERM", "USER_PATH")


def _apptainer(root: Root, image: Path, *args: str, check=True) -> subprocess.CompletedProcess:
    proc = run_in_root(root, ["apptainer", *args], binds=[image.parent], capture_output=True,
                       text=True, timeout=300)
    if check and proc.returncode != 0:
        pytest.fail(f"apptainer {' '.join(args)} exited {proc.returncode}: {proc.stderr[-3000:]}",
                    pytrace=False)
    return proc


def _env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_the_sif_keeps_the_images_environment_labels_and_versions(engine, cpu_image, cpu_sif,
                                                                 debian13_root):
    info = json.loads(_run([DOCKER, "image", "inspect", cpu_image], env=engine.env()).stdout)[0]
    inspect = json.loads(_apptainer(debian13_root, cpu_sif, "inspect", "--json",
                                    str(cpu_sif)).stdout)
    labels = inspect["data"]["attributes"]["labels"]
    assert {k: labels.get(k) for k in info["Config"]["Labels"]} == info["Config"]["Labels"]
    assert sif.read_labels(cpu_sif) == labels and sif.flavor_of(labels) == "cpu"
    # the environment: every variable of the Docker image's, with its value; nothing else but
    # what each runtime sets itself
    in_docker = _env(docker_run(engine, cpu_image, "env").stdout)
    in_sif = _env(_apptainer(debian13_root, cpu_sif, "exec", "--cleanenv", str(cpu_sif),
                             "env").stdout)
    from_image = {k: v for k, v in in_docker.items() if k not in ("HOME", "HOSTNAME")}
    assert from_image.keys() == {e.split("=", 1)[0] for e in info["Config"]["Env"]}
    assert {k: in_sif.get(k) for k in from_image} == from_image
    assert [k for k in in_sif if k not in from_image and not k.startswith(APPTAINER_OWN)] == []
    out = _apptainer(debian13_root, cpu_sif, "exec", str(cpu_sif), "python", "-c",
                     "import mpi4py, chainermn_rt; print(mpi4py.__file__, chainermn_rt.__file__); "
                     "print(open('/opt/chainermn_rt/VERSIONS').read(), end='')").stdout
    paths, versions = out.split("\n", 1)
    assert all(p.startswith("/opt/chainermn_rt/venv/lib/") for p in paths.split()), paths
    assert versions == (REPO / "containers/cpu/VERSIONS").read_text()


def test_doctor_passes_inside_the_sif(cpu_sif):
    proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "doctor", "--image", str(cpu_sif),
                           "--flavor", "cpu", "--json"], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)}
    assert {n: c["status"] for n, c in checks.items()} == CPU_CHECKS
    assert checks["flavor"]["reason"] == "cpu (from /opt/chainermn_rt/VERSIONS)"


# The rank's command: what it sees of the job's environment, its binding and its image.
REPORT = """\
import json, os, sys
import chainermn_rt
print(json.dumps({
    "uid": os.getuid(), "cpus": sorted(os.sched_getaffinity(0)),
    "env": {k: os.environ.get(k) for k in sys.argv[1:]},
    "abort_hook": getattr(sys.modules.get("sitecustomize"), "__file__", None),
    "package": chainermn_rt.__file__, "versions": os.path.exists("/opt/chainermn_rt/VERSIONS"),
    "bound": os.path.exists("/mnt/train_mnist.py")}))
"""


@pytest.fixture(scope="module")
def fuse_node(tmp_path_factory) -> Path:
    """A 0666 copy of /dev/fuse for the unprivileged user's squashfuse (the host's is 0600)."""
    node = tmp_path_factory.mktemp("fuse") / "fuse"
    subprocess.run(["mknod", "-m", "0666", str(node), "c", "10", "229"], check=True)
    return node


@pytest.mark.parametrize("user", ["root", "chainermn"])
def test_the_rendered_rank_step_runs_in_the_sif(cpu_sif, debian13_root, fuse_node, tmp_path,
                                                user):
    """The job script's rank step (`apptainer exec --nv --bind ... IMAGE python3 -m chainermn_rt
    rank -- CMD`) as rendered, started as srun starts rank 1 of 2 on a node: the rank contract's
    environment reaches the command, the rank binds its slot's CPU, the bind is there. As root
    Apptainer mounts the SIF on a loop device, as a user with squashfuse."""
    site_file = tmp_path / "site.toml"
    site_file.write_text((REPO / "slurm/sites/sandbox.toml").read_text().replace(
        '[container]\nruntime = "none"',
        f'[container]\nruntime = "apptainer"\nimage = "{cpu_sif}"\n'
        f'binds = ["{REPO / "examples"}:/mnt:ro"]'))
    plan = make_plan(load_site(site_file), Request(nodes=1, partition="cpu", command=(
        "python", "-c", REPORT, SLOTS_VAR, "OMPI_MCA_btl", "SLURM_PROCID", "CHAINERMN_RT_VERBOSE")))
    argv = [*plan.container, *plan.rank_step, *plan.command]
    assert argv[:3] == ["apptainer", "exec", "--nv"]  # --nv on a host without a GPU
    srun = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0",
            "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_STEP_NUM_NODES": "1", "CHAINERMN_RT_VERBOSE": "1"}
    env = root_env({**dict(plan.environment), **srun})
    binds = [cpu_sif.parent, REPO / "examples"]
    if user != "root":
        argv = ["setpriv", "--reuid=1000", "--regid=1000", "--init-groups", *argv]
        env["HOME"] = "/home/chainermn"
        binds.append((fuse_node, "/dev/fuse"))
    proc = subprocess.run([*enter_argv(debian13_root, binds), *argv], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = proc.stdout.splitlines()
    assert said[0].startswith("rank 1/2 (local 1/2) on ") and said[0].endswith(": CPU, CPUs 1")
    got = json.loads(said[-1])
    assert got["uid"] == (0 if user == "root" else 1000)
    assert got["cpus"] == [1]  # slot 1 of the cpu partition's topology
    assert got["env"] == {SLOTS_VAR: dict(plan.environment)[SLOTS_VAR],
                          "OMPI_MCA_btl": "self,vader,tcp", "SLURM_PROCID": "1",
                          "CHAINERMN_RT_VERBOSE": "1"}
    assert got["versions"] and got["bound"]
    # the image's chainermn_rt, and its abort hook (the rank step's PYTHONPATH), not the host's
    assert got["package"].startswith("/opt/chainermn_rt/venv/")
    assert got["abort_hook"].startswith("/opt/chainermn_rt/venv/")
    assert got["abort_hook"].endswith("/abort_on_error/pythonpath/sitecustomize.py")
    assert "nvidia" not in proc.stderr.lower() and "--nv" not in proc.stderr
