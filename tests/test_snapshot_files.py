"""Snapshot sets on disk (chainermn_rt.snapshots.store and ``chainermn-rt snapshots``): written
whole, read back, and damaged ones refused with one line naming the file and field.

The generated cases start from a valid set and break it: the manifest replaced by any bytes or
JSON, a field removed, retyped, added or given a huge or empty value, a rank's file truncated,
extended, replaced or removed. ``chainermn-rt snapshots SET`` must then exit 2 with one line
and no traceback, and the set's bytes must be unchanged (the exactness of resumed training is
tested with real ranks in test_examples.py and test_resume_sandbox.py)."""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import warnings
import zipfile
from pathlib import Path

import numpy
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from chainermn_rt import cli
from chainermn_rt.files import sha256_file
from chainermn_rt.snapshots import SnapshotError, store

MANY = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 200)), deadline=None,
                derandomize=os.environ.get("FUZZ_RANDOM") != "1",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)


def write_set(directory: Path, iteration: int, size: int) -> Path:
    """A valid set as the extension writes it (temporary folder, files, then publish)."""
    tmp = store.temp_dir(directory, iteration)
    tmp.mkdir(parents=True)
    digests = {}
    for rank in range(size):
        data = store.npz_bytes({"w": numpy.full(3, rank, numpy.float32),
                                "updater/iteration": numpy.array(iteration)})
        store.write_file(tmp / store.rank_file(rank), data)
        digests[store.rank_file(rank)] = sha256_file(tmp / store.rank_file(rank))
    return store.publish(directory, iteration, digests)


def tree(path: Path) -> dict[str, bytes | str]:
    """Every file's bytes and every link's target under ``path``."""
    return {str(p.relative_to(path)): os.readlink(p) if p.is_symlink() else p.read_bytes()
            for p in sorted(path.rglob("*")) if p.is_symlink() or p.is_file()}


def snapshots_cli(path: Path, capsys) -> tuple[int, str, str]:
    status = cli.main(["snapshots", str(path)])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_set_is_published_whole_and_reads_back(tmp_path):
    path = write_set(tmp_path, 40, 3)
    assert path.name == "iter_000000040" and not store.temp_dir(tmp_path, 40).exists()
    data = store.check_set(path, world_size=3)
    assert data["files"].keys() == {"rank_00000.npz", "rank_00001.npz", "rank_00002.npz"}
    assert store.check_file(path, data, 2)["w"].tolist() == [2, 2, 2]
    assert sorted(p.name for p in path.iterdir() if p.name.startswith(".")) == []  # no .part


def test_newest_first_pruning_and_leftovers(tmp_path):
    for it in (10, 20, 30):
        write_set(tmp_path, it, 1)
    store.temp_dir(tmp_path, 40).mkdir()  # a write that never finished
    assert [p.name for p in store.complete_sets(tmp_path)] == \
        ["iter_000000030", "iter_000000020", "iter_000000010"]
    removed = store.prune(tmp_path, keep=2)
    assert sorted(p.name for p in removed) == [".iter_000000040.tmp", "iter_000000010"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_000000020", "iter_000000030"]


def test_the_cli_lists_sets_and_names_the_damaged_newest(tmp_path, capsys):
    write_set(tmp_path, 10, 2)
    newest = write_set(tmp_path, 20, 2)
    store.temp_dir(tmp_path, 30).mkdir()
    assert snapshots_cli(tmp_path, capsys)[:2] == (0, "iter_000000020  2 ranks  ok\n"
                                                   "iter_000000010  2 ranks  ok\n"
                                                   ".iter_000000030.tmp  incomplete (a write "
                                                   "that never finished; ignored)\n")
    (newest / "rank_00001.npz").write_bytes(b"")
    status, out, err = snapshots_cli(tmp_path, capsys)
    assert status == 2 and "iter_000000010  2 ranks  ok" in out
    assert err == (f"chainermn-rt snapshots: error: snapshot {newest}: rank_00001.npz: its "
                   "sha256 differs from the manifest's (damaged or truncated); allowed: the file "
                   "as written\n")


def test_a_set_from_another_world_size_is_refused(tmp_path):
    path = write_set(tmp_path, 10, 2)
    with pytest.raises(SnapshotError, match=r"world_size: written by 2 ranks, this job has 4; "
                                            r"allowed: the same number of ranks"):
        store.check_set(path, world_size=4)


# -- generated damage ---------------------------------------------------------------------------
FIELDS = ("format", "iteration", "world_size", "files")


@st.composite
def damage(draw):
    """(what to do to the manifest, what to do to rank 1's file)."""
    manifest = draw(st.one_of(
        st.just(None),
        st.tuples(st.just("bytes"), st.binary(max_size=64)),
        st.tuples(st.just("json"), JSON),
        st.tuples(st.just("drop"), st.sampled_from(FIELDS)),
        st.tuples(st.just("set"), st.sampled_from(FIELDS), JSON),
        st.tuples(st.just("add"), st.text(min_size=1, max_size=12).filter(
            lambda k: k not in FIELDS), JSON),
        st.tuples(st.just("huge"), st.sampled_from(FIELDS)),
        st.tuples(st.just("digest"), st.text(max_size=70)),
        st.tuples(st.just("deep"), st.integers(100, 200_000)),
        st.tuples(st.just("link"), st.sampled_from(LINKS)),
    ))
    file = draw(st.one_of(
        st.just(None), st.just(("remove",)),
        st.tuples(st.just("truncate"), st.integers(0, 200)),
        st.tuples(st.just("append"), st.binary(min_size=1, max_size=32)),
        st.tuples(st.just("replace"), st.binary(max_size=300)),
        st.tuples(st.just("link"), st.sampled_from(LINKS)),
    ))
    if manifest is None and (file is None or draw(st.booleans())):
        file = ("npz", draw(npz_members()))  # the manifest's digest follows: sha-consistent
    return manifest, file


LINKS = ("/dev/zero", "folder", "dangling", "itself")
DESCRS = ("<f4", "<f8", "|u1", "<i8", "|O", "<U3", "|V4", "[('a', '<f4')]", "bogus")


@st.composite
def npz_members(draw):
    """An .npz-like zip: members with any name, header (dtype, shape), compression and payload
    length, or a member whose header is arbitrary bytes: (name, descr, shape, data, compress);
    descr None for arbitrary bytes."""
    members = []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(["w.npy", "updater/iteration.npy", "w", "../x.npy"])
                    | st.text(st.characters(exclude_categories=("Cs",)), max_size=10))
        name = name.replace("\x00", "x") or "x"  # zipfile cuts a name at NUL
        shape = tuple(draw(st.lists(st.integers(0, 10**13) | st.integers(0, 4), max_size=3)))
        descr, header = None, draw(st.binary(max_size=64))
        if draw(st.booleans()):
            descr = draw(st.sampled_from(DESCRS))
            header = b"\x93NUMPY\x01\x00" + _padded(f"{{'descr': {descr!r}, 'fortran_order': "
                                                      f"False, 'shape': {shape!r}, }}")
        data = header + bytes(draw(st.integers(0, 64)))
        members.append((name, descr, shape, data, draw(st.booleans())))
    return members


def usable(members) -> bool:
    """Whether the generated zip is a valid .npz of arrays (then the set is valid again, with
    other arrays: which arrays a program needs is for its resume to say)."""
    names = [m[0] for m in members]
    if len(set(names)) != len(names) or not all(n.endswith(".npy") for n in names):
        return False
    for _, descr, shape, data, compress in members:
        try:
            dtype = numpy.dtype(descr)
        except (TypeError, ValueError):
            return False
        header = 10 + int.from_bytes(data[8:10], "little")
        if compress or dtype.hasobject or len(data) != header + math.prod(shape) * dtype.itemsize:
            return False
    return True


def _padded(text: str) -> bytes:
    body = text.encode() + b" " * (-(len(text) + 11) % 64) + b"\n"
    return len(body).to_bytes(2, "little") + body


def npz_of(members) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a duplicate name is damage too
        for name, _, _, data, compress in members:
            archive.writestr(name, data,
                             zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED)
    return buffer.getvalue()


def _link(path: Path, target: str) -> None:
    path.unlink()
    if target == "folder":
        (path.parent.parent / "elsewhere").mkdir(exist_ok=True)
        target = str(path.parent.parent / "elsewhere")
    elif target == "dangling":
        target = str(path.parent / "nowhere")
    elif target == "itself":
        target = str(path)
    path.symlink_to(target)


def apply(path: Path, manifest, file) -> None:
    where = path / store.MANIFEST
    data = json.loads(where.read_text())
    if manifest:
        kind, *rest = manifest
        written = False
        if kind == "bytes":
            where.write_bytes(rest[0])
            written = True
        elif kind == "json":
            data = rest[0]
        elif kind == "drop":
            del data[rest[0]]
        elif kind in ("set", "add"):
            data[rest[0]] = rest[1]
        elif kind == "huge":
            data[rest[0]] = 10 ** 30 if rest[0] != "files" else {"x" * 100: "0" * 64} | {
                f"k{i}": "" for i in range(30000)}
        elif kind == "digest":
            data["files"]["rank_00001.npz"] = rest[0]
        elif kind == "deep":
            where.write_text("[" * rest[0] + "]" * rest[0])
            written = True
        elif kind == "link":
            _link(where, rest[0])
            written = True
        if not written:
            where.write_text(json.dumps(data))
    target = path / store.rank_file(1)
    if file:
        kind, *rest = file
        if kind == "remove":
            target.unlink()
        elif kind == "truncate":
            target.write_bytes(target.read_bytes()[:rest[0]])
        elif kind == "append":
            target.write_bytes(target.read_bytes() + rest[0])
        elif kind == "replace":
            target.write_bytes(rest[0])
        elif kind == "link":
            _link(target, rest[0])
        else:  # a generated zip, its digest in the manifest
            target.write_bytes(npz_of(rest[0]))
            data["files"]["rank_00001.npz"] = sha256_file(target)
            where.write_text(json.dumps(data))


@MANY
@given(damage())
@example(case=(("json", []), None))
@example(case=(("set", "world_size", 0), None))
@example(case=(("set", "iteration", True), None))
@example(case=(("add", "\x1b[31m\n", 1), None))
@example(case=(("huge", "files"), None))
@example(case=(None, ("truncate", 0)))
@example(case=(("deep", 100_000), None))
@example(case=(("link", "/dev/zero"), None))
@example(case=(None, ("link", "/dev/zero")))
@example(case=(None, ("npz", [("w.npy", "<f8", (10**13,), b"\x93NUMPY\x01\x00" + _padded(
    "{'descr': '<f8', 'fortran_order': False, 'shape': (10000000000000,), }"), False)])))
@example(case=(None, ("npz", [("w.npy", "|O", (1,), b"\x93NUMPY\x01\x00" + _padded(
    "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }") + bytes(8), False)])))
def test_a_damaged_set_is_one_line_exit_2_and_nothing_written(tmp_path_factory, capsys, case):
    manifest, file = case
    root = tmp_path_factory.mktemp("set")
    path = write_set(root, 50, 2)
    valid = tree(root)
    apply(path, manifest, file)
    before = tree(root)
    assume(before != valid)  # e.g. "format" set to 1 again: still the valid set
    assume(not (file and file[0] == "npz" and usable(file[1])))
    status, out, err = snapshots_cli(path, capsys)
    assert status == 2, (case, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    line = err.rstrip("\n")
    assert not CONTROL.search(line), repr(line)
    assert line.startswith(f"chainermn-rt snapshots: error: snapshot {path}: ") and \
        "; allowed: " in line, line
    assert tree(root) == before  # nothing written, nothing removed
    status, out, err = snapshots_cli(root, capsys)  # the folder of sets: its newest is this one
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, (case, out, err)
    assert tree(root) == before
    shutil.rmtree(root)
