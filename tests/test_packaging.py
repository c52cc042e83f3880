"""The wheel carries every package of chainermn_rt and slurm/ (templates, site profiles,
sandbox files): render works from it."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile

from conftest import REPO


def test_installed_wheel_renders_with_its_own_templates(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path), str(REPO)], check=True,
                   cwd=tmp_path)
    wheel = next(tmp_path.glob("chainermn_rt-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "chainermn_rt/slurm/templates/job.sh.j2" in names
    assert {f"chainermn_rt/slurm/sites/{s}.toml" for s in
            ("sandbox", "dgx-h100", "quad-gpu", "cpu-cluster")} <= set(names)
    target = tmp_path / "site-packages"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True)
    env = dict(os.environ, PYTHONPATH=str(target))
    proc = subprocess.run(
        [sys.executable, "-c", "import chainermn_rt.site as s, sys; print(s.data_dir()); "
         "sys.argv[1:] = ['render', '--site', 'quad-gpu', '--nodes', '2', '--', 'true']; "
         "from chainermn_rt.cli import main; sys.exit(main())"],
        env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(str(target))
    assert "#SBATCH --gpus-per-node=p100:4" in proc.stdout


def test_every_package_is_listed_for_the_wheel():
    """pyproject.toml names the packages one by one: a new folder of modules must be there."""
    listed = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(REPO).parts)
             for p in (REPO / "chainermn_rt").rglob("__init__.py")}
    assert found - set(listed["packages"]) == set()
