"""The folders Slurm's PMIx plugin hands a step's ranks are inside their Apptainer container:
the profile's ``slurm_tmpfs`` and ``slurmd_spool_dir`` (Slurm's defaults where it is silent)
become binds, up to their part that names the node, unless Apptainer or a bind of the profile
already holds them. The jobs themselves run in tests/test_jobs_debian13.py, whose sandbox lives
outside /tmp."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.site import load_site

from conftest import REPO

QUAD = REPO / "slurm/sites/quad-gpu.toml"  # apptainer, srun --mpi=pmix, binds /scratch


def _binds(**fields) -> list[str]:
    site = replace(load_site(QUAD), **fields)
    argv = make_plan(site, Request(nodes=1, command=("x",))).container
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]


@pytest.mark.parametrize("fields, added", [
    ({}, []),  # Slurm's default TmpFS, /tmp, is Apptainer's own
    ({"slurm_tmpfs": "/local/%n/tmp", "slurmd_spool_dir": "/var/spool/slurm/%n"}, ["/local"]),
    ({"slurm_tmpfs": "/var/tmp/slurm"}, []),
    ({"slurm_tmpfs": "/scratch/tmp/%n"}, []),  # a bind of the profile holds it
    ({"slurm_tmpfs": "/%n"}, []),  # never / itself
])
def test_the_pmix_folders_are_bound_where_the_container_would_not_see_them(fields, added):
    assert _binds(**fields) == ["/scratch", "/datasets:/datasets:ro", *added]


def test_not_for_mpirun_nor_another_pmi():
    site = load_site(QUAD)
    site = replace(site, slurm_tmpfs="/local/%n")
    assert "/local" in make_plan(site, Request(nodes=1, command=("x",))).container
    for changed in (replace(site, launcher="mpirun"), replace(site, srun_mpi="pmi2")):
        argv = make_plan(changed, Request(nodes=1, command=("x",))).container
        assert "/local" not in argv


@pytest.mark.parametrize("key, bad", [("slurm_tmpfs", "tmp"), ("slurmd_spool_dir", "/a b"),
                                      ("slurm_tmpfs", "/$TMP")])
def test_a_profile_folder_slurm_could_not_hold_is_one_line(tmp_path, key, bad):
    path = tmp_path / "p.toml"
    path.write_text(f'{key} = "{bad}"\n' + QUAD.read_text())
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "site", "check", str(path)],
                          capture_output=True, text=True)
    assert (proc.returncode, proc.stderr) == (
        2, f"chainermn-rt site: error: {path}: {key}: {bad!r} is not allowed; allowed: an "
        "absolute path as slurm.conf writes it (%n and %h for the node's name and host), "
        "without spaces, ',', ':' or '$'\n")
