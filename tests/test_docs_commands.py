"""Every command the docs show runs here, or its text says what it needs (issue 25).

The commands: each line of the shell blocks in README.md, docs/ and bench/RESULTS.md (```sh,
```console and untagged blocks: their ``$ `` lines; ``\\`` continues a line), and the
``python ...`` and ``make ...`` commands in their text. Each is checked by its program
(``check``), never by where it stands, so a new command of a known program needs nothing here:

- ``chainermn-rt ...``, ``python -m MODULE ...``, ``python FILE.py ...``: the program runs as
  far as its argument parser, which must accept the command's arguments
  (tests/programs/parse_only.py); so does the command after ``--`` of ``render``/``submit``
  and after ``mpirun``'s or ``srun``'s options when it is one of these (any other program
  there is the reader's); ``render`` and ``site check`` (without ``--live``) run as shown,
  in an empty folder;
- ``make ...``: ``make -n`` accepts it;
- a command that needs Slurm (``srun``, ``submit``, ``doctor --site``, ...) or a GPU says so:
  ``needs a cluster``, ``needs the sandbox`` or ``needs a GPU`` in its comment, or in the
  comment line that heads its group (up to the next comment line or blank line).

A program ``check`` does not know fails the test: teach ``check`` or mark the command. In the
text, a bare name (``python -m bench.modules``) or placeholders (``FILE``, ``...``): only the
program is looked up.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import PYTHON, REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md")), REPO / "bench/RESULTS.md"]
MARK = re.compile(r"needs? (a cluster|the sandbox|a GPU)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SHELL_BLOCKS = ("sh", "bash", "shell", "console", "")
PROMPTED = ("console", "")  # only their `$ ` lines are commands; the rest is output
IN_TEXT = re.compile(r"`((?:python3?|make) [^`\n]+)`")
# what the docs' variables stand for: the checkout (the reader's current folder), anyone
VARIABLES = {"PWD": str(REPO), "USER": "me", "OUT": "/tmp/out"}
# chainermn-rt's commands that reach Slurm, and programs that need a GPU
SLURM_COMMANDS = ("submit", "scaling", "sandbox", "rank")
GPU_PROGRAMS = ("tests.gpu_check", "bench.resnet50_gpu")
SLURM_CLIENTS = ("srun", "sbatch", "salloc", "scontrol", "squeue", "sinfo", "scancel", "sacct",
                 "reframe")
SRUN_VALUE_OPTIONS = {"-N", "-n", "-p", "-t", "-c", "-w", "-x", "--nodes", "--ntasks",
                      "--ntasks-per-node", "--partition", "--time", "--nodelist", "--exclude"}
RUN_AS_SHOWN = (("render",), ("site", "check"))  # offline and quick


@dataclass
class Command:
    where: str
    text: str
    mark: str | None = None
    in_text: bool = False  # mentioned in the text, not shown in a shell block


@dataclass
class Checks:
    """What ``check`` asks of the commands: argv lists to parse, ``make -n`` argument lists,
    commands to run, and problems found without running anything."""

    parse: list[tuple[Command, list[str]]] = field(default_factory=list)
    make: list[tuple[Command, list[str]]] = field(default_factory=list)
    run: list[Command] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{line}"


def shell_commands(path: Path) -> list[Command]:
    text, found = path.read_text(), []
    for block in FENCE.finditer(text):
        if block.group(1) not in SHELL_BLOCKS:
            continue
        first = text[:block.start(2)].count("\n") + 1
        group_mark, heading, pending, start = None, False, "", 0
        for number, line in enumerate(block.group(2).splitlines(), start=first):
            if not pending:
                if block.group(1) in PROMPTED:
                    if not line.startswith("$ "):
                        continue
                    line = line[2:]
                if not line.strip():
                    group_mark, heading = None, False
                    continue
                if line.lstrip().startswith("#"):  # a heading: its lines' mark, if any
                    found_mark = MARK.search(line)
                    group_mark = (found_mark and found_mark.group(1)) or (
                        group_mark if heading else None)
                    heading = True
                    continue
                start, heading = number, False
            pending += line.rstrip().removesuffix("\\") + " "
            if not line.rstrip().endswith("\\"):
                mark = MARK.search(pending)
                found.append(Command(_where(path, start), pending.strip(),
                                     mark.group(1) if mark else group_mark))
                pending = ""
    return found


def text_commands(path: Path) -> list[Command]:
    text = path.read_text()
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return [Command(_where(path, prose[:m.start()].count("\n") + 1), m.group(1), in_text=True)
            for m in IN_TEXT.finditer(prose)]


def _words(command: Command) -> list[str]:
    words = [re.sub(r"\$\{?(\w+)\}?", lambda m: VARIABLES.get(m[1], m[0]), w)
             for w in shlex.split(command.text, comments=True)]
    while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):  # VAR=value before a program
        words.pop(0)
    return words


def _placeholders(words: list[str]) -> bool:
    return any("..." in w or "|" in w or re.fullmatch(r"[A-Z][A-Z_]*", w) for w in words)


def _in_checkout(path: str) -> Path | None:
    """The checkout's file a script path names (it may be missing: a mistake): relative to the
    checkout, or below a folder named chainermn-rt (the docs' copy of it on a cluster). None
    for a program of the reader's own (``train.py``)."""
    parts = Path(path).parts
    if "chainermn-rt" in parts[:-1]:
        rest = parts[len(parts) - parts[::-1].index("chainermn-rt"):]
        return REPO.joinpath(*rest)
    if Path(path).is_absolute():
        return Path(path) if Path(path).is_relative_to(REPO) else None
    return REPO / path if len(parts) > 1 and (REPO / parts[0]).is_dir() else None


def check(command: Command, words: list[str], checks: Checks, needs: set[str],
          inner: bool = False) -> None:
    """Sort ``words`` (a command, or with ``inner`` the command another one runs: any
    program) into ``checks``; add to ``needs`` what it needs that must be marked."""
    program = words[0] if words[0] in (".", "source") else Path(words[0]).name
    if program in ("python", "python3") and words[1:2] == ["-m"] and len(words) > 2:
        if words[2] == "chainermn_rt":
            return check(command, ["chainermn-rt", *words[3:]], checks, needs, inner)
        needs.update({"a GPU"} if words[2] in GPU_PROGRAMS else set())
        checks.parse.append((command, ["python", "-m", *words[2:]]))
    elif program in ("python", "python3") and words[1:2] == ["-c"]:
        pass
    elif program in ("python", "python3") and len(words) > 1:
        script = _in_checkout(words[1])
        if script is not None:
            name = ".".join(script.relative_to(REPO).with_suffix("").parts)
            needs.update({"a GPU"} if name in GPU_PROGRAMS else set())
            checks.parse.append((command, ["python", str(script), *words[2:]]))
    elif program == "chainermn-rt":
        sub = words[1:3]
        if (sub[:1] and sub[0] in SLURM_COMMANDS and "--dry-run" not in words
                or sub in (["site", "init"], ["site", "reframe"])
                or sub == ["site", "check"] and "--live" in words
                or sub[:1] == ["doctor"] and "--site" in words):
            needs.add("Slurm")
        checks.parse.append((command, ["chainermn-rt", *words[1:]]))
        if not command.in_text and not needs and any(tuple(words[1:1 + len(s)]) == s
                                                     for s in RUN_AS_SHOWN):
            checks.run.append(command)
        if "--" in words and sub[:1] in (["render"], ["submit"]):
            check(command, words[words.index("--") + 1:], checks, needs, inner=True)
    elif program == "make":
        checks.make.append((command, [w for w in words[1:] if w != "..."]))
    elif program in ("mpirun", "srun"):
        if program == "srun":
            needs.add("Slurm")
        i = 1
        while i < len(words) and words[i].startswith("-"):
            i += 2 if words[i] in SRUN_VALUE_OPTIONS | {"-np"} else 1
        if i < len(words):
            check(command, words[i:], checks, needs, inner=True)
    elif program in SLURM_CLIENTS:
        needs.add("Slurm")
    elif program in (".", "source"):
        if not (REPO / words[1]).is_file():
            needs.add("Slurm")  # build/sandbox/env.sh: written by `sandbox up`
    elif program != "cat" and not inner:
        checks.problems.append(f"{command.where}: {command.text}: a program this test does "
                               "not know; check it in check() or mark the command")


def _all_checks(docs: list[Path] = DOCS) -> Checks:
    checks = Checks()
    for path in docs:
        for command in shell_commands(path):
            needs: set[str] = set()
            check(command, _words(command), checks, needs)
            wanted = {"Slurm": ("a cluster", "the sandbox"), "a GPU": ("a GPU",)}
            for need in needs:
                if command.mark not in wanted[need]:
                    checks.problems.append(
                        f"{command.where}: {command.text}: needs {need}; say so in its comment "
                        f"({' or '.join(f'needs {m}' for m in wanted[need])})")
        for command in text_commands(path):
            words = _words(command)
            bare = Path(words[0]).name != "make" and len(words) == (3 if words[1:2] == ["-m"]
                                                                    else 2)  # a name
            if not (bare or _placeholders(words)):
                check(command, words, checks, set())
            elif Path(words[0]).name in ("python", "python3"):
                _look_up(command, words, checks)
    return checks


def _look_up(command: Command, words: list[str], checks: Checks) -> None:
    """A command with placeholders: its program only."""
    if words[1] == "-m":
        path = REPO.joinpath(*words[2].split("."))
        found = path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()
    else:
        found = (REPO / words[1]).is_file()
    if not found:
        checks.problems.append(f"{command.where}: {command.text}: no such program")


@pytest.fixture(scope="module")
def checks() -> Checks:
    return _all_checks()


def test_each_command_is_known_and_what_it_needs_is_said(checks):
    assert checks.problems == [], "\n".join(checks.problems)


def _refused(parse: list[tuple[Command, list[str]]]) -> list[str]:
    """What the programs said of the argument lists they did not accept."""
    argvs = [argv for _, argv in parse]
    proc = subprocess.run([PYTHON, str(REPO / "tests/programs/parse_only.py")], cwd=REPO,
                          input=json.dumps(argvs), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(argvs), proc.stdout + proc.stderr
    return [f"{command.where}: {shlex.join(argv)}: {result['said']}"
            for (command, argv), result in zip(parse, results, strict=True) if not result["ok"]]


def test_each_program_accepts_the_arguments_shown(checks):
    refused = _refused(checks.parse)
    assert refused == [], "\n".join(refused)


def test_each_make_command_names_targets_make_has(checks):
    refused = []
    for command, args in checks.make:
        proc = subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=60)
        if proc.returncode != 0:
            refused.append(f"{command.where}: make {shlex.join(args)}: {proc.stderr.strip()}")
    assert refused == [], "\n".join(refused)


def test_the_quick_offline_commands_run_as_shown(checks, tmp_path):
    assert checks.run, "none found: RUN_AS_SHOWN no longer matches the docs"
    env = {**os.environ, "PATH": f"{Path(PYTHON).parent}:{os.environ['PATH']}"}
    for i, command in enumerate(checks.run):
        folder = tmp_path / str(i)
        folder.mkdir()
        proc = subprocess.run(["bash", "-c", command.text], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{command.where}: {command.text}\n{proc.stderr}"


def test_what_the_checks_find(tmp_path):
    """Unmarked Slurm and GPU commands, an unknown program, a script run by its path that
    imports its package, a misspelt option: each found; marked or right ones pass."""
    doc = tmp_path / "doc.md"
    doc.write_text("Run `python bench/allreduce.py --repeat 9` or `python -m bench.allreduce "
                   "--repeat 9`.\n\n```sh\nsrun -N 2 hostname\nfrobnicate --now\n"
                   "python3 tests/gpu_check.py --out x\n"
                   "# on the cluster (these need a cluster):\nsbatch job.sh\n"
                   "chainermn-rt doctor --site dgx-h100 --nodes 2\n\n"
                   "chainermn-rt render --site dgx-h100 --nodez 2 -- true\n```\n")
    found = _all_checks([doc])
    assert [p.split(": ", 1)[0] for p in found.problems] == [f"{doc}:4", f"{doc}:5", f"{doc}:6"]
    assert [p.rsplit("; ", 1)[-1] for p in found.problems] == [
        "say so in its comment (needs a cluster or needs the sandbox)",
        "check it in check() or mark the command", "say so in its comment (needs a GPU)"]
    refused = _refused(found.parse)
    assert [r.split(": ", 1)[0] for r in refused] == [f"{doc}:11", f"{doc}:1"], refused
    assert "chainermn-rt render: error: the following arguments are required: --nodes" in refused[0]
    assert "No module named 'bench'" in refused[1]
