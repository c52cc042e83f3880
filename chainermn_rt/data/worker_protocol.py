"""The messages between the loader (``loader.Loader``) and its worker processes (``worker``):
private to those two. Each goes over the worker's socket as one pickle.

To a worker, in this order: :class:`Setup` once; then any of :class:`OpenShard` (its
descriptor follows, SCM_RIGHTS: nothing is opened again), :class:`CloseShards`,
:class:`Decode` (the images the loader holds follow in one message, end to end); :class:`Stop`
last. From a worker: :class:`Decoded` for each :class:`Decode`, in order.

>>> import pickle
>>> message = Decode(batch=3, slot=1, epochs=[0], keys=["a/x"], shards=["s.tar"],
...                  refs=[ImageRef(shard=7, offset=512, size=100)], ends=None)
>>> pickle.loads(pickle.dumps(message)) == message, message.refs[0].span
(True, Span(offset=512, size=100))
"""

from __future__ import annotations

from typing import NamedTuple

from chainermn_rt.data.shards import Span


class Setup(NamedTuple):
    """Where the batches go: the loader's shared memory, its slots' shape, and the transform
    whose boxes the worker decodes."""

    memory: str  # the shared memory's name
    shape: tuple[int, ...]  # (slots, batch, size, size, 3) uint8
    transform: object  # a TrainCrop or CentreCrop


class OpenShard(NamedTuple):
    """A shard's descriptor comes next; ``shard`` names it in :class:`ImageRef` s."""

    shard: int


class CloseShards(NamedTuple):
    """The loader has closed these shards: the worker closes its descriptors too."""

    shards: tuple[int, ...]


class ImageRef(NamedTuple):
    """An image the worker reads itself: ``size`` bytes at ``offset`` of shard ``shard``."""

    shard: int
    offset: int
    size: int

    @property
    def span(self) -> Span:
        return Span(self.offset, self.size)


class Decode(NamedTuple):
    """Decode batch ``batch`` into slot ``slot``. Per sample: its epoch (a batch may straddle
    two), key and shard's path (for errors), and its image: an :class:`ImageRef`, or None for
    one the loader sends; those follow in one message, image i ending at ``ends[i]``
    (``ends`` is None when there are none)."""

    batch: int
    slot: int
    epochs: list[int]
    keys: list[str]
    shards: list[str]
    refs: list[ImageRef | None]
    ends: list[int] | None


class Stop(NamedTuple):
    """The loader is done: the worker ends."""


class Decoded(NamedTuple):
    """Batch ``batch`` is in its slot; or ``error``, one line naming the shard and sample that
    could not be decoded."""

    batch: int
    error: str | None = None
