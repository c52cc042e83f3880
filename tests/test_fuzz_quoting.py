"""Every writer of a file another program reads, fed hostile text, read back by that program:
Lua 5.3 (Lmod's), tclsh 8.6 (Environment Modules'), Python's ``ast``, ``tomllib``, ``sh``.
Each value comes back exactly, no statement, key or table is added, and a comment stays one
comment; or the value is refused with a UserError naming the field (text that is not UTF-8
where the file is UTF-8 text, a NUL in a shell word). tests/test_install_hostile.py loads
installs with hostile prefixes and image names through the real Lmod and Environment Modules.
"""

from __future__ import annotations

import ast
import math
import os
import re
import subprocess
import tempfile
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from chainermn_rt import quoting, runtimes
from chainermn_rt.errors import UserError
from chainermn_rt.install import installer, modulefiles, wrappers
from chainermn_rt.install.layout import Layout
from chainermn_rt.rank_contract import Slot
from chainermn_rt.reframe.config import config_text, configuration
from chainermn_rt.runtimes import Container
from chainermn_rt.site import load_site
from chainermn_rt.site_init.profile import Facts, PartitionFacts, TopologyFacts, profile_text

from conftest import REPO, require_commands

# CI: a few dozen fixed cases each (one interpreter run per case). To search further:
# FUZZ_EXAMPLES=2000 FUZZ_RANDOM=1 pytest tests/test_fuzz_quoting.py
SOME = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 40)), deadline=None,
                derandomize=os.environ.get("FUZZ_RANDOM") != "1",
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])

# what ends a string, a comment or a line in one of the languages, or runs something
PIECES = ["]]", "[[", "]=]", "[=[", "--[[", '"', "'", "\\", "{", "}", "$", "[", "]", "$(",
          "`", ";", "#", "\n", "\r", "\0", "\t", "\x1b", "\x7f", "\x85", "\u2028", "\ufeff",
          "é", "\U0001f600", " ", "\\\n", "\\u0041", "\\x41", "\\065", "%s", "[exit 3]",
          "\n[environment]\nLD_PRELOAD = \"x\"\n", "\nimport os\n", "\nos.exit(3)\n"]
hostile = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)),
                   max_size=10).map("".join)
# a path's bytes that are not UTF-8 come to Python as surrogates
not_utf8 = st.binary(min_size=1, max_size=6).map(lambda b: b.decode("utf-8", "surrogateescape"))
any_text = st.one_of(hostile, st.tuples(hostile, not_utf8, hostile).map("".join))


def utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def refused(call, *args) -> str:
    """The UserError's message of ``call(*args)``: one line."""
    with pytest.raises(UserError) as err:
        call(*args)
    assert "\n" not in str(err.value)
    return str(err.value)


# -- Lua (Lmod's Lua 5.3) -----------------------------------------------------------------------
def lua_values(literals: list[str], prelude: str = "") -> list[bytes]:
    """What Lua 5.3 reads from each literal, as bytes (each written as LENGTH:BYTES)."""
    require_commands("lua5.3")
    script = prelude + "".join(f"local s = {lit}\nio.write(#s, ':', s)\n" for lit in literals)
    out = subprocess.run(["lua5.3", "-"], input=script.encode(), capture_output=True,
                         check=True).stdout
    values = []
    while out:
        size, _, out = out.partition(b":")
        values.append(out[:int(size)])
        out = out[int(size):]
    return values


@SOME
@given(st.lists(any_text, min_size=1, max_size=6), hostile)
@example(["a]]b\n]=]", "\udcff\udc80é", "\0\r\n", ""], "x\n]]\n--[[")
def test_lua_reads_back_every_string_and_comment(values, note):
    prelude = f"-- note {quoting.comment(note)}\n"  # a comment that stays one
    literals = [quoting.lua(v) for v in values]
    assert lua_values(literals, prelude) == [v.encode("utf-8", "surrogateescape")
                                             for v in values]


def test_lua_refuses_a_surrogate_no_byte_stands_for():
    assert refused(quoting.lua, "a\ud800", "--prefix").startswith("--prefix: 'a\\ud800' is "
                                                                  "not UTF-8 text")


# -- Tcl (Environment Modules' tclsh 8.6) -------------------------------------------------------
def tclsh(script: str, locale: str = "C.UTF-8") -> subprocess.CompletedProcess:
    """tclsh running ``script`` from a file, as modulecmd.tcl sources a module file (from
    stdin tclsh is a shell that reports an error and goes on)."""
    require_commands("tclsh")
    with tempfile.NamedTemporaryFile("wb", suffix=".tcl") as f:
        f.write(script.encode())
        f.flush()
        return subprocess.run(["tclsh", f.name], capture_output=True,
                              env={"PATH": "/usr/bin:/bin", "LANG": locale, "LC_ALL": locale})


def tcl_value(word: str, note: str, locale: str) -> bytes:
    """What ``puts -nonewline WORD`` in a proc's braced body prints (the system encoding in
    and out, as modulecmd.tcl reads module files and answers), after a comment."""
    proc = tclsh(f"## note {quoting.comment(note)}\nproc p {{ }} {{\n    puts -nonewline {word}"
                 "\n}\np\n", locale)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@SOME
@given(any_text, hostile)
@example("{a}\\\n$x[exit 3];\"}", "x\\")
@example("é\U0001f600\u2028\0\x1b", "\\\n[exit 3]")
def test_tcl_reads_back_every_word_or_refuses_what_is_not_utf8(value, note):
    if not utf8(value):
        assert refused(quoting.tcl, value, "--image").startswith("--image: ")
        return
    word = quoting.tcl(value)
    for locale in ("C", "C.UTF-8"):
        assert tcl_value(word, note, locale) == value.encode(), (locale, word)


# -- Python (the ReFrame configuration) ---------------------------------------------------------
@SOME
@given(any_text, any_text, any_text, any_text)
@example("x\nimport os", "ml\n'research", "/tmp/a\nb.toml", "\udcff")
def test_the_reframe_configuration_is_one_assignment_of_the_values(description, account,
                                                                     path, python):
    site = replace(load_site(REPO / "slurm/sites/dgx-h100.toml"), description=description,
                   account=account, path=Path("/sites") / path)
    conf = configuration(site, "slurm", python)
    text = config_text(conf, str(site.path))
    tree = ast.parse(text.encode("utf-8"))  # the file is written as UTF-8
    assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Assign)
    assert [t.id for t in tree.body[0].targets] == ["site_configuration"]
    assert ast.literal_eval(tree.body[0].value) == conf
    partition = conf["systems"][0]["partitions"][0]
    assert conf["systems"][0]["descr"] == (description or "site dgx-h100")
    assert partition["extras"]["chainermn_rt_python"] == python
    assert partition["extras"]["chainermn_rt_site"] == str(site.path.absolute())


def test_a_number_python_cannot_write_as_one_is_refused():
    assert refused(quoting.python, {"x": [math.nan]}, "the configuration") == (
        "the configuration.x[0]: nan; allowed: a finite number")


# -- TOML (site init's profile, an install's site.toml) -----------------------------------------
@SOME
@given(st.lists(any_text, min_size=10, max_size=10))
@example(["lab", "0000:1b:00.0\n[environment]\nLD_PRELOAD = \"/x.so\"", "node[1-2]\n[checks]",
          "gpu\"]\n[x]", "a\\", "\x7f", "\u2028", "01:00:00\n", "h100", "mlx5_0:1"])
def test_a_profile_site_init_writes_holds_exactly_what_the_cluster_reported(texts):
    name, busid, node_list, topology, source, plugin, ifname, max_time, gpu_type, hca = texts
    facts = Facts(name=name, srun_mpi="pmix", plugins=("none", plugin), socket_ifname=ifname,
                  runtimes=(), pyxis=False,
                  partitions=(PartitionFacts("batch", True, 2, max_time, 4, 2048, gpu_type,
                                             topology, node_list),),
                  topologies=(TopologyFacts(topology, (Slot(0, 0, "0-3", (hca,)),), (busid,),
                                            source),))
    if not all(utf8(t) for t in (name, topology, ifname, max_time, gpu_type, hca)):
        refused(profile_text, facts, source)  # a TOML file is UTF-8 text
        return
    data = tomllib.loads(profile_text(facts, source))
    assert set(data) == {"name", "launcher", "srun_mpi", "partitions", "topology"} | (
        {"socket_ifname"} if ifname else set())
    assert (data["name"], data["launcher"], data["srun_mpi"], data.get("socket_ifname", "")) \
        == (name, "srun", "pmix", ifname)
    assert data["partitions"] == [{"name": "batch", "default": True, "nodes": 2,
                                   "max_time": max_time, "cpus_per_node": 4, "memory": "2G",
                                   **({"gpu_type": gpu_type} if gpu_type else {}),
                                   "topology": topology}]
    assert data["topology"] == {topology: {"slots": [{"gpu": 0, "numa": 0, "cpus": "0-3",
                                                      "hcas": [hca]}]}}


@SOME
@given(any_text, any_text, any_text)
@example("/x\n[environment]\nLD_PRELOAD = \"/evil.so\"", "/img\"\n[y]", "\udcff")
def test_an_installed_profile_is_the_profile_with_its_image(site_name, image_path, source):
    """site.toml: the header comment names the source files, ``container.image`` the copy."""
    text = (REPO / "slurm/sites/dgx-h100.toml").read_text()
    if not utf8(image_path):
        assert refused(installer.with_image, text, image_path).startswith("--image: ")
        return
    written = (installer.profile_header(Path("/sites") / site_name, Path(source))
               + installer.with_image(text, image_path))
    want = tomllib.loads(text)
    want["container"]["image"] = image_path
    assert tomllib.loads(written) == want
    assert written.startswith("# Installed by ") and written.split("\n", 1)[1] == \
        installer.with_image(text, image_path)  # the header is one line


# -- sh (an install's wrappers) -----------------------------------------------------------------
def stub(folder: Path, name: str) -> None:
    """``name`` prints its argv, each word ended by NUL: what the wrapper handed it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\"\n")
    (folder / name).chmod(0o755)


def run_wrapper(text: str, folder: Path, path: str) -> list[str]:
    wrapper = folder / "python3"
    wrapper.write_bytes(text.encode("utf-8"))
    wrapper.chmod(0o755)
    assert subprocess.run(["sh", "-n", str(wrapper)], capture_output=True).returncode == 0
    out = subprocess.run([str(wrapper), "-c", "x y"], capture_output=True, check=True,
                         env={"PATH": path}).stdout
    return [w.decode("utf-8", "surrogateescape") for w in out.split(b"\0")[:-1]]


@SOME
@given(st.sampled_from(["charliecloud", "apptainer", "none"]), any_text, any_text, any_text,
       st.text(alphabet=st.characters(blacklist_characters="/\0", blacklist_categories=["Cs"]),
               min_size=1, max_size=8))
@example("charliecloud", "/img\n; rm -rf /", "--x='$(id)'", "python3\"`id`", "v]]env {$x}")
@example("none", "", "", "", "a b'c\nd")
def test_a_wrapper_hands_its_runtime_exactly_the_argv(tmp_path, runtime, image, flag, python,
                                                      venv_name):
    container = Container(runtime, binds=("/lustre:/lustre",), flags=(flag,), python=python)
    venv = str(tmp_path / "prefix" / venv_name / "venv")
    try:
        text = wrappers.python(container, image, venv, "0.1.0-cpu")
    except UserError as err:  # a NUL or bytes that are not UTF-8 in a word
        assert "\n" not in str(err)
        assert any("\0" in w or not utf8(w) for w in (image, flag, python))
        return
    bin_dir = tmp_path / "stubs"
    if runtime == "none":
        stub(Path(venv) / "bin", "python3")
        argv = [f"{venv}/bin/python3"]
    else:
        words = [*runtimes.runtime(runtime).step(container, image)[0], python]
        stub(bin_dir, words[0])
        argv = [str(bin_dir / words[0]), *words[1:]]
    assert run_wrapper(text, tmp_path, f"{bin_dir}:/usr/bin:/bin") == [*argv, "-c", "x y"]
    lines = text.split("\n")  # the #! line, the comment, then the exec line
    assert lines[0] == "#!/bin/sh" and lines[1].startswith("# ") and lines[2].startswith("exec ")


# -- comments -----------------------------------------------------------------------------------
@SOME
@given(any_text)
@example("x\\")
@example("a\n[environment]\r\n\u2028b\\\n\x00")
def test_a_comment_stays_one_comment_in_every_language(note):
    text = quoting.comment(note)
    assert text.isprintable()
    assert (len(text) - len(text.rstrip("\\"))) % 2 == 0  # no lone backslash at the end
    assert tomllib.loads(f"# {text}\nk = 1\n") == {"k": 1}
    assert [type(s) for s in ast.parse(f"# {text}\nk = 1\n").body] == [ast.Assign]
    require_commands("lua5.3", "tclsh")
    lua = subprocess.run(["lua5.3", "-"], input=f"-- x {text}\nio.write('ok')\n".encode(),
                         capture_output=True)
    tcl = tclsh(f"# {text}\nputs -nonewline ok\n")
    sh = subprocess.run(["sh", "-c", f"# {text}\nprintf ok"], capture_output=True)
    assert [p.stdout for p in (lua, tcl, sh)] == [b"ok"] * 3


# -- shell words with the shell's values in them (the job script's stop messages) ------------
@SOME
@given(st.lists(any_text, min_size=3, max_size=3), st.lists(hostile, min_size=2, max_size=2))
@example(["it's $HOME ", "_{x `id`}", "\\"], ["$(id)", "'\n"])
def test_a_filled_shell_word_is_its_text_with_the_shells_values(literals, values):
    text = literals[0] + "{first}" + literals[1] + "{second_one}" + literals[2]
    assume(re.findall(r"\{([a-z_]+)\}", text) == ["first", "second_one"])
    if "\0" in text or not utf8(text):
        refused(quoting.sh_fill, text)
        return
    values = [value.replace("\0", "") for value in values]  # an environment holds no NUL
    out = subprocess.run(["bash", "-c", f"printf %s {quoting.sh_fill(text)}"], check=True,
                         env={"first": values[0], "second_one": values[1]},
                         capture_output=True).stdout
    assert out == (literals[0] + values[0] + literals[1] + values[1] + literals[2]).encode()


# -- the module files' text for any prefix install accepts --------------------------------------
@SOME
@given(any_text)
@example("/opt/sw]] \"'#;`é\U0001f600")
def test_module_files_hold_any_prefix_install_accepts(tmp_path, name):
    try:
        prefix = installer.check_prefix(tmp_path / "p" / name)
    except UserError as err:
        assert "\n" not in str(err) and str(err).startswith("--prefix: ")
        return
    where = Layout(prefix, "0.1.0", "cpu")
    lua = modulefiles.lua(where, "lab", None)
    lines = lua_values([lua.split("prepend_path(\"PATH\", ")[1].split(")\n")[0],
                        lua.split(f"setenv(\"{'CHAINERMN_RT_SITE'}\", ")[1].split(")\n")[0]])
    assert lines == [str(where.bin).encode(), str(where.site).encode()]
    tcl = modulefiles.tcl(where, "lab", None)
    words = {line.split(" ", 2)[1]: line.split(" ", 2)[2] for line in tcl.splitlines()
             if line.startswith(("prepend-path ", "setenv "))}
    for locale in ("C", "C.UTF-8"):
        assert tcl_value(words["PATH"], "", locale) == str(where.bin).encode()
        assert tcl_value(words["CHAINERMN_RT_SITE"], "", locale) == str(where.site).encode()
    assert os.listdir(tmp_path) == []  # the prefix's check left nothing
