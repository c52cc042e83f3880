"""Shards (chainermn_rt/data/shards.py), their manifest, and which samples each rank reads."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chainermn_rt.data import manifest, shards, sources
from chainermn_rt.data.shards import END, DataError, member
from chainermn_rt.errors import UserError

KEY_CHARS = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="./\\")


def _fits_ustar(key: str) -> bool:
    """ustar holds a name of at most 100 bytes after a prefix of at most 155 cut at a '/': the
    longest ``.jpg``/``.cls`` member of ``key`` (a 40-character part of 4-byte characters
    does not fit; member() refuses it, below)."""
    raw = f"{key}.jpg".encode()
    return len(raw) <= 100 or any(len(raw) - i - 1 <= 100 for i in range(min(len(raw), 156))
                                  if raw[i:i + 1] == b"/")


KEYS = st.lists(st.text(KEY_CHARS, min_size=1, max_size=40), min_size=1, max_size=3).map(
    "/".join).filter(lambda k: len(k.encode()) <= shards.MAX_KEY_BYTES and _fits_ustar(k))
SAMPLES = st.lists(st.tuples(KEYS, st.binary(max_size=2000), st.integers(0, 10**6)),
                   max_size=8, unique_by=lambda s: s[0])


def shard_bytes(samples) -> bytes:
    return b"".join(member(f"{k}.jpg", d) + member(f"{k}.cls", str(lb).encode())
                    for k, d, lb in samples) + END


@settings(max_examples=100, deadline=None)
@given(SAMPLES)
def test_what_is_written_reads_back_here_and_with_tarfile(samples):
    data = shard_bytes(samples)
    got = [(s.key, s.data, s.label) for s in shards.read(io.BytesIO(data), "s.tar")]
    assert got == samples
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:  # plain ustar, as WebDataset reads it
        names = [m.name for m in tar.getmembers()]
    assert names == [f"{k}.{ext}" for k, _, _ in samples for ext in ("jpg", "cls")]


def test_a_name_ustar_cannot_hold_is_refused():
    long = "\u00a0" * 60  # 120 bytes, no '/' to cut at
    with pytest.raises(ValueError, match="too long for ustar"):
        member(f"{long}.jpg", b"")
    assert not _fits_ustar(long) and _fits_ustar("a/" + "\u00a0" * 40)


def test_reads_what_tarfile_writes_with_long_and_unicode_names():
    buffer = io.BytesIO()
    items = [("k/" + "q" * 300 + ".jpg", b"abc"), ("k/" + "q" * 300 + ".cls", b"12"),
             ("dir/é.jpeg", b"x"), ("dir/é.cls", b"1\n")]
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
            folder = tarfile.TarInfo("dir")
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)  # a folder member: no sample
            for name, data in items:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        got = [(s.key, s.data, s.label) for s in shards.read(io.BytesIO(buffer.getvalue()), "s")]
        assert got == [("k/" + "q" * 300, b"abc", 12), ("dir/é", b"x", 1)]


@settings(max_examples=60, deadline=None)
@given(SAMPLES.filter(bool), st.data())
def test_a_cut_or_damaged_shard_is_a_data_error(samples, data):
    whole = shard_bytes(samples)
    cut = data.draw(st.integers(0, len(whole) - 1))
    damaged = bytearray(whole[:cut] if data.draw(st.booleans()) else whole)
    if data.draw(st.booleans()) and damaged:
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] ^= data.draw(st.integers(1, 255))
    try:
        got = list(shards.read(io.BytesIO(bytes(damaged)), "s.tar"))
    except DataError as err:
        assert str(err).startswith("s.tar: ") and "\n" not in str(err)
        return
    # no error: a cut at a member's edge (fewer whole samples), or a byte inside the data
    assert len(got) <= len(samples)


@pytest.mark.parametrize("members, message", [
    ([("a.jpg", b"x")], "sample 'a' has no .cls member"),
    ([("a.cls", b"1")], "sample 'a' has no .jpg member"),
    ([("a.jpg", b"x"), ("a.cls", b"-1")], "'a.cls' holds b'-1'; allowed: a label"),
    ([("a.jpg", b"x"), ("a.jpg", b"y")], "member 'a.jpg' twice (duplicate key)"),
    ([("noext", b"x")], "member 'noext' has no extension"),
])
def test_malformed_samples_name_shard_and_key(members, message):
    data = b"".join(member(n, d) for n, d in members) + END
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        list(shards.read(io.BytesIO(data), "s.tar"))


# --- manifest -------------------------------------------------------------------------------

def a_manifest(counts) -> manifest.Manifest:
    return manifest.Manifest(("a", "b"), None, tuple(
        manifest.Shard(manifest.shard_name(i), c, 512 * (c + 2), f"{i:064x}")
        for i, c in enumerate(counts)))


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["format", "count", "classes", "short_side", "shards",
                                        "x"]), JSON), st.booleans())
def test_any_manifest_is_read_or_refused_in_one_line(data, right_format):
    if right_format:
        data["format"] = manifest.FORMAT
    try:
        m = manifest.from_json(json.dumps(data), "m.json")
    except UserError as err:
        assert str(err).startswith("m.json") and "\n" not in str(err)
    else:
        assert manifest.from_json(manifest.to_json(m), "m.json") == m


def test_a_manifest_that_lies_about_its_count_is_refused():
    text = manifest.to_json(a_manifest([3, 4])).replace('"count": 7', '"count": 8')
    with pytest.raises(UserError, match="count: 8, but its shards hold 7"):
        manifest.from_json(text, "m.json")


def test_a_folder_without_manifest_names_the_fix(tmp_path):
    with pytest.raises(UserError, match="no manifest.json; .*run it again"):
        manifest.load(tmp_path)
    (tmp_path / "manifest.json").mkdir()
    with pytest.raises(UserError, match="a folder, not a file"):
        manifest.load(tmp_path)


# --- which samples each rank reads ----------------------------------------------------------

def write_folder(tmp_path, counts) -> list[str]:
    """Shards of ``counts`` samples named ``s<shard>_<i>``; all keys, in manifest order."""
    records, keys = [], []
    for i, count in enumerate(counts):
        samples = [(f"s{i}_{j}", b"img", j) for j in range(count)]
        keys += [k for k, _, _ in samples]
        data = shard_bytes(samples)
        (tmp_path / manifest.shard_name(i)).write_bytes(data)
        records.append(manifest.Shard(manifest.shard_name(i), count, len(data), "0" * 64))
    (tmp_path / "manifest.json").write_text(manifest.to_json(
        manifest.Manifest(("c",), None, tuple(records))))
    return keys


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=6), st.integers(1, 5),
       st.integers(0, 3))
def test_validation_reads_every_sample_once_across_ranks(tmp_path_factory, counts, size, epoch):
    folder = tmp_path_factory.mktemp("shards")
    keys = write_folder(folder, counts)
    seen = []
    for rank in range(size):
        source = sources.ShardSource(folder, rank, size, train=False)
        got = [s.key for s in source.stream(epoch)]
        assert len(got) == source.length(epoch)
        seen += got
    assert seen == keys


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=8), st.integers(1, 4),
       st.integers(0, 3), st.integers(1, 5))
def test_training_epochs_deal_shards_and_every_rank_reads_as_many(tmp_path_factory, counts,
                                                                   size, epoch, buffer):
    """Each rank reads from its own shards only, no sample twice, and as many samples as every
    other rank (the fewest any rank's shards hold): an epoch ends at the same iteration on
    every rank, whatever the shards hold (6 shards on 4 ranks once hung a job's per-epoch
    evaluation)."""
    if len(counts) < size:
        return
    folder = tmp_path_factory.mktemp("shards")
    keys = write_folder(folder, counts)
    seen, lengths = [], set()
    for rank in range(size):
        source = sources.ShardSource(folder, rank, size, train=True, buffer=buffer, seed=5)
        got = [s.key for s in source.stream(epoch)]
        assert len(got) == source.length(epoch)
        assert got == [s.key for s in source.stream(epoch)]  # the same order again
        owned = {f"s{i}" for i in source.own_shards(epoch)}
        assert {k.split("_")[0] for k in got} <= owned
        seen += got
        lengths.add(len(got))
    fewest = min(sum(counts[i] for i in sources.ShardSource(folder, r, size, train=True,
                                                            seed=5).own_shards(epoch))
                 for r in range(size))
    assert lengths == {fewest}
    assert len(seen) == len(set(seen)) and set(seen) <= set(keys)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.integers(0, 3))
def test_image_files_too_give_every_rank_as_many(tmp_path_factory, n, size, epoch):
    if n < size:
        return
    folder = tmp_path_factory.mktemp("files")
    (folder / "c").mkdir()
    for i in range(n):
        (folder / "c" / f"{i:03d}.jpg").write_bytes(b"x")
    got = [[s.key for s in sources.FileSource(str(folder), rank, size, train=True,
                                              seed=3).stream(epoch)] for rank in range(size)]
    assert {len(g) for g in got} == {n // size}
    flat = [k for g in got for k in g]
    assert len(flat) == len(set(flat))


def test_more_ranks_than_shards_is_refused_for_training(tmp_path):
    write_folder(tmp_path, [3, 3])
    with pytest.raises(UserError, match="2 shard\\(s\\) for 3 ranks; allowed: at least one"):
        sources.ShardSource(tmp_path, 0, 3, train=True)
    assert sources.ShardSource(tmp_path, 2, 3, train=False).length(0) == 2


def test_a_shard_holding_other_than_its_manifest_says_is_an_error(tmp_path):
    write_folder(tmp_path, [3])
    (tmp_path / manifest.shard_name(0)).write_bytes(shard_bytes([("x", b"i", 1)]))
    with pytest.raises(DataError, match="1 samples; its manifest says 3"):
        list(sources.ShardSource(tmp_path, train=True).stream(0))


def test_files_opened_per_rank_and_epoch(tmp_path):
    """A training rank opens its shards and the manifest, a validation rank at most the shards
    its share spans plus the manifest: counted by an audit hook in a fresh process."""
    write_folder(tmp_path, [5] * 12)
    import subprocess
    import sys
    program = f"""
import sys
opened = []
sys.addaudithook(lambda e, a: opened.append(a[0]) if e == "open" and str(a[0]).startswith(
    {str(tmp_path)!r}) else None)
from chainermn_rt.data.sources import ShardSource
for train in (True, False):
    opened.clear()
    source = ShardSource({str(tmp_path)!r}, 1, 4, train=train)
    n = sum(1 for _ in source.stream(2))
    print(train, n, len(opened), len(source.own_shards(2)))
"""
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    train, val = [line.split() for line in out[:2]]
    assert train == ["True", "15", "4", "3"]  # 3 shards + the manifest
    assert val[:2] == ["False", "15"] and int(val[2]) <= 3 + 2
