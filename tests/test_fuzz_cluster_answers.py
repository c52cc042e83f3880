"""Damaged answers from a cluster, generated: what Slurm's client commands (``scontrol show
config|partition|node|hostnames``, ``srun --mpi=list``, ``srun --help``) and a node's probe step
(lstopo's XML, the NVIDIA driver's information files, ``nvidia-smi topo -m``, the route) print,
with bytes that are not UTF-8, control characters, huge, negative and non-ASCII numbers, deep
XML. ``site init``, ``site check --live`` and ``site reframe --scheduler auto`` either succeed
(and what they write loads) or refuse in 1-3 lines naming the node, field or command, with no
traceback and nothing written. A damaged answer is the environment's fault, never the person's:
exit 3 (as for a command that does not answer, a step cut short); 1 where sound answers
disagree (Slurm and the hardware, a partition's nodes); 2 only for the person's ``--partition``
that the cluster's answer does not name.

Slurm answers through stub ``scontrol`` and ``srun`` on PATH (as in
tests/test_site_init_command.py, whose DGX H100 cluster is the base): each prints a file the
test writes, so any bytes can be an answer, or sleeps to stand for a command that hangs. The
probe step's base answer holds lstopo's XML as the real lstopo writes it for that node.

CI: a few dozen fixed cases per property. To search further:
``FUZZ_EXAMPLES=2000 FUZZ_RANDOM=1 pytest tests/test_fuzz_cluster_answers.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from hwloc_fixtures import GPU_BUSIDS, dgx_h100
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from test_site_init_command import CONFIG, MPI_LIST, NODES, PARTITIONS

from chainermn_rt import cli, slurm_client, slurm_records
from chainermn_rt.errors import EnvironmentProblem
from chainermn_rt.site import load_site
from chainermn_rt.site_init import node_report, survey

from conftest import folder_contents, require_commands

SOME = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 40)), deadline=None,
                derandomize=os.environ.get("FUZZ_RANDOM") != "1",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

# Each stub prints $STUB/<answer>, or sleeps when $STUB/hang names that answer.
ANSWER = """
[ "$(cat "$STUB/hang" 2>/dev/null)" = "$a" ] && exec sleep 3600
exec cat "$STUB/$a"
"""
SCONTROL = """#!/bin/sh
echo "scontrol $*" >> "$STUB/calls"
case "$*" in
  "show config") a=config ;;
  "show partition -o") a=partitions ;;
  "show node -o") a=nodes ;;
  "show hostnames "*) a=hostnames ;;
  *) echo "scontrol: unexpected $*" >&2; exit 1 ;;
esac""" + ANSWER
SRUN = """#!/bin/sh
echo "srun $*" >> "$STUB/calls"
case "$1" in
  --mpi=list) a=mpi-list ;;
  --help) a=help ;;
  *) a=probe ;;
esac""" + ANSWER

INFORMATION = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 123\nBus Location: \t {bus}\n" \
              "Device Minor: \t {minor}\nGPU Excluded:\t No\n"
TOPO = "\t" + "\t".join(f"GPU{i}" for i in range(8)) + "\tCPU Affinity\tNUMA Affinity\n" + \
    "".join(f"GPU{i}\t" + "\t".join(" X " if j == i else "NV18" for j in range(8))
            + f"\t{56 * (i // 4)}-{56 * (i // 4) + 55}\t{i // 4}\n" for i in range(8)) + \
    "\nLegend:\n\n  X    = Self\n"


def _probe_answer(xml: str) -> str:
    """What the probe script prints on a DGX H100 node: every section it has."""
    mark = node_report.MARK
    parts = [("hostname", "dgx02"), ("lstopo", xml),
             ("ib", "/sys/class/infiniband/mlx5_0/ports/1|4: ACTIVE|400 Gb/sec (4X NDR)|"
                    "InfiniBand")]
    parts += [("nvidia", INFORMATION.format(bus=bus.upper(), minor=i))
              for i, bus in enumerate(GPU_BUSIDS)]
    parts += [("nvidia-smi", TOPO), ("runtimes", "apptainer"),
              ("enroot-command", "/usr/bin/enroot"),
              ("enroot-paths", "  ENROOT_SYSCONF_PATH=/etc/enroot"),
              ("enroot-hooks", "x /etc/enroot/hooks.d/50-slurm-pmi.sh"), ("enroot-run", ""),
              ("route", "10.0.0.1 dev enp25s0np0 src 10.0.0.12 uid 0 \\    cache"), ("end", "")]
    return "".join(f"{mark}{name}\n{body}\n" for name, body in parts)


class Answers(dict):
    """{answer's name: its bytes}, with a short repr for hypothesis' reports."""

    def __repr__(self) -> str:
        return f"<answers {', '.join(self)}>"


@pytest.fixture(scope="module")
def base() -> Answers:
    """The answers of a sound DGX H100 cluster (site init --partition batch succeeds)."""
    require_commands("lstopo-no-graphics")
    xml = subprocess.run(["lstopo-no-graphics", "--input", "-", "--if", "xml", "--of", "xml"],
                         input=dgx_h100(), capture_output=True, text=True, check=True).stdout
    return Answers(config=CONFIG.encode(), partitions=PARTITIONS.encode(),
                   nodes=NODES.encode(), hostnames=b"dgx01\ndgx02\n",
                   help=b"  --mpi=MPI_TYPE\n", probe=_probe_answer(xml).encode(),
                   **{"mpi-list": MPI_LIST.encode()})


class Cluster:
    """The stub commands on PATH, their answers, and a folder to write into."""

    def __init__(self, root: Path, monkeypatch, capsys):
        self.stub, self.out, self.capsys = root / "stub", root / "out", capsys
        (self.stub / "bin").mkdir(parents=True)
        self.out.mkdir()
        (self.out / "kept.toml").write_text("name = 'kept'\n")
        for name, text in (("scontrol", SCONTROL), ("srun", SRUN)):
            (self.stub / "bin" / name).write_text(text)
            (self.stub / "bin" / name).chmod(0o755)
        monkeypatch.setenv("PATH", f"{self.stub / 'bin'}:/usr/bin:/bin")
        monkeypatch.setenv("STUB", str(self.stub))

    def answer(self, answers: dict[str, bytes], hang: str = "") -> None:
        for name, data in answers.items():
            (self.stub / name).write_bytes(data)
        (self.stub / "hang").write_text(hang)
        (self.stub / "calls").write_text("")

    def run(self, *argv: str) -> tuple[int, str, str]:
        """``chainermn-rt ARGV`` here: (status, stdout, stderr); an exception it lets escape
        fails the test with its traceback."""
        self.capsys.readouterr()
        status = cli.main(list(argv))
        out, err = self.capsys.readouterr()
        return status, out, err

    def calls(self) -> list[str]:
        return (self.stub / "calls").read_text().splitlines()


@pytest.fixture
def cluster(tmp_path, monkeypatch, capsys) -> Cluster:
    return Cluster(tmp_path, monkeypatch, capsys)


# What each exit status may say: 1, sound answers disagree (Slurm and the hardware, a
# partition's nodes); 2, the person's --partition is not among the partitions Slurm named; 3,
# anything else (the environment), naming where the bad answer came from.
DISAGREE = re.compile(r"partition \S+: its nodes differ|\S+: Slurm has \d+ GPUs|\S+: hwloc "
                      r"numbers its CPUs|partition \S+: it has no nodes|node \S+: in a "
                      r"partition's Nodes but not in scontrol show node")
PERSON = re.compile(r"--partition: 'batch' is not a partition of this cluster; allowed: ")
NAMED = re.compile(r"(node |partition |scontrol|srun|lstopo|nvidia|/proc/driver|the probe|Nodes="
                   r"|MaxTime|ClusterName|SlurmctldHost|dgx\d+: )")


def check_outcome(cluster: Cluster, status: int, out: str, err: str, command: str,
                  written: Path | None, before: dict) -> None:
    """Success (with a file that loads, where the command writes one), or a refusal of 1-3
    lines with no traceback and nothing written; no control character reaches the terminal."""
    if currently_in_test_context():  # pytest --hypothesis-show-statistics counts them
        event(f"exit {status}")
    assert "Traceback" not in out + err
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]", out + err), (out, err)
    if status == 0:
        assert err == "", err
        if written is not None:
            if written.suffix == ".toml":
                load_site(written)
            else:
                compile(written.read_text(), str(written), "exec")
            written.unlink()
        assert folder_contents(cluster.out) == before
        return
    assert folder_contents(cluster.out) == before
    if status == 1 and command == "site check":  # differences, one line each
        assert out.splitlines()[-1].startswith("live: ") and err == "", (out, err)
        return
    lines = err.splitlines()
    assert 1 <= len(lines) <= 3 and err.endswith("\n"), err
    assert lines[0].startswith(f"chainermn-rt {command.split()[0]}: error: "), err
    message = lines[0].split(": error: ", 1)[1]
    assert status in (1, 2, 3), (status, err)
    if status == 1:
        assert DISAGREE.match(message), message
    elif status == 2:
        assert PERSON.match(message), message
    else:
        assert NAMED.match(message), message


def init(cluster: Cluster, answers: dict[str, bytes], hang: str = "") -> tuple:
    cluster.answer(answers, hang)
    before = folder_contents(cluster.out)
    written = cluster.out / "new.toml"
    status, out, err = cluster.run("site", "init", "--partition", "batch", "--output",
                                   str(written))
    check_outcome(cluster, status, out, err, "site init", written, before)
    return status, out, err


# -- generated damage ---------------------------------------------------------------------------
class Lazy:
    """A large value made only when used, with a short repr for hypothesis' reports."""

    def __init__(self, label: str, make):
        self.label, self.make = label, make

    def __repr__(self) -> str:
        return self.label


def many(unit: bytes, count: int) -> Lazy:
    return Lazy(f"{unit!r} * {count}", lambda: unit * count)


def raw(value) -> bytes:
    return value.make() if isinstance(value, Lazy) else value


NUMBERS = st.sampled_from([b"abc", b"", b"-1", b"0", b"4", b"112", b"9" * 20, many(b"9", 5000),
                           "\u0663".encode(), "\u00b2".encode(), b"1e3", b"0x10", b"112\xff",
                           b"65537", b"18446744073709551616", b"1,5", b"+5"])
JUNK = st.one_of(
    st.sampled_from([b"\xff", b"\xfe\xff", b"\x00", b"\x1b[31m", b"\r", b"\n", b"\xc2\x85",
                     "\u2028".encode(), b"\xc3", "\u0663".encode(), many(b"9", 5000), b"-1", b"",
                     b" ", b"&#10;", b"\t", b"$(touch CANARY)", b"--help", b"(null)"]),
    st.binary(max_size=16), NUMBERS)
GRES = st.sampled_from([b"gpu:999999999", b"gpu:h100:999999999(S:0-1)", b"gpu:h100:64,gpu:a:1",
                        b"gpu:h100:\xd9\xa3", b"gpu", b"gpu:a:b:c:8", b"(null)", b"gpu:h\x1b:8",
                        b"gpu:4", b"gpu:h100:8(S:0-1", many(b",", 5000),
                        Lazy("gpu:h100:8,x:1...", lambda: b"gpu:h100:8" + b",x:1" * 2000),
                        Lazy("gpu:h100:8(S:,,,...", lambda: b"gpu:h100:8(S:" + b"," * 5000)]) | JUNK
TIMES = st.sampled_from([many(b"9", 5000), b"UNLIMITED", b"1-99:99:99", "\u0663:00".encode(), b"-1",
                         b"1:2:3:4", b"INFINITE", b"2-00:00:00\x00"]) | JUNK
RECORD_FIELDS = {  # answer -> {field: values}
    "nodes": {"CPUTot": NUMBERS, "RealMemory": NUMBERS, "Gres": GRES, "State": JUNK,
              "NodeName": JUNK},
    "partitions": {"MaxTime": TIMES, "Nodes": JUNK | st.sampled_from(
        [b"dgx[01-02]\x00", b"-x", b"dgx[01-02],\xff", b"dgx[01-99999999]"]),
        "Default": JUNK, "PartitionName": JUNK},
    "config": {"ClusterName": JUNK, "SlurmctldHost[0]": JUNK | st.sampled_from(
        [b"head(-rf)", b"head(10.0.0.1", b"(\n)"]), "AccountingStorageType": JUNK},
}


def set_field(text: bytes, key: str, value: bytes, which: int) -> bytes:
    """``text`` with the value of its ``which``-th ``KEY=VALUE`` (or ``KEY = VALUE`` line)
    replaced."""
    found = list(re.finditer(rb"(?:^|(?<= ))" + re.escape(key.encode()) + rb"( *= *)(\S*)",
                             text, re.M))
    if not found:
        return text + key.encode() + b"=" + value + b"\n"
    m = found[which % len(found)]
    return text[:m.start(2)] + value + text[m.end(2):]


@st.composite
def damaged_records(draw):
    """One to three of Slurm's answers (records, host names, MPI plugins, help) damaged."""
    changes = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["field", "field", "field", "hostnames", "bytes", "cut",
                                     "replace"]))
        if kind == "field":
            answer = draw(st.sampled_from(sorted(RECORD_FIELDS)))
            key = draw(st.sampled_from(sorted(RECORD_FIELDS[answer])))
            changes.append((kind, answer, key, draw(RECORD_FIELDS[answer][key]),
                            draw(st.integers(0, 5))))
        elif kind == "hostnames":
            names = draw(st.lists(st.sampled_from([b"dgx01", b"dgx02", b"dgx03"]) | JUNK,
                                  max_size=4))
            changes.append((kind, "hostnames", names))
        else:
            answer = draw(st.sampled_from(["config", "partitions", "nodes", "hostnames",
                                           "mpi-list", "help"]))
            changes.append((kind, answer, draw(JUNK), draw(st.integers(0, 10 ** 6))))
    return changes


def apply(base: dict[str, bytes], changes: list) -> dict[str, bytes]:
    answers = dict(base)
    for change in changes:
        kind, answer = change[:2]
        text = answers[answer]
        if kind == "field":
            answers[answer] = set_field(text, change[2], raw(change[3]), change[4])
        elif kind == "hostnames":
            answers[answer] = b"\n".join(map(raw, change[2]))
        elif kind == "bytes":
            at = change[3] % (len(text) + 1)
            answers[answer] = text[:at] + raw(change[2]) + text[at:]
        elif kind == "cut":
            answers[answer] = text[:change[3] % (len(text) + 1)]
        else:
            answers[answer] = raw(change[2])
    return answers


@SOME
@given(damaged_records())
@example([("field", "nodes", "CPUTot", b"abc", 1)])
@example([("field", "nodes", "RealMemory", b"abc", 1)])
@example([("field", "nodes", "Gres", b"gpu:999999999", 1)])
@example([("field", "nodes", "CPUTot", "\u0663".encode(), 1)])
@example([("replace", "mpi-list", Lazy("newlines", lambda: b"\xff\xfe" + b"\n" * 100_000), 0)])
@example([("field", "config", "SlurmctldHost[0]", b"head(-rf)", 0)])
def test_damaged_slurm_answers_are_read_or_refused_in_one_line(cluster, base, changes):
    init(cluster, apply(base, changes))


# -- the probe step: lstopo XML, the driver's files, nvidia-smi, the route ----------------------
ATTRIBUTES = ["cpuset", "os_index", "pci_busid", "name", "type", "pci_type", "bridge_type",
              "osdev_type"]
ATTRIBUTE_VALUES = JUNK | st.sampled_from(
    [b"0x00000001,,0x0", b"0xf...f", b"0x" + b"f" * 9,
     Lazy("3000 words", lambda: b",".join([b"0xffffffff"] * 3000)),
     b"0000:1b:00.0&#10;[environment]", b"mlx5_0&#27;", b"Core", b"NUMANode", b"65536",
     b"0302 [10de:2330]", b"1-1", b"3"])


def deep(depth: int) -> Lazy:
    return Lazy(f"deep({depth})", lambda: b'<topology version="2.0">'
                + b'<object type="Machine" os_index="0">' * depth + b"</object>" * depth
                + b"</topology>")


@st.composite
def damaged_probes(draw):
    """The probe step's answer with one or two of its parts damaged."""
    changes = []
    for _ in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["attribute", "attribute", "xml", "information",
                                     "information", "numa", "route", "ib", "bytes", "cut"]))
        if kind == "attribute":
            changes.append((kind, draw(st.sampled_from(ATTRIBUTES)), draw(ATTRIBUTE_VALUES),
                            draw(st.integers(0, 2000))))
        elif kind == "xml":
            changes.append((kind, draw(st.sampled_from([
                b'<topology version="2.0"/>', b"<topology", b"", b"not xml", b"<x/>",
                b'<topology version="2.0"><object type="Machine" os_index="0"/></topology>',
                b'<!DOCTYPE t [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">'
                b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;">]><topology>&c;</topology>',
                b'<!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]><topology>&x;'
                b"</topology>"]) | st.integers(65, 50_000).map(deep) | st.binary(max_size=64))))
        elif kind == "information":
            changes.append((kind, draw(st.integers(0, 7)), draw(st.sampled_from(
                ["Device Minor", "Bus Location"])), draw(JUNK | st.sampled_from(
                    [None, b"0", b"255", b"7", b"0000:1B:00.0"]))))
        elif kind == "numa":
            changes.append((kind, draw(st.integers(0, 7)), draw(JUNK | st.sampled_from(
                [b"N/A", b"0-1", "\u00b2".encode(), b"7"]))))
        elif kind in ("route", "ib"):
            changes.append((kind, draw(JUNK)))
        else:
            changes.append((kind, draw(JUNK), draw(st.integers(0, 10 ** 6))))
    return changes


def damage_probe(text: bytes, changes: list) -> bytes:
    for change in changes:
        kind = change[0]
        if kind == "attribute":
            found = list(re.finditer(rb" " + change[1].encode() + rb'="([^"]*)"', text))
            if found:
                m = found[change[3] % len(found)]
                text = text[:m.start(1)] + raw(change[2]).replace(b'"', b"&quot;") + \
                    text[m.end(1):]
        elif kind == "xml":  # (an earlier change may have cut the section away)
            m = re.search(re.escape(node_report.MARK.encode()) + rb"lstopo\n(.*?)"
                          + re.escape(node_report.MARK.encode()), text, re.S)
            if m:
                text = text[:m.start(1)] + raw(change[1]) + b"\n" + text[m.end(1):]
        elif kind == "information":
            _, gpu, key, value = change
            found = list(re.finditer(re.escape(key.encode()) + rb": \t ([^\n]*)\n", text))
            if len(found) > gpu:
                m = found[gpu]
                text = text[:m.start()] + text[m.end():] if value is None else \
                    text[:m.start(1)] + raw(value) + text[m.end(1):]
        elif kind == "numa":
            found = list(re.finditer(rb"\t[0-9]+-[0-9]+\t([0-9]+)\n", text))
            if len(found) > change[1]:
                m = found[change[1]]
                text = text[:m.start(1)] + raw(change[2]) + text[m.end(1):]
        elif kind == "route":
            text = text.replace(b"dev enp25s0np0", b"dev " + raw(change[1]))
        elif kind == "ib":
            text = text.replace(b"ports/1|4: ACTIVE", b"ports/" + raw(change[1]) + b"|4: ACTIVE")
        elif kind == "bytes":
            at = change[2] % (len(text) + 1)
            text = text[:at] + raw(change[1]) + text[at:]
        else:
            text = text[:change[2] % (len(text) + 1)]
    return text


@SOME
@given(damaged_probes())
@example([("xml", deep(100_000))])
@example([("xml", b'<topology version="2.0"/>')])
@example([("information", 3, "Device Minor", None)])
@example([("numa", 5, "\u0663".encode())])
@example([("attribute", "pci_busid", b"0000:1b:00.0&#10;[environment]", 0)])
@example([("attribute", "cpuset", Lazy("3000 words", lambda: b",".join([b"0xffffffff"] * 3000)),
            3)])
@example([("cut", b"", 5000)])
def test_a_damaged_probe_answer_is_read_or_refused_in_one_line(cluster, base, changes):
    init(cluster, {**base, "probe": damage_probe(base["probe"], changes)})


@SOME
@given(damaged_records())
@example([("field", "nodes", "CPUTot", b"abc", 0)])
@example([("field", "partitions", "TotalNodes", many(b"9", 5000), 0)])
def test_site_check_live_reads_damaged_answers_or_refuses_in_one_line(cluster, base, changes):
    """``site check --live`` (chainermn_rt.live) against the same damaged records."""
    cluster.answer(apply(base, changes))
    before = folder_contents(cluster.out)
    status, out, err = cluster.run("site", "check", "dgx-h100", "--live")
    check_outcome(cluster, status, out, err, "site check", None, before)


def reframe(cluster: Cluster, answers: dict[str, bytes]) -> tuple[int, str]:
    """``site reframe --scheduler auto``: (status, the scheduler written or the error line);
    a refusal is one line, exit 3, naming scontrol show config, with nothing written."""
    cluster.answer(answers)
    before = folder_contents(cluster.out)
    written = cluster.out / "reframe.py"
    status, out, err = cluster.run("site", "reframe", "--site", "dgx-h100", "--output",
                                   str(written))
    if currently_in_test_context():
        event(f"exit {status}")
    assert "Traceback" not in out + err
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]", out + err), (out, err)
    if status == 0:
        assert err == "", err
        text = written.read_text()
        compile(text, str(written), "exec")
        written.unlink()
        err = re.search(r"'scheduler': '(squeue|slurm)'", text).group(1)
    else:
        assert status == 3 and err.startswith("chainermn-rt site: error: scontrol show config: ")
        assert err.count("\n") == 1 and err.endswith("\n"), err
    assert folder_contents(cluster.out) == before
    return status, err


@SOME
@given(st.one_of(JUNK, st.binary(max_size=200), st.builds(
    lambda at, junk: Lazy(f"CONFIG[:{at}] + {junk!r} + ...",
                          lambda: CONFIG.encode()[:at] + raw(junk) + CONFIG.encode()[at:]),
    st.integers(0, len(CONFIG)), JUNK)))
@example(b"AccountingStorageType = accounting_storage/\xffslurmdbd\n")
@example(b"\x00\xff\xfe\x1b[31m")
def test_site_reframe_reads_a_show_config_answer_or_refuses_it(cluster, base, config):
    """``site reframe --scheduler auto`` asks ``scontrol show config``: an answer holding
    Slurm's AccountingStorageType gives a configuration (squeue without accounting, else
    slurm); any other is refused, exit 3, nothing written."""
    text = raw(config).decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    kind = slurm_records.config(text).get("AccountingStorageType", "")
    status, said = reframe(cluster, {**base, "config": raw(config)})
    assert (status == 0) == bool(re.fullmatch(r"accounting_storage/[a-z0-9_]+", kind)), kind
    if status == 0:
        assert said == ("squeue" if kind == "accounting_storage/none" else "slurm"), kind


# -- each named case, plainly -------------------------------------------------------------------
def refused(cluster: Cluster, answers: dict[str, bytes], status: int, line: str) -> None:
    got = init(cluster, answers)
    assert got[0] == status and got[2] == f"chainermn-rt site: error: {line}\n", got[2]


def test_the_base_answers_make_a_profile(cluster, base):
    status, out, err = init(cluster, base)
    assert status == 0, err
    assert "srun -N1 -n1 --exclusive --partition=batch --nodelist=dgx02" in \
        "\n".join(cluster.calls())


def test_bytes_that_are_not_utf8_are_replaced_where_they_do_not_matter(cluster, base):
    """scontrol show config, srun --mpi=list, srun --help and the probe step's hostname hold
    bytes that are not UTF-8: decoded with replacement characters, the profile is written."""
    answers = {**base, "config": b"# \xff\xfe\n" + base["config"],
               "mpi-list": b"\xff\n" + base["mpi-list"], "help": b"\xc3\x28 --mpi\n",
               "probe": base["probe"].replace(b"\ndgx02\n", b"\ndgx\xff02\n")}
    status, out, err = init(cluster, answers)
    assert status == 0 and "wrote " in out, err


@pytest.mark.parametrize("answer, key, value, line", [
    ("nodes", "CPUTot", b"abc", "node dgx01: CPUTot=abc; allowed: a whole number 0-65536"),
    ("nodes", "CPUTot", b"99999999999999999999", "node dgx01: CPUTot=99999999999999999999; "
                                                 "allowed: a whole number 0-65536"),
    ("nodes", "CPUTot", "\u0663".encode(), "node dgx01: CPUTot=\u0663; allowed: a whole number "
                                           "0-65536"),
    ("nodes", "RealMemory", b"abc", "node dgx01: RealMemory=abc; allowed: a whole number "
                                    "0-1073741824"),
    ("nodes", "RealMemory", b"\x1b[31m", "node dgx01: RealMemory='\\x1b[31m'; allowed: a whole "
                                         "number 0-1073741824"),
    ("nodes", "Gres", b"gpu:999999999", "node dgx01: Gres=gpu:999999999: 999999999 GPUs; "
                                        "allowed: at most 64 in a node"),
    ("nodes", "Gres", b"gpu:h100:\xd9\xa3", "node dgx01: Gres=gpu:h100:\u0663: a gpu entry "
                                            "without a GPU count; allowed: gpu[:TYPE]:COUNT"),
    ("config", "ClusterName", b"dgx\x1b", "scontrol show config: ClusterName='dgx\\x1b'; "
                                          "allowed: letters, digits, '.', '_', '-' (or give "
                                          "--name)"),
    ("partitions", "MaxTime", b"9" * 5000, "partition batch: MaxTime: '" + "9" * 80 + "'... is "
                                           "not a Slurm time; allowed: MIN, MIN:SEC, HH:MM:SS, "
                                           "D-HH, D-HH:MM, D-HH:MM:SS"),
])
def test_a_damaged_record_names_the_node_and_field(cluster, base, answer, key, value, line):
    refused(cluster, {**base, answer: set_field(base[answer], key, value, 0)}, 3, line)


def test_a_node_name_that_is_not_one_is_refused(cluster, base):
    refused(cluster, {**base, "hostnames": b"dgx01\ndgx\x1b02\n"}, 3,
            "partition batch: scontrol show hostnames dgx[01-02]: 'dgx\\x1b02' is not a node "
            "name; allowed: letters, digits, '.', '_', '-'")


def test_deep_lstopo_xml_is_one_line_not_recursion(cluster, base):
    probe_text = damage_probe(base["probe"], [("xml", deep(200_000))])
    refused(cluster, {**base, "probe": probe_text}, 3, "dgx02: lstopo --whole-system --of xml: "
            "nested deeper than 64 elements; allowed: hwloc 2 XML")


def test_lstopo_without_objects_is_one_line_not_zero_division(cluster, base):
    probe_text = damage_probe(base["probe"], [("xml", b'<topology version="2.0"/>')])
    refused(cluster, {**base, "probe": probe_text}, 3, "dgx02: lstopo --whole-system --of xml: "
            "no NUMA node with cores; allowed: the topology of the whole node (hwloc 2)")


def test_an_lstopo_attribute_holding_a_newline_is_refused(cluster, base):
    probe_text = damage_probe(base["probe"], [("attribute", "pci_busid",
                                               b"0000:1b:00.0&#10;[environment]", 0)])
    refused(cluster, {**base, "probe": probe_text}, 3, "dgx02: lstopo --whole-system --of xml: "
            "Bridge pci_busid='0000:1b:00.0\\n[environment]'; allowed: a PCI bus id such as "
            "0000:1b:00.0")


def test_a_driver_file_without_device_minor_is_one_line(cluster, base):
    probe_text = damage_probe(base["probe"], [("information", 3, "Device Minor", None)])
    refused(cluster, {**base, "probe": probe_text}, 3, "dgx02: /proc/driver/nvidia/gpus/*/"
            "information (GPU file 4 of 8): no 'Device Minor'; allowed: the NVIDIA driver's "
            "information file")


def test_two_gpus_with_one_minor_are_refused(cluster, base):
    probe_text = damage_probe(base["probe"], [("information", 3, "Device Minor", b"0")])
    refused(cluster, {**base, "probe": probe_text}, 3, "dgx02: /proc/driver/nvidia/gpus/*/"
            "information: two GPUs with one device minor; allowed: each GPU's own")


def test_a_non_ascii_digit_in_nvidia_smis_numa_affinity_is_one_line(cluster, base):
    probe_text = damage_probe(base["probe"], [("numa", 5, "\u0663".encode())])
    refused(cluster, {**base, "probe": probe_text}, 3, "dgx02: nvidia-smi topo -m: GPU5: NUMA "
            "Affinity \u0663; allowed: a NUMA node number or N/A")


def test_a_probe_cut_short_is_the_environment(cluster, base):
    refused(cluster, {**base, "probe": base["probe"][:3000]}, 3,
            "dgx02: the probe did not finish (its last section is missing)")


def test_hwloc_missing_on_the_node_is_the_environment(cluster, base):
    probe_text = damage_probe(base["probe"], [("xml", b"")])
    refused(cluster, {**base, "probe": probe_text}, 3,
            "dgx02: lstopo --whole-system --of xml gave no topology; install hwloc there")


def test_cpus_hwloc_numbers_past_cputot_are_a_disagreement(cluster, base):
    refused(cluster, {**base, "nodes": set_field(set_field(base["nodes"], "CPUTot", b"64", 0),
                                                 "CPUTot", b"64", 1)}, 1,
            "dgx02: hwloc numbers its CPUs up to 111, Slurm's CPUTot is 64: a profile's CPU "
            "lists name CPUs 0-63 only")


@pytest.mark.parametrize("answer, data, line", [
    ("config", b"\x00\xff\xfe\x1b[31m\n", "scontrol show config: no SlurmctldHost[0]; allowed: a "
                                          "host name or an IP address, e.g. head(10.0.0.1)"),
    ("partitions", b"\xff\xfe\n\x00", "scontrol show partition -o: no PartitionName= record in "
                                      "its answer; run it where Slurm's scontrol reaches the "
                                      "cluster"),
    ("nodes", b"\xff\xfe\n\x00", "scontrol show node -o: no NodeName= record in its answer; run "
                                 "it where Slurm's scontrol reaches the cluster"),
    ("mpi-list", b"\xff\xfe\x00junk\n", "srun --mpi=list: exit 0, '\ufffd\ufffd\\x00junk': names "
                                        "no MPI plugin, not even none, which every Slurm lists; "
                                        "run it where Slurm's srun reaches the cluster"),
    ("mpi-list", b"", "srun --mpi=list: exit 0, nothing: names no MPI plugin, not even none, "
                      "which every Slurm lists; run it where Slurm's srun reaches the cluster"),
])
def test_binary_garbage_for_an_answer_is_the_environment(cluster, base, answer, data, line):
    """An answer that is not Slurm's at all is refused naming the command, exit 3, nothing
    written (srun --mpi=list's was once taken as "no pmix" and a profile written)."""
    refused(cluster, {**base, answer: data}, 3, line)


def test_a_gres_count_the_driver_contradicts_is_a_finding(cluster, base):
    refused(cluster, {**base, "nodes": base["nodes"].replace(b"gpu:h100:8", b"gpu:h100:4")}, 1,
            "dgx02: Slurm has 4 GPUs (Gres=gpu:h100:4(S:0-1)), the NVIDIA driver lists 8")


def test_a_node_slurm_names_but_does_not_describe_is_a_finding(cluster, base):
    refused(cluster, {**base, "hostnames": b"dgx01\ndgx09\n"}, 1,
            "node dgx09: in a partition's Nodes but not in scontrol show node")


@SOME
@given(JUNK | st.binary(max_size=200))
@example(b"\xff\xfe")
@example(b"srun: error: Invalid MPI type 'list'\n")
def test_srun_mpi_list_answers_are_read_or_refused_naming_it(cluster, base, answer):
    status, out, err = init(cluster, {**base, "mpi-list": raw(answer)})
    assert status == 0 or (status == 3 and err.startswith(
        "chainermn-rt site: error: srun --mpi=list: exit 0, ")), err


@pytest.mark.parametrize("config, said", [
    (b"\x00\xff\xfe\x1b[31m\n", "no AccountingStorageType"),
    (b"AccountingStorageType = accounting_storage/\xffslurmdbd\n",
     "AccountingStorageType=accounting_storage/\ufffdslurmdbd"),
])
def test_site_reframe_refuses_a_show_config_answer_that_is_not_slurms(cluster, base, config,
                                                                     said):
    assert reframe(cluster, {**base, "config": config}) == (
        3, f"chainermn-rt site: error: scontrol show config: {said}, which Slurm always prints "
           "as accounting_storage/NAME; run it where Slurm's scontrol reaches the cluster, or "
           "give --scheduler slurm|squeue\n")


@pytest.mark.parametrize("kind, scheduler", [("none", "squeue"), ("slurmdbd", "slurm")])
def test_site_reframe_follows_slurms_accounting(cluster, base, kind, scheduler):
    config = set_field(base["config"], "AccountingStorageType",
                       b"accounting_storage/" + kind.encode(), 0)
    assert reframe(cluster, {**base, "config": config}) == (0, scheduler)


def test_site_check_live_refuses_an_mpi_list_that_is_not_sruns(cluster, base):
    cluster.answer({**base, "mpi-list": b"\xff\n"})
    status, out, err = cluster.run("site", "check", "dgx-h100", "--live")
    assert (status, err) == (3, "chainermn-rt site: error: srun --mpi=list: exit 0, '\ufffd': "
                                "names no MPI plugin, not even none, which every Slurm lists; "
                                "run it where Slurm's srun reaches the cluster\n")


# -- commands that do not answer; answers too large ---------------------------------------------
@pytest.fixture
def quick(monkeypatch):
    """A command that never answers is given up on after 3 s (the stubs answer at once)."""
    monkeypatch.setattr(slurm_client, "ANSWER_S", 3.0)
    monkeypatch.setattr(survey, "PROBE_S", 3)


def test_a_hanging_srun_mpi_list_is_exit_3_naming_it(cluster, base, quick):
    status, out, err = init(cluster, base, hang="mpi-list")
    assert (status, err) == (3, "chainermn-rt site: error: srun --mpi=list: no answer in 3 s\n")


def test_a_hanging_probe_step_is_exit_3_naming_the_node(cluster, base, quick):
    status, out, err = init(cluster, base, hang="probe")
    assert (status, err) == (3, "chainermn-rt site: error: dgx02: the probe step (srun -N1 "
                                "--exclusive -w dgx02) did not end within 3 s; is the node "
                                "busy?\n")


def test_site_reframe_with_a_hanging_scontrol_is_exit_3(cluster, base, quick):
    cluster.answer(base, hang="config")
    before = folder_contents(cluster.out)
    status, out, err = cluster.run("site", "reframe", "--site", "dgx-h100", "--output",
                                   str(cluster.out / "r.py"))
    assert (status, err) == (3, "chainermn-rt site: error: scontrol show config: no answer in "
                                "3 s\n")
    assert folder_contents(cluster.out) == before


def test_no_answer_is_exit_3_and_still_a_timeout_for_callers_that_ask_again(cluster, base):
    cluster.answer(base, hang="config")
    with pytest.raises(subprocess.TimeoutExpired) as err:  # the sandbox's waits catch this
        slurm_client.Slurm().run(["scontrol", "show", "config"], timeout=1)
    assert isinstance(err.value, EnvironmentProblem) and err.value.exit_status == 3
    assert str(err.value) == "scontrol show config: no answer in 1 s"


def test_site_check_live_names_the_node_and_field(cluster, base):
    cluster.answer({**base, "nodes": set_field(base["nodes"], "RealMemory", b"12\xff", 0)})
    status, out, err = cluster.run("site", "check", "dgx-h100", "--live")
    assert (status, err) == (3, "chainermn-rt site: error: node dgx01: RealMemory=12\ufffd; "
                                "allowed: a whole number 0-1073741824\n")


def test_an_answer_past_the_limit_is_refused(cluster, base, monkeypatch):
    monkeypatch.setattr(slurm_client, "MAX_ANSWER_BYTES", 1 << 20)
    refused(cluster, {**base, "nodes": base["nodes"] * 10_000}, 3,
            "scontrol show node -o: printed more than 1 MiB; allowed: a Slurm client's answer, "
            "at most that")


# -- outputs checked before any question to Slurm -----------------------------------------------
@pytest.mark.parametrize("argv", [
    ["site", "init", "--partition", "batch", "--output", "/proc/x.toml"],
    ["site", "reframe", "--site", "dgx-h100", "--output", "/proc/x.py"],
])
def test_an_output_that_cannot_be_written_is_refused_before_the_survey(cluster, base, argv):
    cluster.answer(base)
    status, out, err = cluster.run(*argv)
    assert (status, err) == (2, f"chainermn-rt site: error: --output: {argv[-1]}: cannot make "
                                "a file in /proc (no such file or directory); allowed: a file "
                                "in a folder you can write\n")
    assert cluster.calls() == []  # Slurm was not asked
