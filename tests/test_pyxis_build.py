"""enroot and pyxis built from their release tars (chainermn_rt/sandbox/pyxis_build.py): from
the folder CI gives (``make setup SOURCES=../shared/sources``), checked against the pins of
containers/versions.toml, nothing installed when a sum is wrong, a second setup a no-op. Each
build here goes to a folder of the test's own (about 3 s on 2 cores)."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from chainermn_rt.errors import EnvironmentProblem, UserError
from chainermn_rt.files import sha256_file
from chainermn_rt.sandbox import pyxis_build

from conftest import PYTHON, REPO, require_commands

# the release tars: where CI keeps them beside the checkout (shared/sources/README.md), else
# where `make setup` kept them on this machine (a newcomer's clone anywhere)
SOURCES = (Path(os.environ["CHAINERMN_RT_SOURCES"]) if os.environ.get("CHAINERMN_RT_SOURCES")
           else None)


@pytest.fixture(scope="module")
def sources() -> Path:
    pins = pyxis_build.load_pins()
    candidates = [SOURCES] if SOURCES else [REPO.parent / "shared" / "sources",
                                            pyxis_build.source_cache()]
    found = next((c for c in candidates
                  if all((c / p.tar_name).is_file() for p in pins.values())), None)
    if found is None:
        pytest.fail(f"no folder of {', '.join(p.tar_name for p in pins.values())} in "
                    f"{', '.join(map(str, candidates))} (run `make setup`, or set "
                    "CHAINERMN_RT_SOURCES to the folder of the release tars)", pytrace=False)
    require_commands("make", "cc")
    return found


@pytest.fixture(scope="module")
def built(sources, tmp_path_factory) -> pyxis_build.Tools:
    return pyxis_build.ensure(sources, cache=tmp_path_factory.mktemp("tools"))


def test_the_release_tars_match_the_pins(sources):
    for pin in pyxis_build.load_pins().values():
        assert sha256_file(sources / pin.tar_name) == pin.tar_sha256, pin.name


def test_the_build_is_the_pinned_releases_against_the_hosts_slurm(built):
    pins = pyxis_build.load_pins()
    said = subprocess.run([str(built.enroot), "version"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert said == pins["enroot"].version == "4.1.2"
    assert pins["pyxis"].version.encode() in built.plugin.read_bytes()
    # the SPANK plugin's own record of the Slurm it was built for: the host's 22.05
    number = int.from_bytes(_symbol(built.plugin, "plugin_version", 4), "little")
    release = pyxis_build.slurm_release()
    assert release.startswith("22.05.")
    assert f"{number >> 16}.{(number >> 8) & 0xff:02d}" == release.rsplit(".", 1)[0]
    stamp = built.stamp()
    assert stamp["slurm"] == release and stamp["stack"] == "debian12"
    assert {n: p["tar_sha256"] for n, p in stamp["pins"].items()} == \
        {n: p.tar_sha256 for n, p in pins.items()}
    # enroot's optional hooks are there for a site (or the sandbox) to enable
    assert (built.extra_hooks / "50-slurm-pmi.sh").is_file()
    assert sorted(p.name for p in built.folder.parent.iterdir()) == \
        [".lock", f"build-{built.folder.name}.log", built.folder.name]


def _symbol(path: Path, name: str, size: int) -> bytes:
    """The bytes of a shared object's symbol, found by readelf (the plugin cannot be loaded
    outside slurmd: it needs Slurm's spank_* functions)."""
    require_commands("readelf")
    syms = subprocess.run(["readelf", "-Ws", "--dyn-syms", str(path)], capture_output=True,
                          text=True, check=True).stdout
    value, section = next((int(f[1], 16), int(f[6])) for f in map(str.split, syms.splitlines())
                          if len(f) >= 8 and f[7].split("@")[0] == name)
    heads = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True,
                           check=True).stdout
    row = re.search(rf"\[\s*{section}\]\s+\S+\s+\S+\s+([0-9a-f]+) ([0-9a-f]+)", heads)
    address, offset = int(row.group(1), 16), int(row.group(2), 16)
    with open(path, "rb") as f:
        f.seek(value - address + offset)
        return f.read(size)


def test_a_second_setup_is_a_no_op(built, sources, tmp_path):
    before = {p: p.stat().st_mtime_ns for p in built.folder.parent.rglob("*")}
    env = {**os.environ, pyxis_build.CACHE_VAR: str(built.folder.parent)}
    proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "sandbox", "pyxis", "--sources",
                           str(sources)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"{built.folder}\n", "")
    assert {p: p.stat().st_mtime_ns for p in built.folder.parent.rglob("*")} == before


def _wrong(sources: Path, folder: Path) -> Path:
    """``sources`` with pyxis's tar one byte longer."""
    folder.mkdir()
    for name in os.listdir(sources):
        shutil.copy(sources / name, folder / name)
    pin = pyxis_build.load_pins()["pyxis"]
    (folder / pin.tar_name).chmod(0o644)
    with open(folder / pin.tar_name, "ab") as f:
        f.write(b"\0")
    return folder


def test_a_wrong_sum_is_one_line_naming_both_and_nothing_is_installed(sources, tmp_path):
    bad = _wrong(sources, tmp_path / "sources")
    cache = tmp_path / "tools"
    pin = pyxis_build.load_pins()["pyxis"]
    got = sha256_file(bad / pin.tar_name)
    env = {**os.environ, pyxis_build.CACHE_VAR: str(cache)}
    proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "sandbox", "pyxis", "--sources",
                           str(bad)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=60)
    assert proc.returncode == UserError.exit_status and proc.stdout == ""
    assert proc.stderr == (f"chainermn-rt sandbox: error: --sources: {bad / pin.tar_name}: sha256 "
                           f"{got}, pinned {pin.tar_sha256} (containers/versions.toml [pyxis] "
                           "tar_sha256)\n")
    assert [p.name for p in cache.iterdir()] == [".lock"]  # no build, no install


def test_a_download_is_checked_too(sources, tmp_path, monkeypatch):
    """The release URLs cannot be reached from here: a file:// URL of the same .tar.gz stands
    for GitHub's; one whose tar differs is refused naming the URL and both sums."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-cache"))
    pins = pyxis_build.load_pins()
    bad = _wrong(sources, tmp_path / "sources")
    local = {}
    for name, pin in pins.items():
        gz = tmp_path / f"{name}.tar.gz"
        with open(bad / pin.tar_name, "rb") as f, gzip.open(gz, "wb") as out:
            shutil.copyfileobj(f, out)
        local[name] = replace(pin, url=gz.as_uri())
    with pytest.raises(EnvironmentProblem) as err:
        pyxis_build.ensure(None, cache=tmp_path / "tools", pins=local)
    got = sha256_file(bad / pins["pyxis"].tar_name)
    assert str(err.value) == (f"{local['pyxis'].url}: sha256 of its tar {got}, pinned "
                              f"{pins['pyxis'].tar_sha256} (containers/versions.toml [pyxis] "
                              "tar_sha256)")
    assert [p.name for p in (tmp_path / "tools").iterdir()] == [".lock"]
    unreachable = {**local, "enroot": replace(pins["enroot"], url=(tmp_path / "no").as_uri())}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-cache-2"))  # enroot's was kept
    with pytest.raises(EnvironmentProblem, match=r"^cannot download file://.*/no \("):
        pyxis_build.ensure(None, cache=tmp_path / "tools", pins=unreachable)


def test_a_failed_build_leaves_nothing_but_its_log(sources, tmp_path, monkeypatch):
    monkeypatch.setattr(pyxis_build, "ENROOT_MAKE", ("FORCE_GLIBC=1", "CC=no-such-cc"))
    with pytest.raises(EnvironmentProblem, match=r"^enroot and pyxis cannot be built: enroot's "
                                                 r"make all exited 2 \(.*\); see .*\.log$"):
        pyxis_build.ensure(sources, cache=tmp_path / "tools")
    names = sorted(p.name for p in (tmp_path / "tools").iterdir())
    assert len(names) == 2 and names[0] == ".lock" and names[1].startswith("build-debian12-")


def test_the_sandbox_names_the_command_when_nothing_is_built(tmp_path, monkeypatch):
    monkeypatch.setenv(pyxis_build.CACHE_VAR, str(tmp_path))
    with pytest.raises(EnvironmentProblem, match=r"^enroot and pyxis are not built for the "
                                                 r"debian12 stack \(.*\); run `make setup`"):
        pyxis_build.find()


def test_tars_checked_once_are_kept_for_the_next_build_on_this_machine(sources, tmp_path,
                                                                      monkeypatch):
    """A fresh clone's `make setup` without SOURCES finds what an earlier setup verified: no
    download (the URL here leads nowhere)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    pin = pyxis_build.load_pins()["pyxis"]
    (tmp_path / "a").mkdir()
    pyxis_build.fetch(pin, sources, tmp_path / "a")
    kept = pyxis_build.source_cache() / pin.tar_name
    assert sha256_file(kept) == pin.tar_sha256
    (tmp_path / "b").mkdir()
    nowhere = replace(pin, url=(tmp_path / "no").as_uri())
    assert sha256_file(pyxis_build.fetch(nowhere, None, tmp_path / "b")) == pin.tar_sha256
    kept.write_bytes(b"damaged")  # a cache whose bytes changed is not used: downloaded again
    with pytest.raises(EnvironmentProblem, match=r"^cannot download "):
        pyxis_build.fetch(nowhere, None, tmp_path / "b")
