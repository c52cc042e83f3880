"""``chainermn-rt install`` against hostile input: prefixes and images that would copy an image
into itself, open a FIFO or a device, read without bound, make folders outside the image, or
write text another program runs. Each is refused before anything is written (exit 2, one
line, the folder's contents unchanged); what is accepted is installed and loaded by the real
Lmod and Environment Modules with the values intact (tests/test_fuzz_quoting.py reads the
quoting back with each interpreter for any text)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest
from fixtures_install import LMOD_INIT, install
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chainermn_rt.errors import UserError
from chainermn_rt.files import tree_sha256
from chainermn_rt.install import installer
from chainermn_rt.site import load_site

from conftest import REPO, folder_contents

SANDBOX = REPO / "slurm/sites/sandbox.toml"
NEVER = ":{}[\\$"  # installer.PREFIX_NEVER, spelled here so that a change is seen


def charliecloud_profile(path: Path, binds: tuple[str, ...] = ("/lustre:/lustre",)) -> Path:
    text = SANDBOX.read_text().replace(
        '[container]\nruntime = "none"',
        f'[container]\nruntime = "charliecloud"\nbinds = {json.dumps(list(binds))}')
    path.write_text(text)
    return path


def fake_image(path: Path) -> Path:
    """A Charliecloud folder image as far as install looks: VERSIONS, a file, folders."""
    (path / "opt/chainermn_rt").mkdir(parents=True)
    (path / "opt/chainermn_rt/VERSIONS").write_text('flavor = "cpu"\n')
    (path / "etc").mkdir()
    (path / "etc/hosts").write_text("127.0.0.1 localhost\n")
    for folder in ("mnt", "run", "dev"):
        (path / folder).mkdir()
    return path


def _socket(path: Path) -> None:
    """A listening socket's file at ``path`` (bound from its folder: the name is short)."""
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        s = socket.socket(socket.AF_UNIX)
        s.bind(path.name)
        s.close()
    finally:
        os.chdir(here)


def _link(path: Path, target: str | Path) -> None:
    if path.exists():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.symlink_to(target)


# each: what to do to the image (tmp/img) and the profile, the arguments, the line
IMAGE_CASES = {
    "prefix inside the image": (None, ["--prefix", "{tmp}/img/sw"],
                                "--prefix: {tmp}/img/sw is inside the image {tmp}/img; allowed: "
                                "a folder outside the image (the image is copied under the "
                                "prefix)"),
    "a FIFO": (lambda t: os.mkfifo(t / "img/run/initctl"), [],
               "--image: {tmp}/img/run/initctl is a FIFO; allowed: an image of folders, files "
               "and links only (remove it from the image)"),
    "VERSIONS a FIFO": (lambda t: (os.unlink(t / "img/opt/chainermn_rt/VERSIONS"),
                                   os.mkfifo(t / "img/opt/chainermn_rt/VERSIONS")), [],
                        "--image: {tmp}/img/opt/chainermn_rt/VERSIONS is a FIFO; allowed:"),
    "a socket": (lambda t: _socket(t / "img/run/s"), [], "--image: {tmp}/img/run/s is a socket;"
                 " allowed: an image of folders, files and links only"),
    "a device": (lambda t: os.mknod(t / "img/dev/null", stat.S_IFCHR | 0o666,
                                    os.makedev(1, 3)), [],
                 "--image: {tmp}/img/dev/null is a device file; allowed:"),
    "VERSIONS a link to /dev/zero": (
        lambda t: _link(t / "img/opt/chainermn_rt/VERSIONS", "/dev/zero"), [],
        "--image: {tmp}/img has no readable /opt/chainermn_rt/VERSIONS (a symbolic link, not a "
        "file); allowed: an image made by `make image`"),
    "VERSIONS too large": (
        lambda t: (t / "img/opt/chainermn_rt/VERSIONS").write_text("#" * 70_000), [],
        "--image: {tmp}/img has no readable /opt/chainermn_rt/VERSIONS (larger than 65536 "
        "bytes); allowed:"),
    "VERSIONS through a link": (
        lambda t: (shutil.move(t / "img/opt", t / "host-opt"), _link(t / "img/opt",
                                                                      t / "host-opt")), [],
        "--image: {tmp}/img has no readable /opt/chainermn_rt/VERSIONS (/opt is a symbolic "
        "link); allowed:"),
    "a bind target through a link": (
        lambda t: ((t / "outside").mkdir(), _link(t / "img/mnt", t / "outside"),
                   charliecloud_profile(t / "ch.toml", ("/lustre:/mnt/data",))), [],
        "{tmp}/ch.toml: container.binds: /lustre:/mnt/data: its target goes through /mnt, a "
        "symbolic link in the image {tmp}/img; allowed: targets whose folders in the image are "
        "real folders"),
    "a bind target below a file": (
        lambda t: charliecloud_profile(t / "ch.toml", ("/x:/etc/hosts/y",)), [],
        "{tmp}/ch.toml: container.binds: /x:/etc/hosts/y: its target goes through /etc/hosts, a"
        " file in the image {tmp}/img; allowed:"),
    "a bind target with ..": (
        lambda t: charliecloud_profile(t / "ch.toml", ("/lustre:/../../escape",)), [],
        "{tmp}/ch.toml: container.binds: /lustre:/../../escape: its target holds '..'; allowed:"
        " a target path without '..'"),
    "an image name that is not UTF-8": (
        lambda t: shutil.move(t / "img", t / "img\udcff"), ["--image", "{tmp}/img\udcff"],
        "--image: '{tmp}/img\\xff' is not UTF-8; allowed: a UTF-8 path"),
}
PREFIX_CASES = {
    "a newline": ("{tmp}/a\nb", "--prefix: '{tmp}/a\\nb' contains a control character; "
                                "allowed: a printable path"),
    "a brace": ("{tmp}/a{{b", "--prefix: {tmp}/a{{b contains {{; allowed: a path without : {{ }} "
                              "[ \\ $ (':' separates PATH's entries; Environment Modules reads "
                              "the others in MODULEPATH as patterns and variables)"),
    "a colon and a dollar": ("{tmp}/a:$b", "--prefix: {tmp}/a:$b contains $ :; allowed:"),
    "a byte that is not UTF-8": ("{tmp}/a\udcffb", "--prefix: '{tmp}/a\\xffb' is not UTF-8; "
                                                   "allowed: a UTF-8 path"),
    "a letter beyond ASCII": ("{tmp}/café", "--prefix: '{tmp}/café' holds characters beyond "
                                            "ASCII; allowed: an ASCII path (Lmod 8.6 garbles"),
    "/proc": ("/proc/x/sw", "--prefix: /proc/x/sw: cannot make a folder in /proc ("),
}


@pytest.mark.parametrize("case", IMAGE_CASES)
def test_a_hostile_image_is_refused_before_anything_is_written(wheels, tmp_path, case):
    tmp = tmp_path
    fake_image(tmp / "img")
    site = charliecloud_profile(tmp / "ch.toml")
    change, args, line = IMAGE_CASES[case]
    if change:
        change(tmp)
    args = [a.format(tmp=tmp) for a in args]
    args = (["--image", str(tmp / "img")] if "--image" not in args else []) + args
    args += ["--prefix", str(tmp / "sw")] if "--prefix" not in args else []
    before = folder_contents(tmp)
    proc = install(wheels, "--site", str(site), *args, cwd=tmp)
    assert proc.returncode == 2 and proc.stderr.startswith(
        "chainermn-rt install: error: " + line.format(tmp=tmp)), proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert folder_contents(tmp) == before


@pytest.mark.parametrize("case", PREFIX_CASES)
def test_a_hostile_prefix_is_refused_before_anything_is_written(wheels, tmp_path, case):
    prefix, line = (text.format(tmp=tmp_path) for text in PREFIX_CASES[case])
    before = folder_contents(tmp_path)
    proc = install(wheels, "--site", str(SANDBOX), "--prefix", prefix, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith(
        "chainermn-rt install: error: " + line), proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert folder_contents(tmp_path) == before


def test_the_characters_a_prefix_never_holds_are_the_installers():
    assert installer.PREFIX_NEVER == NEVER


# -- image contents, generated ------------------------------------------------------------------
KINDS = ("file", "folder", "link in", "link out", "fifo")
names = st.binary(min_size=1, max_size=6).filter(lambda b: b"/" not in b and b"\0" not in b
                                                  and b not in (b".", b".."))


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 25)), deadline=None,
          derandomize=os.environ.get("FUZZ_RANDOM") != "1",
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(KINDS), names), max_size=6, unique_by=lambda e: e[1]))
def test_any_image_folder_is_copied_exactly_or_refused_naming_what_it_holds(tmp_path, entries):
    """Names that are not UTF-8, links out of the image, FIFOs (never opened): check_image
    refuses a FIFO, naming it; else the copy's sha256 is the source's."""
    top = Path(tempfile.mkdtemp(dir=tmp_path))
    image = fake_image(top / "img")
    for kind, raw in entries:
        path = image / "mnt" / os.fsdecode(raw)
        if kind == "file":
            path.write_bytes(raw)
        elif kind == "folder":
            path.mkdir()
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to("../etc/hosts" if kind == "link in" else top)
    fifos = [image / "mnt" / os.fsdecode(raw) for kind, raw in entries if kind == "fifo"]
    try:
        installer.check_image("charliecloud", image)
    except UserError as err:
        assert fifos and "\n" not in str(err)
        assert any(str(err).startswith(f"--image: {installer.shown(str(f))} is a FIFO")
                   for f in fifos), str(err)
        return
    assert not fifos
    shutil.copytree(image, top / "copy", symlinks=True)
    assert tree_sha256(top / "copy") == tree_sha256(image)


# -- accepted hostile names, through the real module systems ------------------------------------
PREFIX = "sw]] \"q\" 's #;`(x)&|~%*?!^=,@ end"  # all install lets a prefix hold, and more
IMAGE = "img]] {$HOME} [exit 3] \\ \"q\" 's é\U0001f600 ;`x`"
PROFILE = "ch\n[environment]\nLD_PRELOAD = \"x.so\"\n.toml"  # named in site.toml's header


@pytest.fixture(scope="module")
def hostile(wheels, tmp_path_factory):
    """An install for Charliecloud with hostile prefix and image names; a stub ``ch-run``
    prints the argv the ``python3`` wrapper hands it (NUL after each word)."""
    tmp = tmp_path_factory.mktemp("hostile")
    image = fake_image(tmp / IMAGE)
    prefix = tmp / PREFIX
    proc = install(wheels, "--site", str(charliecloud_profile(tmp / PROFILE)), "--image",
                   str(image), "--prefix", str(prefix))
    assert proc.returncode == 0, proc.stderr
    stubs = tmp / "stubs"
    stubs.mkdir()
    (stubs / "ch-run").write_text("#!/bin/sh\nprintf '%s\\0' \"$@\"\n")
    (stubs / "ch-run").chmod(0o755)
    return {"tmp": tmp, "image": image, "prefix": prefix, "stubs": stubs,
            "home": prefix / "chainermn-rt/0.1.0-cpu"}


# `module` is a function each preamble defines; paths come in the environment, never the text
MODULE_CHECKS = """
before=$PATH
module load chainermn-rt/0.1.0-cpu
printf 'site=%s\\n' "$CHAINERMN_RT_SITE"
printf 'python3=%s\\n' "$(command -v python3)"
python3 -c 'x y' | tr '\\0' '\\n' | sed 's/^/argv: /'
chainermn-rt --version
module help chainermn-rt/0.1.0-cpu > help.out 2>&1
module unload chainermn-rt
[ "$PATH" = "$before" ] && echo "PATH restored"
printf 'site=%s\\n' "${CHAINERMN_RT_SITE-unset}"
"""


def _expected(h: dict) -> list[str]:
    copy = h["home"] / "image" / IMAGE
    return [f"site={h['home']}/site.toml", f"python3={h['home']}/bin/python3",
            *[f"argv: {w}" for w in ("--set-env", "-b", "/lustre:/lustre", str(copy), "--",
                                     "python3", "-c", "x y")],
            "chainermn-rt 0.1.0", "PATH restored", "site=unset"]


def _shell(h: dict, preamble: str, env: dict[str, str]) -> tuple[list[str], str]:
    work = Path(tempfile.mkdtemp(dir=h["tmp"]))
    proc = subprocess.run(["bash", "-c", preamble + MODULE_CHECKS], cwd=work, env={
        "HOME": str(work), "PATH": f"{h['stubs']}:/usr/bin:/bin", **env},
        capture_output=True, timeout=300)
    return proc.stdout.decode().splitlines(), (work / "help.out").read_bytes().decode()


def test_lmod_loads_runs_and_unloads_a_hostile_install(hostile):
    if not LMOD_INIT.exists():
        pytest.fail(f"{LMOD_INIT} missing: Debian's lmod (run `make setup`)", pytrace=False)
    lines, help_text = _shell(hostile, f'source {LMOD_INIT}; module use "$MP"',
                              {"MP": str(hostile["prefix"] / "modulefiles")})
    assert lines == _expected(hostile), lines
    assert f"python3 (in the image {hostile['image']}) on PATH;" in help_text, help_text
    assert f"--prefix {hostile['prefix']}); `module load" in help_text, help_text


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_environment_modules_loads_runs_and_unloads_a_hostile_install(hostile, modulecmd,
                                                                      locale):
    preamble = f'module() {{ eval "$(tclsh {modulecmd} bash "$@")"; }}'
    lines, help_text = _shell(hostile, preamble, {
        "MODULEPATH": str(hostile["prefix"] / "modulefiles-tcl"), "LANG": locale,
        "LC_ALL": locale})
    assert lines == _expected(hostile), lines
    assert f"python3 (in the image {hostile['image']}) on PATH;" in help_text, help_text


def test_the_installed_profile_and_manifest_name_the_copy(hostile):
    copy = hostile["home"] / "image" / IMAGE
    assert load_site(hostile["home"] / "site.toml").container.image == str(copy)
    manifest = json.loads((hostile["home"] / "MANIFEST.json").read_text())
    assert (manifest["image"]["source"], manifest["image"]["path"]) == (str(hostile["image"]),
                                                                        str(copy))
    assert manifest["image"]["sha256"] == tree_sha256(copy)
    text = (hostile["home"] / "site.toml").read_text()
    assert text.splitlines()[0] == (
        f"# Installed by `chainermn-rt install` from {hostile['tmp']}/ch\\n[environment]\\n"
        f"LD_PRELOAD = \"x.so\"\\n.toml; container.image is this install's copy of "
        f"{str(hostile['image']).replace(chr(92), chr(92) * 2)}.")  # a backslash doubled
    want = tomllib.loads((hostile["tmp"] / PROFILE).read_text())
    want["container"]["image"] = str(copy)
    assert tomllib.loads(text) == want  # no key or table added
    assert subprocess.run(["sh", "-n", str(hostile["home"] / "bin/python3")]).returncode == 0
