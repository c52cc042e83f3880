"""``chainermn-rt install`` with runtime none, and its module files under the real module
systems: Debian's Lmod, and Environment Modules 5.2 (its Debian package conflicts with Lmod's:
it runs here from ``apt-get download`` + ``dpkg -x`` as ``tclsh modulecmd.tcl bash``).
tests/test_install_charliecloud.py installs the cpu image for Charliecloud and runs ranks
through its ``python3`` under srun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_install import LMOD_INIT, install

from chainermn_rt.install import wrappers
from chainermn_rt.runtimes import Container
from chainermn_rt.site import load_site

from conftest import REPO, folder_contents, require_commands

SANDBOX = REPO / "slurm/sites/sandbox.toml"


@pytest.fixture(scope="module")
def prefix(wheels, tmp_path_factory):
    """Two versions of one install (runtime none): 0.1.0-cpu and 0.1.0-gpu."""
    where = tmp_path_factory.mktemp("prefix") / "sw"
    for flavor in ("cpu", "gpu"):
        proc = install(wheels, "--site", str(SANDBOX), "--prefix", str(where), "--flavor", flavor)
        assert proc.returncode == 0, proc.stderr
    return where


def test_the_layout_and_its_manifest(prefix):
    home = prefix / "chainermn-rt/0.1.0-cpu"
    assert sorted(p.name for p in home.iterdir()) == ["MANIFEST.json", "bin", "site.toml", "venv"]
    assert sorted(p.name for p in (home / "bin").iterdir()) == ["chainermn-rt", "python",
                                                                "python3"]
    manifest = json.loads((home / "MANIFEST.json").read_text())
    assert (manifest["version"], manifest["flavor"], manifest["runtime"]) == ("0.1.0", "cpu",
                                                                             "none")
    assert load_site(home / "site.toml") == load_site(SANDBOX).__class__(
        **{**load_site(SANDBOX).__dict__, "path": home / "site.toml"})
    assert (prefix / "modulefiles/chainermn-rt/0.1.0-cpu.lua").is_file()
    assert (prefix / "modulefiles-tcl/chainermn-rt/0.1.0-cpu").is_file()
    assert not list(prefix.glob(".chainermn-rt-install-*"))  # the stage is gone


def _shell(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/bin:/bin", **env}
    return subprocess.run(["bash", "-c", script], env=clean, capture_output=True, text=True,
                          timeout=300)


# the same checks under both module systems: `module` is a function the preamble defines
CHECKS = """
before=$PATH
module avail > avail.out 2>&1
module load chainermn-rt/0.1.0-cpu
echo "site=$CHAINERMN_RT_SITE"
chainermn-rt --version
python3 -c 'import chainermn_rt; print("import", chainermn_rt.__file__)'
module load chainermn-rt/0.1.0-gpu; echo "second load: $?"
echo "site=$CHAINERMN_RT_SITE"
module unload chainermn-rt
[ "$PATH" = "$before" ] && echo "PATH restored"
echo "site=${CHAINERMN_RT_SITE-unset}"
"""


def _expected(prefix: Path, second_load: int, then: str) -> list[str]:
    """CHECKS' lines: the second load's status, and the version loaded after it."""
    home = prefix / "chainermn-rt"
    python = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return [f"site={home}/0.1.0-cpu/site.toml", "chainermn-rt 0.1.0",
            f"import {home}/0.1.0-cpu/venv/lib/{python}/site-packages/chainermn_rt/__init__.py",
            f"second load: {second_load}", f"site={home}/{then}/site.toml", "PATH restored",
            "site=unset"]


def test_lmod_loads_swaps_and_unloads(prefix, tmp_path):
    if not LMOD_INIT.exists():
        pytest.fail(f"{LMOD_INIT} missing: Debian's lmod (run `make setup`)", pytrace=False)
    proc = _shell(f"cd {tmp_path}; source {LMOD_INIT}; module use {prefix / 'modulefiles'}"
                  + CHECKS, {})
    assert proc.stdout.splitlines() == _expected(prefix, 0, "0.1.0-gpu"), \
        proc.stdout + proc.stderr
    assert "reloaded with a version change" in proc.stderr
    avail = (tmp_path / "avail.out").read_text()
    assert "chainermn-rt/0.1.0-cpu" in avail and "warn" not in avail.lower(), avail


def test_environment_modules_loads_refuses_a_second_version_and_unloads(prefix, modulecmd,
                                                                        tmp_path):
    preamble = (f"cd {tmp_path}; module() {{ eval \"$(tclsh {modulecmd} bash \"$@\")\"; }}")
    proc = _shell(preamble + CHECKS, {"MODULEPATH": str(prefix / "modulefiles-tcl")})
    assert proc.stdout.splitlines() == _expected(prefix, 1, "0.1.0-cpu"), \
        proc.stdout + proc.stderr
    assert 'HINT: Might try "module unload chainermn-rt" first.' in proc.stderr
    avail = (tmp_path / "avail.out").read_text()
    assert "chainermn-rt/0.1.0-gpu" in avail and "warn" not in avail.lower(), avail


def test_the_module_sets_the_default_site_of_render(prefix, tmp_path):
    env = {"CHAINERMN_RT_SITE": str(prefix / "chainermn-rt/0.1.0-cpu/site.toml")}
    proc = _shell(f"{prefix}/chainermn-rt/0.1.0-cpu/bin/chainermn-rt render --nodes 1 -- true",
                  env)
    assert proc.returncode == 0 and "for site sandbox" in proc.stdout, proc.stderr


def test_wrappers_for_each_runtime_pass_shellcheck():
    require_commands("shellcheck")
    texts = {runtime: wrappers.python(Container(runtime, binds=("/lustre:/lustre",),
                                                flags=("--cleanenv",) if runtime != "none"
                                                else ()),
                                      "/sw/chainermn-rt/0.1.0-gpu/image/x", "/sw/venv",
                                      "0.1.0-gpu")
             for runtime in ("none", "charliecloud", "apptainer", "singularity", "pyxis")}
    assert texts["pyxis"] is None
    assert texts["apptainer"].splitlines()[-1] == (
        "exec apptainer exec --nv --bind /lustre:/lustre --cleanenv "
        '/sw/chainermn-rt/0.1.0-gpu/image/x python3 "$@"')
    assert texts["charliecloud"].splitlines()[-1] == (
        "exec ch-run --set-env -b /lustre:/lustre --cleanenv /sw/chainermn-rt/0.1.0-gpu/image/x "
        '-- python3 "$@"')
    for text in [t for t in texts.values() if t] + [wrappers.chainermn_rt("/sw/venv", "v")]:
        proc = subprocess.run(["shellcheck", "-s", "sh", "-"], input=text, text=True,
                              capture_output=True)
        assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("args, line", [
    (["--site", "{tmp}/no.toml"], "--site: {tmp}/no.toml: no such file or directory; allowed:"),
    (["--site", "{tmp}/bad.toml"], "{tmp}/bad.toml: topology: missing; allowed: [topology.NAME]"
     " tables"),
    (["--site", str(SANDBOX), "--image", "{tmp}/img.sif"],
     "--image: {tmp}/img.sif: the profile's runtime is none, which runs no image; allowed: no "
     "--image, or a profile with a container runtime"),
    (["--site", "{tmp}/ch.toml", "--image", "{tmp}/img.sif"],
     "--image: {tmp}/img.sif is not what runtime charliecloud runs; allowed: a Charliecloud "
     "image folder (python -m containers.build chdir)"),
    (["--site", "{tmp}/ch.toml", "--image", "{tmp}/missing"],
     "--image: {tmp}/missing is missing or unreadable; allowed: a Charliecloud image folder"),
    (["--site", "{tmp}/ch.toml"],
     "--image: missing; allowed: a Charliecloud image folder (python -m containers.build "
     "chdir), for the profile's runtime charliecloud"),
    (["--site", "{tmp}/ap.toml", "--image", "{tmp}/imgdir"],
     "--image: {tmp}/imgdir is not what runtime apptainer runs; allowed: a .sif file"),
    (["--site", "{tmp}/ap.toml", "--image", "{tmp}/img.sif"],
     "--image: {tmp}/img.sif is not a SIF file (no SIF magic at byte 32); allowed: a .sif file "
     "(make sif)"),
    (["--site", str(SANDBOX), "--prefix", "{tmp}/file/sw"],
     "--prefix: {tmp}/file/sw: {tmp}/file is not a writable folder; allowed:"),
    (["--site", str(SANDBOX), "--python", "/bin/false"],
     "--python: /bin/false (no answer); allowed: Python >= 3.11, for the host's chainermn-rt"),
    (["--site", str(SANDBOX), "--wheels", "{tmp}"],
     "--wheels: {tmp} lacks chainermn_rt, jinja2, markupsafe; allowed: the folder `make "
     "install-wheels` fills"),
    (["--site", str(SANDBOX), "--prefix", "{tmp}/done"],
     "--prefix: chainermn-rt 0.1.0-cpu is already installed there ({tmp}/done/chainermn-rt/"
     "0.1.0-cpu); allowed: another prefix, or remove that version"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(wheels, tmp_path, args, line):
    tmp = tmp_path
    (tmp / "bad.toml").write_text('name = "x"\n')
    site = SANDBOX.read_text()
    for name, runtime in (("ch", "charliecloud"), ("ap", "apptainer")):
        (tmp / f"{name}.toml").write_text(site.replace('[container]\nruntime = "none"',
                                                       f'[container]\nruntime = "{runtime}"'))
    (tmp / "img.sif").write_text("sif")
    (tmp / "imgdir").mkdir()
    (tmp / "file").write_text("")
    (tmp / "done/chainermn-rt/0.1.0-cpu").mkdir(parents=True)
    args = [a.format(tmp=tmp) for a in args]
    if "--prefix" not in args:
        args += ["--prefix", str(tmp / "sw")]
    before = folder_contents(tmp)
    proc = install(wheels, *args, cwd=tmp)
    assert proc.returncode == 2 and proc.stderr.startswith(
        "chainermn-rt install: error: " + line.format(tmp=tmp)), proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert folder_contents(tmp) == before


def test_a_failing_venv_step_leaves_nothing_under_the_prefix(wheels, tmp_path):
    """Wheels for another Python: pip fails after the stage was filled; the stage goes."""
    other = tmp_path / "wheels"
    shutil.copytree(wheels, other)
    for whl in other.glob("markupsafe-*.whl"):
        whl.rename(whl.with_name(whl.name.replace("cp3", "cp2")))  # cp211: no Python has it
    proc = install(other, "--site", str(SANDBOX), "--prefix", str(tmp_path / "sw"))
    assert proc.returncode == 2 and proc.stderr.startswith(
        "chainermn-rt install: error: --wheels: "), proc.stderr
    assert list((tmp_path / "sw").iterdir()) == []


def test_every_package_of_chainermn_rt_goes_into_the_wheel(prefix):
    """pyproject's explicit package list: a sub-package left out is missing from the wheel
    (and from every install): here, the installed command's own install sub-command."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"])
    found = {".".join(p.parent.relative_to(REPO).parts)
             for p in (REPO / "chainermn_rt").rglob("__init__.py")}
    assert found - listed == set()
    proc = _shell(f"{prefix}/chainermn-rt/0.1.0-cpu/bin/chainermn-rt install --help", {})
    assert proc.returncode == 0, proc.stderr
