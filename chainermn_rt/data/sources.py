"""What one rank reads in one epoch: from a shard folder (``data pack``'s output) or straight
from image files (a class-folder tree ``ROOT/<class>/<image>`` or a ``PATH LABEL`` list).

Training: each epoch the shards are dealt to the ranks in an order drawn from the seed and the
epoch, and each rank streams only its own through a shuffle buffer, so a rank opens about
``shards / ranks`` files per epoch. Validation: the samples are split exactly (rank r reads
samples ``r * N // ranks`` up to ``(r + 1) * N // ranks`` in manifest order), so every image is
counted once whatever the shard count. File sources split the same way, one file per sample.

>>> split(10, 0, 3), split(10, 2, 3), split(2, 2, 3)
((0, 3), (6, 10), (1, 2))
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from chainermn_rt.data import manifest as manifest_
from chainermn_rt.data.shards import DataError, Sample, read_lazily
from chainermn_rt.errors import UserError
from chainermn_rt.staging import local_path

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".gif")
MAX_LIST_BYTES = 1 << 30


def split(n: int, rank: int, size: int) -> tuple[int, int]:
    """The samples ``[start, stop)`` of ``n`` that ``rank`` of ``size`` reads (exact split)."""
    return rank * n // size, (rank + 1) * n // size


def _draw(seed: int, epoch: int, what: str) -> random.Random:
    return random.Random(f"{what}\0{seed}\0{epoch}")


class Source(Protocol):
    """What a loader reads (a :class:`ShardSource` or a :class:`FileSource`): this rank's
    samples of an epoch, and how many. ``stream``'s ``on_close(ident)`` is told when a shard it
    opened is closed (the last of its samples gone): a loader that hands shards to worker
    processes tells them."""

    train: bool
    seed: int

    @property
    def classes(self) -> tuple[str, ...]: ...

    @property
    def total(self) -> int: ...

    def length(self, epoch: int) -> int: ...

    def stream(self, epoch: int, on_close: Callable[[int], None] | None = None
               ) -> Iterator[Sample]: ...


def is_shard_folder(path: str | os.PathLike) -> bool:
    """Whether ``path``, or the node-local copy the job staged of it, holds a manifest."""
    local = Path(local_path(str(path)))  # the node-local copy when the job staged it
    return (local / manifest_.NAME).exists() or (Path(path) / manifest_.NAME).exists()


class ShardSource:
    """A shard folder as read by ``rank`` of ``size`` ranks. In training, each epoch deals
    the shards anew and every rank reads the same number of samples, the fewest any rank's
    shards hold (the rest wait for an epoch that deals them elsewhere): an epoch ends at the
    same iteration on every rank, so extensions triggered per epoch (an evaluation's
    allreduce) meet."""

    def __init__(self, folder: str | os.PathLike, rank: int = 0, size: int = 1, *,
                 train: bool, seed: int = 0, buffer: int = 1000):
        self.folder = Path(local_path(str(folder)))  # the job's staged copy, if any
        self.manifest = manifest_.load(self.folder)
        self.rank, self.size, self.train, self.seed, self.buffer = rank, size, train, seed, buffer
        n = len(self.manifest.shards)
        if train and n < size:
            raise UserError(f"{folder}: {n} shard(s) for {size} ranks; allowed: at least one "
                            "shard per rank (pack with a smaller --shard-size)", everywhere=True)
        if self.manifest.count == 0:
            raise UserError(f"{folder}: no samples", everywhere=True)

    @property
    def classes(self) -> tuple[str, ...]:
        return self.manifest.classes

    @property
    def total(self) -> int:
        return self.manifest.count

    def own_shards(self, epoch: int, rank: int | None = None) -> list[int]:
        """Indices of the shards ``rank`` (default: this one) reads in ``epoch`` (training)."""
        order = list(range(len(self.manifest.shards)))
        _draw(self.seed, epoch, "shards").shuffle(order)
        return order[self.rank if rank is None else rank::self.size]

    def length(self, epoch: int) -> int:
        """How many samples this rank reads in ``epoch``."""
        if self.train:
            return min(sum(self.manifest.shards[i].count for i in self.own_shards(epoch, r))
                       for r in range(self.size))
        start, stop = split(self.manifest.count, self.rank, self.size)
        return stop - start

    def stream(self, epoch: int, on_close: Callable[[int], None] | None = None
               ) -> Iterator[Sample]:
        """This rank's samples in ``epoch``; ``on_close(ident)`` as each shard is closed."""
        if self.train:
            rng = _draw(self.seed, epoch, f"buffer\0{self.rank}")
            own = [self.manifest.shards[i] for i in self.own_shards(epoch)]
            return _shuffled(self._chain(own, on_close, self.length(epoch)), rng, self.buffer)
        return self._range(*split(self.manifest.count, self.rank, self.size), on_close)

    def _chain(self, shards, on_close, limit: int) -> Iterator[Sample]:
        """The shards' samples in order, ``limit`` of them."""
        taken = 0
        for shard in shards:
            path, n = str(self.folder / shard.name), 0
            for sample in read_lazily(path, on_close):
                if taken == limit:
                    return
                n, taken = n + 1, taken + 1
                yield sample
            if n != shard.count:
                raise DataError(f"{path}: {n} samples; its manifest says {shard.count} (a "
                                "damaged or replaced shard)")

    def _range(self, start: int, stop: int, on_close) -> Iterator[Sample]:
        first = 0
        for shard in self.manifest.shards:
            end = first + shard.count
            if end > start and first < stop:
                samples = read_lazily(str(self.folder / shard.name), on_close)
                for i, sample in enumerate(samples, first):
                    if i >= stop:
                        break
                    if i >= start:
                        yield sample
            first = end
            if first >= stop:
                return


def _shuffled(samples: Iterator[Sample], rng: random.Random, size: int) -> Iterator[Sample]:
    """A streaming shuffle: hold ``size`` samples, hand out a random one per new arrival."""
    held: list[Sample] = []
    for sample in samples:
        if len(held) < size:
            held.append(sample)
            continue
        i = rng.randrange(size)
        yield held[i]
        held[i] = sample
    rng.shuffle(held)
    yield from held


class FileSource:
    """Image files (:func:`image_list`) as read by ``rank`` of ``size`` ranks: one open per
    sample, so for small data sets; pack large ones into shards."""

    def __init__(self, source: str, rank: int = 0, size: int = 1, *, train: bool,
                 seed: int = 0, root: str = ""):
        self.pairs, self.classes = image_list(source, root)
        self.rank, self.size, self.train, self.seed = rank, size, train, seed

    @property
    def total(self) -> int:
        return len(self.pairs)

    def _mine(self, epoch: int):
        if self.train:  # the same count on every rank (see ShardSource): the rest wait
            order = list(range(len(self.pairs)))
            _draw(self.seed, epoch, "files").shuffle(order)
            return order[self.rank::self.size][:len(self.pairs) // self.size]
        return range(*split(len(self.pairs), self.rank, self.size))

    def length(self, epoch: int) -> int:
        return len(self._mine(epoch))

    def stream(self, epoch: int, on_close: Callable[[int], None] | None = None
               ) -> Iterator[Sample]:
        """This rank's samples in ``epoch`` (``on_close``: unused, no file stays open)."""
        return (self._read(i) for i in self._mine(epoch))

    def _read(self, i: int) -> Sample:
        path, label = self.pairs[i]
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as err:
            raise DataError(f"{path}: cannot be read ({err.strerror})") from None
        return Sample(os.path.splitext(path)[0], data, label, path)


def image_list(source: str, root: str = "") -> tuple[list[tuple[str, int]], tuple[str, ...]]:
    """``([(path, label)], class names)`` of a class-folder tree (classes: the sorted
    sub-folder names) or a list file of ``PATH LABEL`` lines (paths below ``root``; classes
    ``0``, ``1`` ... up to the largest label)."""
    path = Path(source)
    if path.is_dir():
        classes = sorted(p.name for p in path.iterdir() if p.is_dir())
        pairs = [(str(f), label) for label, name in enumerate(classes)
                 for f in sorted((path / name).iterdir())
                 if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file()]
    elif path.is_file():
        pairs = list(parse_list(source, root))
        classes = tuple(str(i) for i in range(max((lb for _, lb in pairs), default=-1) + 1))
    else:
        raise UserError(f"data {source!r} does not exist; allowed: a folder of class folders "
                        "or a list file of 'PATH LABEL' lines")
    if not pairs:
        raise UserError(f"data {source!r} holds no images; allowed suffixes: "
                        f"{', '.join(IMAGE_SUFFIXES)}")
    return pairs, tuple(classes)


def parse_list(source: str, root: str = "") -> Iterator[tuple[str, int]]:
    """``(path, label)`` of each ``PATH LABEL`` line of the list file ``source``."""
    if os.path.getsize(source) > MAX_LIST_BYTES:
        raise UserError(f"{source}: larger than {MAX_LIST_BYTES} bytes; allowed: a list file")
    with open(source, encoding="utf-8", errors="surrogateescape") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.rsplit(None, 1)
            if len(parts) != 2 or not (parts[1].isascii() and parts[1].isdigit()):
                raise UserError(f"{source}:{n}: {line.rstrip()!r}; allowed: 'PATH LABEL' with "
                                "a non-negative integer label")
            yield os.path.join(root, parts[0]), int(parts[1])
