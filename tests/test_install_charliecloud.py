"""The cpu image installed for Charliecloud: copied read-only with its sha256, and its
``python3`` wrapper starting 4 ranks under ``srun -N2 --mpi=pmix`` on the sandbox."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from fixtures_docker import charliecloud_site
from fixtures_install import install

from chainermn_rt.files import tree_sha256
from chainermn_rt.site import load_site
from chainermn_rt.slurm_client import Slurm
from chainermn_rt.submission import Cluster

pytestmark = [pytest.mark.docker, pytest.mark.slurm]

ALLGATHER = ("from mpi4py import MPI; import os; c = MPI.COMM_WORLD; "
             "print('rank', c.rank, 'of', c.size, 'in image', "
             "os.path.exists('/opt/chainermn_rt/VERSIONS'), c.allgather(c.rank))")


def test_the_installed_image_runs_ranks_through_its_python3(sandbox, charliecloud_dir, wheels,
                                                            tmp_path):
    site = charliecloud_site(sandbox, charliecloud_dir, tmp_path)
    prefix = tmp_path / "sw"
    proc = install(wheels, "--site", str(site), "--image", str(charliecloud_dir), "--prefix",
                   str(prefix))
    assert proc.returncode == 0, proc.stderr
    home = prefix / "chainermn-rt/0.1.0-cpu"
    copy = home / "image" / charliecloud_dir.name
    manifest = json.loads((home / "MANIFEST.json").read_text())
    assert manifest["image"]["sha256"] == tree_sha256(copy) == tree_sha256(charliecloud_dir)
    assert not [p for p in copy.rglob("*") if not p.is_symlink() and p.stat().st_mode & 0o222]
    assert f'image = "{copy}"' in (home / "site.toml").read_text()
    # ch-run wants $USER, which a login has and this test's environment may lack
    cluster = Cluster(load_site(site), Slurm(env={**sandbox.env(), "USER": "root"}))
    script = tmp_path / "ranks.sh"
    ranks = shlex.join(["srun", "--mpi=pmix", str(home / "bin/python3"), "-c", ALLGATHER])
    script.write_text("#!/bin/sh\n#SBATCH -N2 --ntasks-per-node=2 -p cpu -t 5\n"
                      f"#SBATCH --output={tmp_path}/ranks-%j.out\nexec {ranks}\n")
    job, state, _, text = cluster.run(script, started="rank ", timeout=300)
    lines = sorted(re.findall(r"^rank \d of 4 in image True \[0, 1, 2, 3\]$", text, re.M))
    assert (state, lines) == (("COMPLETED", 0), [f"rank {r} of 4 in image True [0, 1, 2, 3]"
                                                  for r in range(4)]), f"job {job}:\n{text}"
