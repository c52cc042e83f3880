"""Bad input, generated: site profiles, render requests, launcher variables and the CLI.

Every public entry point (``load_site`` on a written file, ``make_plan``, ``render``,
``JobEnvironment.detect``, ``rank.binding``, ``chainermn-rt render``) either succeeds or raises
``UserError`` with one line that names the field and says what is ``allowed:``; never another
exception. Scripts it renders pass ``bash -n`` and keep every value inside its own line.

Hostile values (``$(touch CANARY)``, backticks, quotes) in every string field of a profile and
of a request never run: the rendered script is executed with srun, mpirun and module replaced by
stubs that log their argv and environment, and each value arrives byte for byte.
(tests/test_render.py covers a hostile ``[sbatch]`` value of the site and a hostile golden
request; this file covers the other fields.)
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chainermn_rt.errors import UserError
from chainermn_rt.job_env import JobEnvironment
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.rank import binding
from chainermn_rt.rank_contract import Slot
from chainermn_rt.render import render
from chainermn_rt.site import load_site

from conftest import REPO

SITES = REPO / "slurm" / "sites"
SHIPPED = {p.stem: tomllib.loads(p.read_text()) for p in sorted(SITES.glob("*.toml"))}
# CI: 200 fixed cases each. To search further: FUZZ_EXAMPLES=5000 FUZZ_RANDOM=1 pytest ...
MANY = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 200)), deadline=None,
                derandomize=os.environ.get("FUZZ_RANDOM") != "1",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# -- checks shared by the properties ------------------------------------------------------------
def assert_one_line(err: UserError, field: re.Pattern | str) -> None:
    """One line (no control character at all), names the field first, says what is allowed."""
    message = str(err)
    assert not CONTROL.search(message), repr(message)
    assert "allowed:" in message, message
    if isinstance(field, str):
        assert message.startswith(field), (field, message)
    else:
        assert field.match(message), (field.pattern, message)


def assert_script_is_sound(text: str) -> None:
    """``bash -n`` accepts it, and every line before ``set -euo pipefail`` is a comment: no value
    broke out of a ``#SBATCH`` line or the header."""
    assert "\0" not in text
    head = text.split("\nset -euo pipefail\n", 1)
    assert len(head) == 2, text[:2000]
    assert all(line.startswith("#") for line in head[0].split("\n")), head[0]
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + text[:2000]


# -- TOML text of a parsed profile (inline tables: enough for tomllib, no extra package) ------
def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, int) else _float(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_string(k)} = {toml_value(v)}" for k, v in value.items()) \
            + "}"
    raise TypeError(type(value))


def _float(value: float) -> str:
    if value != value:
        return "nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    text = repr(value)
    return text if any(c in text for c in ".en") else text + ".0"


def toml_string(text: str) -> str:
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif CONTROL.match(c):
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def toml_text(doc: dict) -> str:
    return "".join(f"{toml_string(k)} = {toml_value(v)}\n" for k, v in doc.items())


def test_toml_text_round_trips_every_shipped_profile():
    for doc in SHIPPED.values():
        assert tomllib.loads(toml_text(doc)) == doc


# -- generated values ---------------------------------------------------------------------------
TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
HOSTILE_BITS = ["\n", "$(touch CANARY)", "\r", "`touch CANARY`", "'", '"', "\n#", ";", "\\",
                "#", "\t", "\x00", "\x1b[31m", "\x7f", "é✓漢", "--", "-", " ", "%", "=", ":",
                ",", "*", "$HOME", "\u2028", "\x85", "\r\n"]
HOSTILE_TEXT = st.lists(st.sampled_from(HOSTILE_BITS) | TEXT, min_size=1, max_size=4).map("".join)
NASTY = st.one_of(HOSTILE_TEXT, HOSTILE_TEXT, HOSTILE_TEXT, TEXT, st.just(""),
                  st.integers(1000, 5000).map("x".__mul__))
NUMBERS = st.one_of(st.integers(-3, 300), st.sampled_from([0, -1, 2**31, 2**63 - 1, 2**63,
                                                           -2**63, 10**30]))
SCALARS = st.one_of(NASTY, NUMBERS, st.booleans(),
                    st.floats(allow_nan=False, allow_infinity=True))
JUNK = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(NASTY, inner, max_size=3), max_leaves=6)


def _nodes(doc, path=()):
    """Every (container, key) of a parsed document, the containers themselves included."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc)
    for key, value in items:
        yield doc, key, path + (key,)
        if isinstance(value, dict | list):
            yield from _nodes(value, path + (key,))


def mutate(doc: dict, data) -> None:
    """One change somewhere in ``doc``: a value replaced by junk or a near-miss, a key removed,
    an unknown key added, a string given hostile bits, a resource made impossible."""
    action = data.draw(st.sampled_from(["junk", "delete", "unknown", "string", "string",
                                        "number", "resource"]))
    wanted = {"string": str, "number": int, "unknown": dict}.get(action, object)
    fields: dict[tuple, list] = {}  # each field equally likely, however many times it occurs
    for parent, key, path in _nodes(doc):
        if isinstance(parent[key], wanted):
            shape = tuple("[]" if isinstance(k, int) else k for k in path)
            fields.setdefault(shape, []).append((parent, key))
    if not fields:
        doc[data.draw(NASTY)] = data.draw(JUNK)
        return
    parent, key = data.draw(st.sampled_from(fields[data.draw(st.sampled_from(sorted(fields)))]))
    value = parent[key]
    if action == "junk":
        parent[key] = data.draw(JUNK)
    elif action == "delete":
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
    elif action == "unknown":
        value[data.draw(NASTY)] = data.draw(JUNK)
    elif action == "string":
        cut = data.draw(st.integers(0, len(value)))
        parent[key] = value[:cut] + data.draw(NASTY) + value[cut:]
    elif action == "number":
        parent[key] = data.draw(NUMBERS)
    else:  # impossible resources on a partition
        parts = doc.get("partitions")
        parts = [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []
        if parts:
            part = data.draw(st.sampled_from(parts))
            field = data.draw(st.sampled_from(["nodes", "cpus_per_node", "max_time", "memory"]))
            part[field] = data.draw(st.sampled_from([0, -1, 1, 2**63, "0", "0G", "-5",
                                                     "99999999999999999999T", "0:0", "", " 5",
                                                     "5\n", "1-99:99:99"]))


WORK = tempfile.TemporaryDirectory(prefix="fuzz-inputs-")  # removed when the session ends


def _profile_file(text: str) -> Path:
    path = Path(WORK.name) / "site.toml"  # one at a time: each is checked before the next
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


_KEY = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*")'  # bare or quoted, as in TOML
PROFILE_FIELD = rf"(?:not valid TOML|{_KEY}(?:\.{_KEY}|\[\d+\])*): "


def _load(path: Path):
    """load_site, or None after checking its UserError: the file, then the field."""
    try:
        return load_site(path)
    except UserError as err:
        assert_one_line(err, re.compile(re.escape(f"{path}: ") + PROFILE_FIELD))
        return None


# the runtime's checks of the profile's [container] (a pyxis bind, Apptainer's flags) name it
PLAN_FIELD = re.compile(r"(--[a-z-]+|COMMAND(\[\d+\])?|partition|container\.[a-z]+(\[\d+\])?)[: ]")


def _plan_and_render(site, request: Request) -> str | None:
    try:
        plan = make_plan(site, request)
    except UserError as err:
        assert_one_line(err, PLAN_FIELD)
        return None
    text = render(plan)
    assert_script_is_sound(text)
    return text


# -- site profiles ------------------------------------------------------------------------------
@MANY
@given(st.data())
def test_mutated_profiles_load_or_name_the_field(data):
    name = data.draw(st.sampled_from(sorted(SHIPPED)))
    doc = copy.deepcopy(SHIPPED[name])
    for _ in range(data.draw(st.integers(1, 3))):
        mutate(doc, data)
    path = _profile_file(toml_text(doc))
    site = _load(path)
    if site is not None:  # a profile that loads renders a sound script, or refuses the request
        for part in site.partitions:
            _plan_and_render(site, Request(nodes=1, partition=part.name, command=("x",)))


def _string_fields(doc: dict) -> dict[tuple, list]:
    """Each string field's shape (list indices as ``[]``) -> its (container, key) places."""
    fields: dict[tuple, list] = {}
    for parent, key, path in _nodes(doc):
        if isinstance(parent[key], str):
            shape = tuple("[]" if isinstance(k, int) else k for k in path)
            fields.setdefault(shape, []).append((parent, key))
    return fields


@MANY
@given(st.data())
def test_any_string_field_of_a_profile_loads_or_is_refused_and_renders_soundly(data):
    """Most of these profiles load: each string field, in turn, gets control characters,
    quotes, ``$(...)``, backticks, huge or empty text."""
    name = data.draw(st.sampled_from(sorted(SHIPPED)))
    doc = copy.deepcopy(SHIPPED[name])
    fields = _string_fields(doc)
    parent, key = data.draw(st.sampled_from(fields[data.draw(st.sampled_from(sorted(fields)))]))
    value = data.draw(NASTY)
    parent[key] = data.draw(st.sampled_from([value, parent[key] + value, value + parent[key]]))
    site = _load(_profile_file(toml_text(doc)))
    if site is not None:
        for part in site.partitions:
            _plan_and_render(site, Request(nodes=1, partition=part.name, command=("x",)))


@MANY
@given(st.sampled_from(sorted(SHIPPED)), st.data())
def test_broken_toml_text_is_one_line(name, data):
    text = (SITES / f"{name}.toml").read_text()
    cut = data.draw(st.integers(0, len(text)))
    width = data.draw(st.integers(0, 20))
    junk = data.draw(st.lists(st.sampled_from(["[", "]", "{", "=", '"', "'", "\n", "[[", "\\",
                                               "\x00", "\x7f", "é", "# ", "=="]) | TEXT,
                              max_size=4).map("".join))
    broken = text[:cut] + junk + text[cut + width:]
    path = _profile_file(broken)
    if data.draw(st.booleans()):  # bytes that are not UTF-8
        path.write_bytes(broken.encode("utf-8", "surrogatepass") + b"\xff\xfe")
    _load(path)


# -- render requests ----------------------------------------------------------------------------
def near(*parts: str):
    """Near misses of a valid value: its parts recombined, blanks and line ends around."""
    blank = st.sampled_from(["\n", "", " ", "\t", "\r"])
    core = st.lists(st.sampled_from(parts), min_size=1, max_size=5).map("".join)
    return st.tuples(blank, core, blank).map("".join)


TIMES = st.one_of(near("1", "10", "00", ":", "-", "x", "99999999999999999999"),
                  st.sampled_from(["10", "0", "-1", "00:10:00", "1-00", "2-00:00:00", "5:30",
                                   "soon", "", "1:2:3:4", "0-0", "10:99"]), NASTY)
MEMORY = st.one_of(near("1", "64", "0", "G", "T", "M", "K", "g", ".", "-"),
                   st.sampled_from(["1G", "0", "2T", "99999999999999999999T"]), NASTY)
ENV = st.lists(st.tuples(st.sampled_from(["OK", "NCCL_DEBUG", "1BAD", "", "A-B", "A B",
                                          "CHAINERMN_RT_SLOTS", "PATH"]) | NASTY, NASTY),
               min_size=1, max_size=3).map(tuple)
COMMAND = st.lists(NASTY, max_size=4).map(tuple)
RUNTIMES = st.sampled_from(["none", "apptainer", "singularity", "charliecloud", "pyxis",
                            "docker", ""])


@st.composite
def requests(draw, site_name: str):
    """A valid request with one to three fields made bad (or odd)."""
    parts = [p.name for p in SITE_OBJECTS[site_name].partitions]
    bad = {
        "nodes": NUMBERS, "command": COMMAND, "gpus_per_node": NUMBERS,
        "ranks_per_node": NUMBERS, "partition": st.sampled_from(parts) | NASTY, "time": TIMES,
        "job_name": NASTY, "image": NASTY, "runtime": RUNTIMES,
        "launcher": st.sampled_from(["srun", "mpirun", "ssh", ""]), "account": NASTY,
        "qos": NASTY, "memory": MEMORY, "python": NASTY, "env": ENV, "log": NASTY,
        "per_rank_logs": st.booleans()}
    fields = draw(st.lists(st.sampled_from(sorted(bad)), min_size=1, max_size=3, unique=True))
    return Request(**{"nodes": 1, "command": ("x",)} | {f: draw(bad[f]) for f in fields})


SITE_OBJECTS = {name: load_site(SITES / f"{name}.toml") for name in SHIPPED}
# the sandbox with partitions that do not say their memory, type their GPUs, or run containers
BARE = copy.deepcopy(SHIPPED["sandbox"])
for _part in BARE["partitions"]:
    del _part["memory"]
    _part["gpu_type"] = "fake"
BARE["container"] = {"runtime": "none", "image": "/images/x.sif"}
Path(WORK.name, "bare.toml").write_text(toml_text(BARE))
SITE_OBJECTS["sandbox-bare"] = load_site(Path(WORK.name, "bare.toml"))


@MANY
@given(st.sampled_from(sorted(SITE_OBJECTS)).flatmap(
    lambda name: st.tuples(st.just(name), requests(name))))
@example(("cpu-cluster", Request(nodes=1, time="\n1\n", command=("x",))))  # found by it
@example(("sandbox-bare", Request(nodes=1, memory="1G\n", command=("x",))))
@example(("sandbox", Request(nodes=1, python="\0", command=("x",))))
@example(("quad-gpu", Request(nodes=1, image="a" * 1000, command=("x",))))  # found by it
def test_requests_plan_and_render_or_name_the_argument(site_and_request):
    name, request = site_and_request
    _plan_and_render(SITE_OBJECTS[name], request)


# -- launcher environments ----------------------------------------------------------------------
LAUNCH_VARS = ["SLURM_STEP_ID", "SLURM_STEPID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
               "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_STEP_NUM_NODES",
               "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_STEP_TASKS_PER_NODE",
               "SLURM_TASKS_PER_NODE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
               "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
               "OMPI_MCA_orte_num_nodes", "OMPI_MCA_prte_num_nodes", "PMI_RANK", "PMI_SIZE",
               "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "I_MPI_ROOT", "PMIX_RANK",
               "CUDA_VISIBLE_DEVICES"]
VAR_VALUES = st.one_of(
    st.integers(-3, 9).map(str),
    st.sampled_from(["", " ", " 1 ", "+1", "1_0", "0x10", "1.0", "٣", "2(x2)", "2(x0)", "0(x3)",
                     "2(x3),1", "(x2)", "2(x", "1,,2", "99999999999999999999", "-0", "0,1",
                     "0,1,2,3", "GPU-abc", "NoDevFiles", "3,1", "a\nb"]),
    NASTY)
LAUNCHER_ENVS = st.dictionaries(st.sampled_from(LAUNCH_VARS), VAR_VALUES, max_size=10)
SLOT_TABLES = st.sampled_from([
    None, (),
    (Slot(gpu=0, numa=0, cpus="0"), Slot(gpu=1, numa=0, cpus="1")),
    (Slot(gpu=None, numa=0, cpus="0-1", hcas=("mlx5_0:1",)),),
    tuple(Slot(gpu=g, numa=g // 2, cpus=str(g), hcas=(f"mlx5_{g}:1",)) for g in range(4)),
])
VAR_FIELD = re.compile(r"(environment variable [A-Z_]+[=\s]|launcher [a-z]+ )")


def _detect(environ):
    try:
        return JobEnvironment.detect(environ)
    except UserError as err:
        assert_one_line(err, VAR_FIELD)
        return None


@MANY
@given(LAUNCHER_ENVS)
@example({"SLURM_STEP_ID": "0", "SLURM_PROCID": "1"})  # found by it: rank 1 of a default 1
@example({"PMI_RANK": "0", "PMI_SIZE": "0"})
@example({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
          "OMPI_COMM_WORLD_LOCAL_SIZE": "0"})  # was ZeroDivisionError
def test_launcher_variables_are_read_or_named(environ):
    job = _detect(environ)
    if job is not None:
        assert job.global_rank >= 0
        assert job.local_rank is None or job.local_size is None or \
            0 <= job.local_rank < job.local_size
        assert job.world_size is None or 0 <= job.global_rank < job.world_size


@MANY
@given(LAUNCHER_ENVS, SLOT_TABLES)
@example({"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "1"}, None)
def test_the_rank_steps_binding_or_one_line(environ, slots):
    if _detect(environ) is None:
        return
    try:
        b = binding(slots, environ)
    except UserError as err:
        message = str(err)
        assert not CONTROL.search(message) and "allowed:" in message, message
        # several variables together decide it: the message names the ones involved
        assert re.search(r"[A-Z][A-Z_]{3,}|launcher [a-z]+|local rank", message), message
        return
    assert b.slot is None or b.slot in slots


# -- the command line ---------------------------------------------------------------------------
BAD_ARGUMENTS = st.sampled_from([  # (option, value, the field its error names)
    ("--nodes", "two", "--nodes"), ("--nodes", "0", "--nodes"), ("--nodes", "-1", "--nodes"),
    ("--nodes", "1e3", "--nodes"), ("--nodes", "", "--nodes"), ("--nodes", "999", "--nodes"),
    ("--gpus-per-node", "9", "--gpus-per-node"), ("--gpus-per-node", "x", "--gpus-per-node"),
    ("--ranks-per-node", "2", "--ranks-per-node"), ("--time", "soon", "--time"),
    ("--time", "10\n", "--time"), ("--time", "99:00:00", "--time"), ("--mem", "lots", "--mem"),
    ("--mem", "1G\n", "--mem"), ("--mem", "99T", "--mem"), ("--env", "NOEQUALS", "--env"),
    ("--env", "1BAD=x", "--env"), ("--env", "A=x\ny", "--env"),
    ("--job-name", "two\nlines", "--job-name"), ("--job-name", "\x1b[31mred", "--job-name"),
    ("--job-name", "", "--job-name"), ("--partition", "nowhere", "partition"),
    ("--partition", "gpu\n", "partition"), ("--launcher", "ssh", "--launcher"),
    ("--runtime", "docker", "--runtime"), ("--runtime", "apptainer", "--image"),
    ("--log", "a\nb", "--log"), ("--account", "a\tb", "--account"), ("--qos", "q\rq", "--qos"),
    ("--site", "nowhere", "--site"), ("--site", "/dev/null", "--site: /dev/null: a device"),
])
GOOD_ARGUMENTS = st.sampled_from([("--time", "10"), ("--job-name", "ok"), ("--mem", "1G"),
                                  ("--env", "A=b"), ("--per-rank-logs",)])


@settings(max_examples=30, deadline=None, derandomize=True)
@given(BAD_ARGUMENTS, st.lists(GOOD_ARGUMENTS, max_size=2),
       st.lists(TEXT.filter(lambda s: "\0" not in s), max_size=2))
def test_cli_render_refuses_bad_input_with_one_line_and_no_file(bad, good, command):
    option, value, field = bad
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "job.sh"
        values = {"--site": "sandbox", "--nodes": "1", option: value}
        argv = [sys.executable, "-m", "chainermn_rt", "render", "--output", str(out),
                *(f"{k}={v}" for k, v in values.items()),
                *("=".join(g) for g in good if g[0] != option), "--", "x", *command]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=folder, timeout=120)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n"), proc.stderr
        assert re.match(rf"chainermn-rt render: error: (argument )?{re.escape(field)}",
                        proc.stderr), proc.stderr
        assert proc.stdout == "" and os.listdir(folder) == [], os.listdir(folder)


# -- found by the properties above: kept as plain cases -----------------------------------------
@pytest.mark.parametrize("edit", [
    lambda d: d.update({"\x1f": 1}),                                     # a key, unquoted
    lambda d: d["environment"].update({"A\nB": "x"}),
    lambda d: d["topology"].update({"a\nb": d["topology"]["fake4"]}),   # in `allowed:` lists
    lambda d: d.update(partitions=[1]),                                  # "not a table"
    lambda d: d["partitions"][0].update(name="gpu\ntouch CANARY"),      # broke the header
    lambda d: d["partitions"][0].update(gpu_type="t\n#"),               # broke #SBATCH
    lambda d: d["partitions"][0].update(max_time="30\n"),
    lambda d: d.update(modules=["a\0b"]),                                # no argv carries NUL
    lambda d: d["container"].update(flags=["\0"]),
])
def test_profile_bugs_the_properties_found_stay_fixed(edit):
    doc = copy.deepcopy(SHIPPED["sandbox"])
    edit(doc)
    path = _profile_file(toml_text(doc))
    with pytest.raises(UserError) as err:
        load_site(path)
    assert_one_line(err.value, f"{path}: ")


def test_broken_toml_says_what_is_allowed():
    path = _profile_file("name = [")
    with pytest.raises(UserError) as err:
        load_site(path)
    assert_one_line(err.value, f"{path}: not valid TOML: ")


# -- hostile values in every string field, executed with stub launchers -------------------------
HOSTILE = ["$(touch CANARY)", "`touch CANARY`", "'; touch CANARY; '", '"; touch CANARY; "',
           "$(touch${IFS}CANARY)", "`touch${IFS}CANARY`", "$HOME ${PATH} \\ * ? ~ #", "-x",
           "a\ntouch CANARY", "é ✓ 漢字"]
STUB = """#!{python}
import json, os, sys
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps({{"prog": os.path.basename(sys.argv[0]), "argv": sys.argv[1:],
                        "env": dict(os.environ)}}) + "\\n")
"""


def _run_with_stubs(text: str, folder: Path) -> tuple[list[dict], dict[str, str]]:
    """Run the script with srun, mpirun and module as stubs; their calls, and the #SBATCH
    values as sbatch reads them."""
    stubs = folder / "bin"
    stubs.mkdir(parents=True)
    for name in ("srun", "mpirun", "module"):
        (stubs / name).write_text(STUB.format(python=sys.executable))
        (stubs / name).chmod(0o755)
    script, log = folder / "job.sh", folder / "calls.jsonl"
    script.write_text(text)
    proc = subprocess.run(["bash", str(script)], cwd=folder, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}",
                                            "STUB_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls and calls[-1]["prog"] in ("srun", "mpirun"), calls  # it ran to its end
    return calls, _directives(text)


def _directives(text: str) -> dict[str, str]:
    """``#SBATCH --opt=VALUE`` -> VALUE, unquoted as sbatch does (``"..."``, ``\\`` escapes)."""
    found = {}
    for line in text.split("\n"):
        m = re.fullmatch(r"#SBATCH --([a-z-]+)(?:=(.*))?", line)
        if m and m.group(2) is not None:
            value = m.group(2)
            if value.startswith('"') and value.endswith('"') and len(value) >= 2:
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            found[m.group(1)] = value
    return found


def _launch(calls):
    return calls[-1]


# field -> (site, how to put the value in: profile dict or Request fields, how it arrives)
def _at(*path):
    def put(doc, value):
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return put


SITE_FIELDS = {
    "environment value": ("sandbox", _at("environment", "HOSTILE"),
                          lambda calls, sb, v: _launch(calls)["env"]["HOSTILE"] == v),
    "socket_ifname": ("sandbox", _at("socket_ifname"),
                      lambda calls, sb, v: _launch(calls)["env"]["NCCL_SOCKET_IFNAME"] == v),
    "modules": ("quad-gpu", _at("modules", 0),
                lambda calls, sb, v: calls[0] == {**calls[0], "prog": "module",
                                                  "argv": ["load", v]}),
    "python (mpirun)": ("cpu-cluster", _at("python"),
                        lambda calls, sb, v: v in _launch(calls)["argv"]),
    "account": ("sandbox", _at("account"), lambda calls, sb, v: sb["account"] == v),
    "qos": ("sandbox", _at("qos"), lambda calls, sb, v: sb["qos"] == v),
    "partition name": ("sandbox", _at("partitions", 0, "name"),
                       lambda calls, sb, v: sb["partition"] == v),
    "gpu_type": ("sandbox", _at("partitions", 0, "gpu_type"),
                 lambda calls, sb, v: sb["gpus-per-node"] == f"{v}:4"),
    "partition [sbatch]": ("sandbox", _at("partitions", 0, "sbatch"),
                           lambda calls, sb, v: sb["comment"] == v),
    "container.image (apptainer)": ("quad-gpu", _at("container", "image"),
                                    lambda calls, sb, v: v in _launch(calls)["argv"]),
    "container.image (pyxis)": ("dgx-h100", _at("container", "image"),
                                lambda calls, sb, v: f"--container-image={v}"
                                in _launch(calls)["argv"]),
    "container.binds (apptainer)": ("quad-gpu", _at("container", "binds", 0),
                                    lambda calls, sb, v: v in _launch(calls)["argv"]),
    # pyxis mounts paths only: each value as a path, then the job's folder ($PWD)
    "container.binds (pyxis)": ("dgx-h100", lambda doc, v: _at("container", "binds", 0)(
                                    doc, f"/{v}"),
                                lambda calls, sb, v: any(a.startswith(f"--container-mounts=/{v},/")
                                                         for a in _launch(calls)["argv"])),
    "container.flags": ("quad-gpu", _at("container", "flags"),
                        lambda calls, sb, v: v in _launch(calls)["argv"]),
    "container.python": ("quad-gpu", _at("container", "python"),
                         lambda calls, sb, v: v in _launch(calls)["argv"]),
    "description": ("sandbox", _at("description"), lambda calls, sb, v: True),  # not rendered
    # checked against a pattern or a list: hostile text is refused
    "name": ("sandbox", _at("name"), None), "launcher": ("sandbox", _at("launcher"), None),
    "srun_mpi": ("sandbox", _at("srun_mpi"), None), "signal": ("sandbox", _at("signal"), None),
    "container.runtime": ("sandbox", _at("container", "runtime"), None),
    "partition max_time": ("sandbox", _at("partitions", 0, "max_time"), None),
    "partition memory": ("sandbox", _at("partitions", 0, "memory"), None),
    "partition topology": ("sandbox", _at("partitions", 0, "topology"), None),
    "slot cpus": ("sandbox", _at("topology", "fake4", "slots", 0, "cpus"), None),
    "slot hcas": ("sandbox", _at("topology", "fake4", "slots", 0, "hcas", 0), None),
    "sandbox.subnet": ("sandbox", _at("sandbox", "subnet"), None),
}
REQUEST_FIELDS = {  # job name, --env and COMMAND: tests/test_jobs_sandbox.py, on real Slurm
    "--python": ("python", lambda calls, sb, v: v in _launch(calls)["argv"]),
    "--image": ("image", lambda calls, sb, v: v in _launch(calls)["argv"]),
    "--account": ("account", lambda calls, sb, v: sb["account"] == v),
    "--qos": ("qos", lambda calls, sb, v: sb["qos"] == v),
    "--log": ("log", lambda calls, sb, v: sb["output"] == v),
    "--partition": ("partition", None), "--time": ("time", None), "--mem": ("memory", None),
    "--runtime": ("runtime", None), "--launcher": ("launcher", None),
}


def _check_hostile(make, arrives, tmp_path) -> int:
    """Each HOSTILE value: refused in one line, or run without effect and arriving intact.
    Returns how many were accepted."""
    accepted = 0
    for i, value in enumerate(HOSTILE):
        try:
            text = make(value)
        except UserError as err:
            assert_one_line(err, re.compile(r"\S"))
            continue
        assert arrives is not None, f"{value!r} was accepted where it should be refused"
        assert_script_is_sound(text)
        calls, directives = _run_with_stubs(text, tmp_path / str(i))
        assert arrives(calls, directives, value), (value, calls[-1]["argv"], directives)
        accepted += 1
    assert not list(tmp_path.rglob("CANARY")) and not (REPO / "CANARY").exists()
    return accepted


@pytest.mark.parametrize("field", sorted(SITE_FIELDS))
def test_hostile_profile_values_never_run_and_arrive_intact(field, tmp_path):
    site_name, put, arrives = SITE_FIELDS[field]

    def make(value):
        doc = copy.deepcopy(SHIPPED[site_name])
        put(doc, {"comment": value} if field == "partition [sbatch]" else
            [value] if field == "container.flags" else value)
        path = tmp_path / "site.toml"
        path.write_text(toml_text(doc))
        site = load_site(path)
        partition = site.partitions[0].name
        return render(make_plan(site, Request(nodes=1, partition=partition, command=("x",))))

    accepted = _check_hostile(make, arrives, tmp_path)
    assert accepted if arrives else not accepted


@pytest.mark.parametrize("field", sorted(REQUEST_FIELDS))
def test_hostile_request_values_never_run_and_arrive_intact(field, tmp_path):
    name, arrives = REQUEST_FIELDS[field]
    extra = {"runtime": "apptainer"} if name == "image" else {}

    def make(value):
        return render(make_plan(SITE_OBJECTS["sandbox"],
                                Request(nodes=1, command=("x",), **extra, **{name: value})))

    accepted = _check_hostile(make, arrives, tmp_path)
    assert accepted if arrives else not accepted
