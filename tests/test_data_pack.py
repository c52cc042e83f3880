"""``chainermn-rt data pack``: shards that hold exactly the images, in one order, whatever the
worker count; every unusable file named in one line (skipped and listed, or refused with
--strict, nothing written); resumed after an interruption."""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import subprocess

import numpy
import pytest
from PIL import Image

from chainermn_rt.data import jpeg, manifest, shards
from chainermn_rt.data.writers import pack, synthetic
from chainermn_rt.errors import UserError

from conftest import PYTHON, folder_contents

SMALL = ((64, 48), (48, 64))


def run_pack(*args, check=True):
    proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "data", "pack", *map(str, args)],
                          capture_output=True, text=True, timeout=300, check=False)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def samples_of(folder) -> dict[str, tuple[bytes, int]]:
    m = manifest.load(folder)
    got = {}
    for shard in m.shards:
        data = (folder / shard.name).read_bytes()
        assert len(data) == shard.bytes and hashlib.sha256(data).hexdigest() == shard.sha256
        found = list(shards.read(io.BytesIO(data), shard.name))
        assert len(found) == shard.count
        for s in found:
            assert s.key not in got
            got[s.key] = (s.data, s.label)
    return got


def test_packs_a_tree_exactly_and_the_same_way_with_any_worker_count(tmp_path):
    files = synthetic.tree(tmp_path / "src", classes=3, per_class=5, sizes=SMALL)
    run_pack(tmp_path / "src", tmp_path / "one", "--shard-size", "4", "--workers", "1")
    proc = run_pack(tmp_path / "src", tmp_path / "two", "--shard-size", "4", "--workers", "2")
    assert proc.stdout == f"{tmp_path / 'two'}: 15 images of 3 classes in 4 shard(s), " \
        f"{sum(s.bytes for s in manifest.load(tmp_path / 'two').shards) / 1e6:.1f} MB\n"
    assert folder_contents(tmp_path / "one") == folder_contents(tmp_path / "two")
    m = manifest.load(tmp_path / "one")
    assert m.classes == ("c000", "c001", "c002") and [s.count for s in m.shards] == [4, 4, 4, 3]
    got = samples_of(tmp_path / "one")
    assert got == {f"{f.parent.name}/{f.stem}": (f.read_bytes(), int(f.parent.name[1:]))
                   for f in files}  # stored as they were: no decoding, no re-encoding
    assert sorted(os.listdir(tmp_path / "one")) == sorted(
        ["manifest.json", *(s.name for s in m.shards)])


def test_short_side_reencodes_only_larger_images(tmp_path):
    synthetic.tree(tmp_path / "src", classes=1, per_class=2, sizes=((120, 90), (30, 40)))
    run_pack(tmp_path / "src", tmp_path / "out", "--short-side", "45", "--quality", "80")
    got = samples_of(tmp_path / "out")
    sizes = {k: jpeg.header(d)[:2] for k, (d, _) in got.items()}
    assert sizes == {"c000/c000_0": (60, 45), "c000/c000_1": (30, 40)}
    assert manifest.load(tmp_path / "out").short_side == 45


def _jpeg_bytes(pixels, **kw) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", **kw)
    return out.getvalue()


def hostile_tree(root):
    """Good images and every kind of bad file, each in its own class folder."""
    rgb = numpy.asarray(Image.open(io.BytesIO(synthetic.image(0, 0, (64, 48)))))
    good = _jpeg_bytes(rgb, quality=90)
    bomb = bytearray(good)
    at = bomb.find(b"\xff\xc0")
    bomb[at + 5:at + 9] = struct.pack(">HH", 30000, 30000)
    png16 = io.BytesIO()
    Image.fromarray(rgb[..., 0].astype(numpy.uint16) * 257).save(png16, "PNG")
    cmyk = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(cmyk, "JPEG", quality=90)
    files = {
        "good/a.JPEG": good,
        "good/gray.jpg": _jpeg_bytes(rgb[..., 1], quality=90),
        "good/cmyk.jpg": cmyk.getvalue(),
        "good/deep.png": png16.getvalue(),
        "good/dup.jpg": good,
        "good/dup.png": png16.getvalue(),  # the same key as dup.jpg
        "bad/truncated.jpg": good[:len(good) // 2],
        "bad/empty.jpg": b"",
        "bad/text.jpg": b"hello, not an image\n",
        "bad/bomb.jpg": bytes(bomb),
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "empty-class").mkdir()
    return files


SKIPPED = [
    ("bad/bomb.jpg", "30000x30000 pixels, more than 89478485 (a decompression bomb?)"),
    ("bad/empty.jpg", "empty file"),
    ("bad/text.jpg", "not a usable image (cannot identify image file <_io.BytesIO object at"),
    ("bad/truncated.jpg", "the data ends early (truncated file)"),
    ("empty-class", "class folder holds no images"),
    ("good/dup.png", "duplicate key 'good/dup' (another file has the same name but its suffix)"),
]


def test_unusable_files_are_skipped_and_listed_one_line_each(tmp_path):
    hostile_tree(tmp_path / "src")
    proc = run_pack(tmp_path / "src", tmp_path / "out")
    lines = sorted(proc.stderr.splitlines())
    assert len(lines) == len(SKIPPED), proc.stderr
    for line, (path, why) in zip(lines, SKIPPED, strict=True):
        assert line.startswith(f"chainermn-rt data pack: skipped {str(tmp_path / 'src' / path)!r}"
                               f": {why}"), line
    listed = (tmp_path / "out" / pack.SKIPPED).read_text().splitlines()
    assert sorted(line.split("\t")[0] for line in listed) == sorted(
        str(tmp_path / "src" / p) for p, _ in SKIPPED)
    got = samples_of(tmp_path / "out")
    assert sorted(got) == ["good/a", "good/cmyk", "good/deep", "good/dup", "good/gray"]
    for key, (data, _) in got.items():  # everything stored decodes to RGB
        assert jpeg.header(data).colorspace in jpeg.DECODABLE, key
        assert jpeg.decode(data, (16, 16)).shape == (16, 16, 3)
    deep = jpeg.decode(got["good/deep"][0])  # 16-bit grey scaled to 8 bits, not clipped
    assert 0 < deep.mean() < 255 and deep.max() > 40
    assert {label for _, label in got.values()} == {2}  # classes: bad, empty-class, good
    assert manifest.load(tmp_path / "out").classes == ("bad", "empty-class", "good")


def test_strict_refuses_and_writes_nothing(tmp_path):
    hostile_tree(tmp_path / "src")
    before = folder_contents(tmp_path)
    proc = run_pack(tmp_path / "src", tmp_path / "out", "--strict", "--shard-size", "2",
                    check=False)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[-1] == ("chainermn-rt data: error: SRC: 2 file(s) cannot be packed (listed "
                         "above); allowed: without --strict they are skipped and listed")
    assert not (tmp_path / "out").exists() and folder_contents(tmp_path) == before
    (tmp_path / "src" / "empty-class").rmdir()
    (tmp_path / "src" / "good" / "dup.png").unlink()
    proc = run_pack(tmp_path / "src", tmp_path / "out", "--strict", "--shard-size", "2",
                    check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert sorted(line.split("'")[1] for line in proc.stderr.splitlines()[:-1]) == sorted(
        str(tmp_path / "src" / p) for p, _ in SKIPPED[:4])
    assert not (tmp_path / "out").exists()


def test_a_list_file_with_a_label_outside_the_classes(tmp_path):
    synthetic.tree(tmp_path / "src", classes=2, per_class=2, sizes=SMALL)
    listing = tmp_path / "list.txt"
    listing.write_text("c000/c000_0.JPEG 0\nc000/c000_1.JPEG 1\nc001/c001_0.JPEG 5\n")
    proc = run_pack(listing, tmp_path / "out", "--root", tmp_path / "src", "--classes", "2")
    bad = str(tmp_path / "src/c001/c001_0.JPEG")
    assert proc.stderr == (f"chainermn-rt data pack: skipped {bad!r}: label 5 is outside the 2 "
                           "classes; allowed: 0-1 (set --classes)\n")
    assert sorted(samples_of(tmp_path / "out")) == ["c000/c000_0", "c000/c000_1"]
    listing.write_text("c000/c000_0.JPEG zero\n")
    proc = run_pack(listing, tmp_path / "out2", check=False)
    assert proc.returncode == 2 and proc.stderr == (
        f"chainermn-rt data: error: {listing}:1: 'c000/c000_0.JPEG zero'; allowed: 'PATH LABEL' "
        "with a non-negative integer label\n")


@pytest.mark.parametrize("case", ["missing", "not-empty", "packed"])
def test_bad_places_are_refused_before_any_work(tmp_path, case):
    synthetic.tree(tmp_path / "src", classes=1, per_class=1, sizes=SMALL)
    out = tmp_path / "out"
    src = tmp_path / ("nope" if case == "missing" else "src")
    if case == "not-empty":
        out.mkdir()
        (out / "x").write_text("mine")
    if case == "packed":
        run_pack(src, out)
    before = folder_contents(tmp_path)
    proc = run_pack(src, out, check=False)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert folder_contents(tmp_path) == before


def test_an_interrupted_pack_resumes_to_the_same_shards(tmp_path):
    synthetic.tree(tmp_path / "src", classes=2, per_class=5, sizes=SMALL)
    options = pack.Options(shard_size=3)
    whole = pack.pack(str(tmp_path / "src"), str(tmp_path / "whole"), options)

    class Stop(Exception):
        pass

    def stop_after_two(done, total):
        if done >= 6:
            raise Stop

    with pytest.raises(Stop):
        pack.pack(str(tmp_path / "src"), str(tmp_path / "cut"), options,
                  progress=stop_after_two)
    assert not (tmp_path / "cut" / "manifest.json").exists()  # incomplete: no manifest
    with pytest.raises(UserError, match="interrupted pack of other data or options"):
        pack.pack(str(tmp_path / "src"), str(tmp_path / "cut"), pack.Options(shard_size=2))
    # a damaged shard from the interruption is built again
    partial = tmp_path / "cut" / pack.PARTIAL
    (partial / manifest.shard_name(1)).write_bytes(b"damaged")
    again = pack.pack(str(tmp_path / "src"), str(tmp_path / "cut"), options)
    assert again.resumed == 1 and again.manifest == whole.manifest
    assert folder_contents(tmp_path / "cut") == folder_contents(tmp_path / "whole")


def test_manifest_json_is_what_the_readers_trust(tmp_path):
    synthetic.tree(tmp_path / "src", classes=2, per_class=2, sizes=SMALL)
    run_pack(tmp_path / "src", tmp_path / "out")
    data = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert data["format"] == manifest.FORMAT and data["count"] == 4
