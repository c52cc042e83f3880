"""The DALI loader (chainermn_rt/data/dali.py) in DALI's CPU-only mode, the code path a GPU runs
with ``gpu=0`` (tests/gpu_check.py's ``dali`` step checks that one): the same samples, labels
and split as the libjpeg-turbo loader, every validation image once across two ranks, batches
bit-identical from run to run and after a resume, damage named in one line, and DALI's absence
one line naming the option. DALI comes from pyproject's ``dali`` extra (``make setup``): its
absence fails these tests, never skips them."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import chainer
import numpy
import pytest
from fixtures_data import damaged_copy

from chainermn_rt.data import check_decoder, make_loader, manifest, open_source, shards, transforms
from chainermn_rt.data.batch import Batch, to_device
from chainermn_rt.data.loader import Loader
from chainermn_rt.data.shards import DataError
from chainermn_rt.data.sources import ShardSource
from chainermn_rt.data.writers import pack, synthetic
from chainermn_rt.errors import UserError

from conftest import PYTHON, REPO, run_mpi

SIZES = ((64, 48), (48, 64), (80, 60))


@pytest.fixture(scope="module", autouse=True)
def dali():
    try:
        import nvidia.dali
    except ImportError as err:
        pytest.fail(f"NVIDIA DALI does not import ({err}): `make setup` installs pyproject's "
                    "dali extra", pytrace=False)
    return nvidia.dali


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Shards of 3 x 10 small JPEGs, 4 samples a shard (the last holds 2)."""
    root = tmp_path_factory.mktemp("data")
    synthetic.tree(root / "tree", classes=3, per_class=10, sizes=SIZES)
    pack.pack(str(root / "tree"), str(root / "shards"), pack.Options(shard_size=4))
    return root / "shards"


def dali_loader(path, rank=0, size=1, train=True, **kw):
    from chainermn_rt.data.dali import DaliLoader

    source = ShardSource(path, rank, size, train=train, buffer=5)
    transform = transforms.TrainCrop(size=16, seed=3) if train else transforms.CentreCrop(16, 18)
    return DaliLoader(source, 4, transform, size=16, workers=1, repeat=train, **kw)


def turbo_loader(path, rank=0, size=1, train=True):
    source = ShardSource(path, rank, size, train=train, buffer=5)
    transform = transforms.TrainCrop(size=16, seed=3) if train else transforms.CentreCrop(16, 18)
    return Loader(source, 4, transform, size=16, workers=0, repeat=train)


def labels_in(path, names) -> list[int]:
    return [s.label for name in names for s in shards.read_file(str(path / name))]


def test_validation_counts_every_image_once_across_two_ranks(data):
    """Rank 0 then rank 1: the shards' samples in manifest order, each once, the same images
    as libjpeg-turbo's loader gives (DALI's filters differ by a few levels; any other image
    differs by far more)."""
    m = manifest.load(data)
    found, images = [], []
    for rank in (0, 1):
        dali = list(dali_loader(data, rank, 2, train=False))
        turbo = [Batch(b.images.copy(), b.labels) for b in turbo_loader(data, rank, 2, False)]
        assert [len(b) for b in dali] == [len(b) for b in turbo] == [4, 4, 4, 3]
        assert all(b.images.dtype == numpy.uint8 and b.images.shape[1:] == (16, 16, 3)
                   and isinstance(b.images, numpy.ndarray) for b in dali)
        found += [int(x) for b in dali for x in b.labels]
        ours = numpy.concatenate([b.images for b in dali]).astype(int)
        theirs = numpy.concatenate([b.images for b in turbo]).astype(int)
        distance = numpy.abs(ours[:, None] - theirs[None]).mean(axis=(2, 3, 4))
        images.append((distance.diagonal().max(), (distance + 255 * numpy.eye(len(ours))).min()))
    assert found == labels_in(data, [s.name for s in m.shards]) and len(found) == m.count == 30
    for same, other in images:
        assert same < 4 < 12 < other, (same, other)


def test_training_reads_only_the_ranks_own_shards(data):
    for rank in (0, 1):
        it = dali_loader(data, rank, 2)
        source = it.source
        epoch = [next(it) for _ in range(-(-source.length(0) // 4))]
        assert it.epoch == 1 and it.is_new_epoch
        labels = [int(x) for b in epoch for x in b.labels][:source.length(0)]
        own = [m.name for i, m in enumerate(source.manifest.shards) if i in source.own_shards(0)]
        left = sorted(labels_in(data, own))  # every rank reads as many: some may wait
        for label in labels:
            left.remove(label)
        assert all(b.images.shape == (4, 16, 16, 3) for b in epoch)


def test_the_same_samples_and_flips_as_the_turbo_loader(data):
    dali, turbo = dali_loader(data), turbo_loader(data)
    for _ in range(12):  # 1.6 epochs
        ours, theirs = next(dali), next(turbo)
        assert (ours.labels == theirs.labels).all()
        # a flip mirrors the image: the unflipped one is much farther away than DALI's
        d = numpy.abs(ours.images.astype(int) - theirs.images).mean(axis=(1, 2, 3))
        mirrored = numpy.abs(ours.images[:, :, ::-1].astype(int) - theirs.images).mean(
            axis=(1, 2, 3))
        assert (d < 8).all() and (2 * d < mirrored).all(), (d, mirrored)


def test_batches_are_bit_identical_run_to_run_and_stay_valid(data):
    first, second = dali_loader(data), dali_loader(data)
    kept = [next(first) for _ in range(20)]  # not copied: DALI's outputs live while referenced
    copies = [next(second).images.copy() for _ in range(20)]
    assert all((a.images == b).all() for a, b in zip(kept, copies, strict=True))
    assert len({b.tobytes() for b in copies}) == 20  # crops differ batch to batch and by epoch


def test_a_resumed_loader_goes_on_exactly(data):
    it = dali_loader(data)
    straight = [next(it).images.copy() for _ in range(17)]
    first = dali_loader(data)
    for _ in range(9):  # mid-epoch (30 samples, batches of 4)
        next(first)
    saved = {}
    first.serialize(chainer.serializers.DictionarySerializer(saved))
    resumed = dali_loader(data)
    next(resumed)  # DALI has batches in flight: the resume drops them
    resumed.serialize(chainer.serializers.NpzDeserializer(saved))
    assert (resumed.epoch, resumed.current_position) == (1, 6)
    assert all((next(resumed).images == want).all() for want in straight[9:])


def test_validation_resets_for_another_pass(data):
    it = dali_loader(data, 1, 2, train=False)
    once = [b.images.copy() for b in it]
    it.reset()
    again = list(it)
    assert [len(b) for b in again] == [4, 4, 4, 3]
    assert all((a == b.images).all() for a, b in zip(once, again, strict=True))


def test_to_device_takes_its_batches(data):
    batch = next(dali_loader(data))
    x, t = to_device(batch, chainer.get_device("@numpy"))
    assert x.shape == (4, 3, 16, 16) and x.dtype == numpy.float32 and t.dtype == numpy.int32


@pytest.mark.parametrize("damage, what", [
    (lambda d: d[:2000], "the data ends early (truncated file) (DALI: Failed to decode sample "
                         "#2)"),  # DALI fails it: libjpeg-turbo names what is wrong
    (lambda d: d[:300], "the data ends early (truncated file)"),  # its markers cut: not fed
    (lambda d: b"", "Empty input file"),
], ids=["cut-in-the-scan", "cut-in-the-markers", "zero-bytes"])
def test_a_damaged_image_names_shard_and_key(data, tmp_path, damage, what):
    path = tmp_path / "shards"
    key = damaged_copy(data, path, damage)
    it = dali_loader(path, train=False)
    with pytest.raises(DataError) as caught:
        list(it)
    assert str(caught.value) == f"{path / manifest.shard_name(1)}: sample {key!r}: {what}"


def test_the_front_door_makes_the_dali_loader(data):
    from chainermn_rt.data.dali import DaliLoader

    loader = make_loader(open_source(data, train=True, seed=3, buffer=5), 4, decoder="dali",
                         size=16, workers=1, device=chainer.get_device("@numpy"))
    assert type(loader) is DaliLoader and loader.gpu is None and loader.repeat
    by_hand = DaliLoader(ShardSource(data, train=True, seed=3, buffer=5), 4,
                         transforms.TrainCrop(size=16, seed=3), size=16, workers=1)
    assert all((next(loader).images == next(by_hand).images).all() for _ in range(10))


def test_dalis_absence_is_one_line_naming_the_option(monkeypatch):
    from chainermn_rt.data import dali

    monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    with pytest.raises(UserError) as caught:
        dali.require()
    message = str(caught.value)
    assert message.startswith("--decoder dali: NVIDIA DALI does not import (") and \
        "\n" not in message and "pip install 'chainermn-rt[dali]'" in message
    assert caught.value.exit_status == 2
    with pytest.raises(UserError) as again:  # the front door's check, before any data is read
        check_decoder("dali")
    assert str(again.value) == message


def test_the_example_without_dali_exits_2_with_one_line(data, tmp_path):
    hidden = ("import runpy, sys; sys.modules['nvidia.dali'] = None; sys.argv = sys.argv[1:]; "
              "sys.path.insert(0, 'examples'); runpy.run_path(sys.argv[0], run_name='__main__')")
    proc = subprocess.run([PYTHON, "-c", hidden, "examples/train_imagenet.py", "--decoder",
                           "dali", "--train", str(data), "--val", str(data), "--n-class", "3",
                           "--out", str(tmp_path / "out"), "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "chainermn-rt: error: --decoder dali: NVIDIA DALI does not import ("), proc.stderr


@pytest.mark.mpi
def test_the_example_trains_with_dali_and_resumes_bit_identically(tmp_path_factory, tmp_path):
    """ResNet-50 from shards on 2 ranks with ``--decoder dali`` (CPU-only mode): 6 iterations
    straight and resumed from iteration 2 (mid-epoch) end with the same parameters;
    validation counts each of the 9 images once."""
    root = tmp_path_factory.mktemp("imagenet")
    sizes = [(w // 5, h // 5) for w, h in synthetic.SIZES]
    synthetic.tree(root / "train", classes=3, per_class=8, sizes=sizes)
    synthetic.tree(root / "val", classes=3, per_class=3, sizes=sizes)
    pack.pack(str(root / "train"), str(root / "train-shards"), pack.Options(shard_size=4))
    pack.pack(str(root / "val"), str(root / "val-shards"), pack.Options(shard_size=2))
    run = ["examples/train_imagenet.py", "--decoder", "dali", "--insize", "32", "--batchsize",
           "4", "--no-progress", "--train", str(root / "train-shards"), "--val",
           str(root / "val-shards"), "--n-class", "3", "--val-resize", "36", "--iterations",
           "6", "--log-every", "3", "--snapshot-every", "2", "--keep", "3", "--workers", "1",
           "--shuffle-buffer", "3"]
    out = tmp_path / "straight"
    proc = run_mpi(2, run + ["--out", str(out)], timeout=600)
    assert "loader workers 1, decoder dali" in proc.stdout
    assert {e["validation/images"] for e in json.loads((out / "log").read_text())} == {9}
    resumed = run_mpi(2, run + ["--out", str(tmp_path / "resumed"), "--resume",
                                str(out / "snapshots" / "iter_000000002")], timeout=600)
    digests = [re.findall(r"^rank 0 parameters sha256 (\w+)$", p.stdout, re.MULTILINE)
               for p in (proc, resumed)]
    assert digests[0] == digests[1] and len(digests[0]) == 1, (proc.stdout, resumed.stdout)
