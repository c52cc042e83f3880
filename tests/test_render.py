"""Golden job scripts: the exact text rendered for each shipped profile and a few requests.

Regenerate on purpose only: ``REGEN_GOLDEN=1 pytest tests/test_render.py`` and review the diff.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.render import directive, render
from chainermn_rt.site import load_site

from conftest import REPO, require_commands

GOLDEN = REPO / "tests" / "golden"
TRAIN = ("python3", "train_imagenet.py", "--epoch", "90")
CASES = {
    "sandbox-2x2": ("sandbox", Request(nodes=2, gpus_per_node=2, python="/opt/venv/bin/python",
                                       command=("python3", "examples/train_mnist.py"))),
    "sandbox-cpu-mpirun": ("sandbox", Request(nodes=2, partition="cpu", launcher="mpirun",
                                              python="/opt/venv/bin/python", time="10",
                                              per_rank_logs=True, command=("hostname",))),
    "sandbox-charliecloud": ("sandbox", Request(
        nodes=2, gpus_per_node=2, runtime="charliecloud", image="/var/tmp/chainermn-rt_cpu",
        command=("python3", "/opt/chainermn_rt/examples/train_mnist.py"))),
    # the debian13 stack's profile: Slurm 24.11, the ranks in a SIF (its default image is the
    # checkout's build/images/chainermn-rt-cpu.sif: a path that differs per checkout)
    "sandbox-debian13-2x2": ("sandbox-debian13", Request(
        nodes=2, image="/var/tmp/chainermn-rt-cpu.sif",
        command=("python3", "/opt/chainermn_rt/examples/train_mnist.py"))),
    "sandbox-dgx-16x8": ("sandbox-dgx", Request(nodes=16, python="/opt/venv/bin/python",
                                                command=("python3", "examples/train_mnist.py"))),
    "dgx-h100-16": ("dgx-h100", Request(nodes=16, command=TRAIN, job_name="resnet50 16x8",
                                        env=(("NCCL_DEBUG", "WARN"),))),
    # pyxis on the sandbox: the ranks in a SquashFS through srun's --container-image, /tmp
    # mounted (its default image is the checkout's build/images/chainermn-rt-cpu.sqfs)
    "sandbox-pyxis-2x2": ("sandbox-pyxis", Request(
        nodes=2, image="/var/tmp/chainermn-rt-cpu.sqfs",
        command=("python3", "/tmp/chainermn-rt/examples/train_mnist.py"))),
    # a registry's image: one named container per job, which the stage copy step shares; the
    # stage's and the timeline's variables kept over the image's (--container-env)
    "sandbox-pyxis-stage-registry": ("sandbox-pyxis", Request(
        nodes=2, image="nvcr.io#nvidia/pytorch:24.01-py3", stage=("/tmp/shards",), timeline=True,
        command=("python3", "/tmp/chainermn-rt/examples/train_imagenet.py"))),
    "sandbox-pyxis-debian13-2x2": ("sandbox-pyxis-debian13", Request(
        nodes=2, image="/var/tmp/chainermn-rt-cpu.sqfs",
        command=("python3", "/tmp/chainermn-rt/examples/train_mnist.py"))),
    "dgx-h100-debug-2gpu": ("dgx-h100", Request(nodes=1, gpus_per_node=2, partition="debug",
                                                time="00:10:00", command=TRAIN)),
    "quad-gpu-32": ("quad-gpu", Request(nodes=32, command=TRAIN, account="chainer",
                                        memory="200G")),
    # the bind model: the host's Cray MPICH (cray_shasta), cxi, aws-ofi-nccl in Apptainer; the
    # host's Open MPI, efa and aws-ofi-nccl under pyxis
    "cray-ex-2": ("cray-ex", Request(nodes=2, command=TRAIN)),
    "aws-efa-2": ("aws-efa", Request(nodes=2, command=TRAIN)),
    "cpu-cluster-4": ("cpu-cluster", Request(nodes=4, ranks_per_node=1, time="1-00",
                                             command=("python3", "train_mnist.py"))),
    "sandbox-stage": ("sandbox", Request(
        nodes=2, gpus_per_node=2, python="/opt/venv/bin/python",
        stage=("/lustre/imagenet/shards/train", "/lustre/imagenet/shards/val"),
        command=("python3", "examples/train_imagenet.py", "--train",
                 "/lustre/imagenet/shards/train", "--val", "/lustre/imagenet/shards/val"))),
    "sandbox-stage-charliecloud-mpirun": ("sandbox", Request(
        nodes=2, partition="cpu", launcher="mpirun", runtime="charliecloud",
        image="/var/tmp/chainermn-rt_cpu", stage=("/data/shards",),
        command=("python3", "/opt/chainermn_rt/examples/train_mnist.py"))),
    "hostile": ("sandbox", Request(
        nodes=1, gpus_per_node=1, python="/opt/venv/bin/python",
        job_name="a \"quoted\" #name; $(id) `id` \\ é",
        env=(("MSG", "it's $(id) `id` ;\"x\""),),
        command=("printf", "%s\\n", "a b", "'", '"', ";", "$(id)", "`id`", "x\ny", "é ✓"))),
}


def _script(name: str) -> str:
    site, request = CASES[name]
    return render(make_plan(load_site(REPO / "slurm" / "sites" / f"{site}.toml"), request))


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    text, path = _script(name), GOLDEN / f"{name}.sh"
    if os.environ.get("REGEN_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"re-render {path.name} on purpose"


@pytest.mark.parametrize("name", sorted(CASES))
def test_shellcheck(name):
    require_commands("shellcheck")
    proc = subprocess.run(["shellcheck", "-s", "bash", "-"], input=_script(name), text=True,
                          capture_output=True)
    assert proc.returncode == 0, proc.stdout


def test_every_shipped_profile_has_a_golden():
    shipped = {p.stem for p in (REPO / "slurm" / "sites").glob("*.toml")}
    assert shipped <= {site for site, _ in CASES.values()}


def test_directive_quoting():
    assert directive("plain-name_1.x") == "plain-name_1.x"
    assert directive("two words") == '"two words"'
    assert directive('a"b#c\\d') == '"a\\"b\\#c\\\\d"'


def test_missing_template_value_is_an_error():
    import jinja2

    from chainermn_rt.render import environment

    with pytest.raises(jinja2.UndefinedError):
        environment().from_string("{{ plan.nope }}").render(plan=object())


def test_hostile_sbatch_table_values_never_run(tmp_path):
    """A profile's [sbatch] value stays on its #SBATCH line, quoted; the script runs nothing
    of it (a fake srun shows that the script ran to its end)."""
    import json

    hostile = "$(touch CANARY) `touch CANARY`; touch CANARY #x \"q\" 'y' \\ é"
    profile = tmp_path / "site.toml"
    profile.write_text((REPO / "slurm" / "sites" / "dgx-h100.toml").read_text().replace(
        'constraint = "ndr"\n', f'constraint = "ndr"\ncomment = {json.dumps(hostile)}\n'))
    script = tmp_path / "job.sh"
    script.write_text(render(make_plan(load_site(profile), Request(nodes=1, command=("x",)))))
    assert f"\n#SBATCH --comment={directive(hostile)}\n" in script.read_text()
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\ntouch ran\n")
    (fake / "srun").chmod(0o755)
    subprocess.run(["bash", str(script)], cwd=tmp_path, check=True,
                   env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"})
    assert (tmp_path / "ran").exists()
    assert not list(tmp_path.rglob("CANARY")) and not (REPO / "CANARY").exists()
