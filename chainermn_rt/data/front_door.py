"""The data package's front door: one call opens a rank's share of a data set, one more makes
its loader (``chainermn_rt.data.open_source``, ``chainermn_rt.data.make_loader``).

    from chainermn_rt.data import make_loader, open_source
    from chainermn_rt.data.batch import to_device

    train = make_loader(open_source(path, train=True, comm=comm), 32)
    val = make_loader(open_source(val_path, train=False, comm=comm), 32)
    updater = StandardUpdater(train, optimizer, converter=to_device, device=device)

What the path is chooses the source: a shard folder (``data pack``'s output, or the node-local
copy a job staged) is read shard by shard, each rank its own; a class-folder tree or a ``PATH
LABEL`` list, one file per image. ``decoder`` chooses the loader: libjpeg-turbo in worker
processes, or NVIDIA DALI. Both loaders, their sources and crops stay importable for a script
that wants its own (docs/data.md).

>>> import pathlib, tempfile
>>> from chainermn_rt.data.writers import synthetic
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> _ = synthetic.tree(root / "tree", classes=2, per_class=3, sizes=((40, 30),))
>>> source = open_source(root / "tree", train=False)
>>> type(source).__name__, source.total, source.classes
('FileSource', 6, ('c000', 'c001'))
>>> [batch.images.shape for batch in make_loader(source, 4, size=16, workers=0)]
[(4, 16, 16, 3), (2, 16, 16, 3)]
>>> make_loader(source, 4, decoder="pillow")
Traceback (most recent call last):
chainermn_rt.errors.UserError: decoder: 'pillow'; allowed: turbo, dali
"""

from __future__ import annotations

import os

from chainermn_rt.data.sources import FileSource, ShardSource, Source, is_shard_folder
from chainermn_rt.data.transforms import CentreCrop, TrainCrop
from chainermn_rt.errors import UserError

DECODERS = ("turbo", "dali")


def open_source(path: str | os.PathLike, *, train: bool, comm=None, rank: int = 0,
                size: int = 1, seed: int = 0, buffer: int = 1000, root: str = "") -> Source:
    """This rank's share of the data at ``path``: a :class:`ShardSource` for a shard folder
    (it, or the node-local copy the job staged, holds ``manifest.json``), else a
    :class:`FileSource` (a class-folder tree, or a ``PATH LABEL`` list whose paths are below
    ``root``). The rank and the rank count are ``comm``'s (a ChainerMN communicator), else
    ``rank`` and ``size``. ``train``: a new order each epoch drawn from ``seed`` (shards
    through a shuffle buffer of ``buffer`` samples); else every sample once across the ranks,
    in order."""
    if comm is not None:
        rank, size = comm.rank, comm.size
    if is_shard_folder(path):
        return ShardSource(path, rank, size, train=train, seed=seed, buffer=buffer)
    return FileSource(os.fspath(path), rank, size, train=train, seed=seed, root=root)


def check_decoder(decoder: str) -> None:
    """Whether ``decoder`` is one of :data:`DECODERS` and runs here: a UserError otherwise
    (for ``dali``: how to get DALI). Call it before reading anything to fail first."""
    if decoder not in DECODERS:
        raise UserError(f"decoder: {decoder!r}; allowed: {', '.join(DECODERS)}")
    if decoder == "dali":
        from chainermn_rt.data import dali  # the decoder's library only when one is chosen

        dali.require()


def make_loader(source: Source, batch_size: int, *, decoder: str = "turbo", transform=None,
                size: int = 224, resize: int = 256, workers: int | None = None,
                repeat: bool | None = None, device=None):
    """A Chainer iterator of :class:`~chainermn_rt.data.batch.Batch` es (uint8 images,
    ``size`` x ``size``; int32 labels; ``batch.to_device`` is their converter) of
    ``batch_size`` samples of ``source``.

    ``decoder``: ``"turbo"``, libjpeg-turbo in ``workers`` processes (0: in this one); or
    ``"dali"``, NVIDIA DALI with ``workers`` threads, on ``device``'s GPU (a Chainer device)
    or in its CPU-only mode (``device`` None or a CPU). ``workers`` by default: the rank's
    CPUs less one. ``transform``: the boxes to decode, by default the ImageNet recipe: a
    random-resized crop and flip drawn from the source's seed for a training source, the
    centre crop of the image scaled to a short side of ``resize`` for a validation one.
    ``repeat``: by default a training source repeats, a validation one is one pass (its last
    batch possibly smaller)."""
    check_decoder(decoder)
    if transform is None:
        transform = TrainCrop(size, source.seed) if source.train else CentreCrop(size, resize)
    repeat = source.train if repeat is None else repeat
    if decoder == "dali":
        import numpy

        from chainermn_rt.data.dali import DaliLoader

        gpu = device.device.id if device is not None and device.xp is not numpy else None
        return DaliLoader(source, batch_size, transform, size=size, workers=workers,
                          repeat=repeat, gpu=gpu)
    # imported here: the front door imports where libjpeg is missing (synthetic data)
    from chainermn_rt.data.loader import Loader

    return Loader(source, batch_size, transform, size=size, workers=workers, repeat=repeat)
