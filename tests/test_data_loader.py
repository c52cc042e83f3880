"""The loader (chainermn_rt/data/loader.py): the same batches whatever the worker count, resumed
exactly, epochs counted as Chainer's iterators count them, damage and dead workers reported in
one line, nothing left behind; the front door (chainermn_rt/data/front_door.py) choosing the
source from the path and the loader from the decoder."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import chainer
import numpy
import pytest
from fixtures_data import damaged_copy

from chainermn_rt.data import batch, make_loader, manifest, open_source, shards, transforms
from chainermn_rt.data.batch import to_device
from chainermn_rt.data.loader import Loader
from chainermn_rt.data.shards import DataError
from chainermn_rt.data.sources import FileSource, ShardSource
from chainermn_rt.data.writers import pack, synthetic
from chainermn_rt.errors import UserError
from chainermn_rt.staging import STAGE_DIR_VAR, STAGE_FROM_VAR

SIZES = ((64, 48), (48, 64), (80, 60))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    """(a class-folder tree of 3 x 10 small JPEGs, its shards of 4 samples)."""
    root = tmp_path_factory.mktemp("data")
    synthetic.tree(root / "tree", classes=3, per_class=10, sizes=SIZES)
    pack.pack(str(root / "tree"), str(root / "shards"), pack.Options(shard_size=4))
    return root / "tree", root / "shards"


def fingerprint(batches) -> list[str]:
    return [hashlib.sha256(b.images.tobytes() + b.labels.tobytes()).hexdigest()[:16]
            for b in batches]


def take(it, n):
    """``n`` batches, copied (a batch's images are valid until the next one)."""
    return [batch.Batch(b.images.copy(), b.labels) for b in (next(it) for _ in range(n))]


def train_loader(shards_path, workers, rank=0, size=1, **kw):
    return Loader(ShardSource(shards_path, rank, size, train=True, buffer=5), 4,
                  transforms.TrainCrop(size=16, seed=3), size=16, workers=workers, **kw)


def test_batches_do_not_depend_on_the_worker_count(data):
    _, path = data
    runs = []
    for workers in (0, 1, 2):
        it = train_loader(path, workers)
        runs.append(fingerprint(take(it, 20)))
        it.finalize()
    assert runs[0] == runs[1] == runs[2]
    assert len(set(runs[0])) == 20  # 20 batches over 2.7 epochs: crops differ per epoch


def test_a_resumed_loader_goes_on_exactly(data):
    _, path = data
    straight = train_loader(path, 1)
    want = fingerprint(take(straight, 17))
    straight.finalize()
    first = train_loader(path, 1)
    take(first, 9)  # mid-epoch (30 samples, batches of 4)
    saved = {}
    first.serialize(chainer.serializers.DictionarySerializer(saved))
    first.finalize()
    resumed = train_loader(path, 2)
    resumed.serialize(chainer.serializers.NpzDeserializer(saved))
    assert (resumed.epoch, resumed.current_position) == (1, 6)
    assert fingerprint(take(resumed, 8)) == want[9:]
    resumed.finalize()


def test_epochs_are_counted_as_chainers_iterators_count_them(data):
    _, path = data
    it = train_loader(path, 0)  # 30 samples in batches of 4: epochs end inside batches 8, 15
    states = []
    for _ in range(8):
        next(it)
        states.append((it.epoch, it.is_new_epoch, it.epoch_detail))
    assert states[6] == (0, False, 28 / 30) and states[7] == (1, True, 1 + 2 / 30)
    assert it.previous_epoch_detail == pytest.approx(28 / 30)


def test_validation_is_one_pass_and_resets(data):
    _, path = data
    it = Loader(ShardSource(path, 1, 2, train=False), 4, transforms.CentreCrop(16, 18),
                size=16, workers=1, repeat=False)
    sizes = [len(b) for b in it]
    assert sizes == [4, 4, 4, 3]  # samples 15..29: the last batch is short
    it.reset()
    assert [len(b) for b in it] == sizes
    it.finalize()


def test_file_sources_read_the_tree_the_same_way(data):
    tree, _ = data
    source = FileSource(str(tree), 0, 1, train=False)
    assert source.classes == ("c000", "c001", "c002") and source.total == 30
    it = Loader(source, 8, transforms.CentreCrop(16, 18), size=16, workers=0, repeat=False)
    batches = list(it)
    assert sum(len(b) for b in batches) == 30
    assert sorted(numpy.concatenate([b.labels for b in batches])) == [0] * 10 + [1] * 10 + [2] * 10


def test_to_device_normalises_on_the_device(data):
    _, path = data
    it = train_loader(path, 0)
    batch = next(it)
    x, t = to_device(batch, chainer.get_device("@numpy"))
    assert x.shape == (4, 3, 16, 16) and x.dtype == numpy.float32
    mean = numpy.array(transforms.MEAN)[:, None, None]
    std = numpy.array(transforms.STD)[:, None, None]
    want = (batch.images[0].transpose(2, 0, 1) - mean) / std
    assert numpy.allclose(x[0], want, atol=1e-5) and (t == batch.labels).all()


def damaged_shards(tmp_path, data) -> Path:
    """The data's shards with the image of one sample cut to its first 300 bytes."""
    damaged_copy(data[1], tmp_path / "shards", lambda image: image[:300])
    return tmp_path / "shards"


@pytest.mark.parametrize("workers", [0, 1])
def test_a_damaged_image_names_shard_and_key(tmp_path, data, workers):
    path = damaged_shards(tmp_path, data)
    it = Loader(ShardSource(path, 0, 1, train=False), 4, transforms.CentreCrop(16, 18),
                size=16, workers=workers, repeat=False)
    key = list(shards.read_file(str(path / manifest.shard_name(1))))[2].key
    with pytest.raises(DataError) as caught:
        list(it)
    assert str(caught.value) == (f"{path / manifest.shard_name(1)}: sample {key!r}: the data "
                                 "ends early (truncated file)")
    it.finalize()


def test_a_worker_that_dies_ends_the_loader_with_one_line(data):
    _, path = data
    it = train_loader(path, 1)
    next(it)
    proc = it._procs[0]  # noqa: SLF001
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with pytest.raises(DataError, match=r"loader worker 0 \(pid \d+\) died \(killed by SIGKILL\) "
                                        r"while decoding .*shard-\d+\.tar: sample '.*' and 3 more"):
        for _ in range(10):
            next(it)
    it.finalize()


def test_nothing_is_left_behind(data):
    _, path = data
    before = set(os.listdir("/dev/shm"))
    it = train_loader(path, 2)
    take(it, 3)
    procs = list(it._procs)  # noqa: SLF001
    it.finalize()
    assert all(p.poll() is not None for p in procs)
    assert set(os.listdir("/dev/shm")) <= before


def test_workers_close_the_shards_the_loader_closed(data):
    """A worker holds a descriptor of each shard in use, not of every shard it was handed:
    over 8 epochs (64 shard openings) it never holds more than the 8 shards there are."""
    _, path = data
    it = train_loader(path, 1)
    held = []
    for _ in range(60):  # 240 samples: 8 epochs of 30
        next(it)
        held.append(len(os.listdir(f"/proc/{it._procs[0].pid}/fd")))  # noqa: SLF001
    it.finalize()
    shards = len(manifest.load(path).shards)
    assert shards == 8 and max(held) - min(held) <= shards, held


def test_the_front_door_chooses_the_source_from_the_path(data, tmp_path, monkeypatch):
    tree, path = data
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{p.relative_to(tree)} {int(p.parent.name[1:])}\n"
                               for p in sorted(tree.glob("*/*.JPEG"))))
    shards_source = open_source(path, train=True, rank=1, size=2, seed=4, buffer=7)
    assert isinstance(shards_source, ShardSource)
    assert (shards_source.rank, shards_source.size, shards_source.seed, shards_source.buffer) \
        == (1, 2, 4, 7)
    assert isinstance(open_source(tree, train=False), FileSource)
    from_list = open_source(listing, train=False, root=str(tree))
    assert isinstance(from_list, FileSource) and from_list.total == 30
    # a job that staged the shards: the node-local copy is a shard folder, the path is not
    monkeypatch.setenv(STAGE_DIR_VAR, str(path.parent))
    monkeypatch.setenv(STAGE_FROM_VAR, f'["{tmp_path / "on-lustre"}"]')
    (path.parent / "0").symlink_to(path)
    staged = open_source(tmp_path / "on-lustre", train=False)
    assert isinstance(staged, ShardSource) and staged.folder == path.parent / "0"


def test_the_front_door_makes_the_loaders_the_recipe_asks_for(data):
    _, path = data
    train = make_loader(open_source(path, train=True, seed=3, buffer=5), 4, size=16, workers=0)
    by_hand = Loader(ShardSource(path, train=True, seed=3, buffer=5), 4,
                     transforms.TrainCrop(size=16, seed=3), size=16, workers=0)
    assert type(train) is Loader and train.repeat
    assert fingerprint(take(train, 12)) == fingerprint(take(by_hand, 12))
    val = make_loader(open_source(path, train=False), 4, size=16, resize=18, workers=0)
    by_hand = Loader(ShardSource(path, train=False), 4, transforms.CentreCrop(16, 18), size=16,
                     workers=0, repeat=False)
    batches = fingerprint(val)
    assert batches == fingerprint(by_hand) and len(batches) == 8


def test_the_front_door_names_the_decoders_it_knows(data):
    _, path = data
    with pytest.raises(UserError) as caught:
        make_loader(open_source(path, train=False), 4, decoder="pillow")
    assert str(caught.value) == "decoder: 'pillow'; allowed: turbo, dali"
    assert caught.value.exit_status == 2
