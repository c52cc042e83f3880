"""The data side of train_imagenet.py: the loaders, exact validation across ranks, the data
rate per epoch, and synthetic images.

- ``--train``/``--val`` name a shard folder (``chainermn-rt data pack``; read shard by shard,
  each rank its own), a class-folder tree (``ROOT/<class>/<image>``) or a ``PATH LABEL`` list
  (``--root``); the last two read one file per image, for small data sets;
- ``--synthetic``: generated images, no files.

Example::

    train, val, classes = loaders(args, comm)
    trainer.extend(ExactEvaluator(val, model, comm, device), trigger=(1, "epoch"))
    trainer.extend(DataRate(train, comm), trigger=(1, "epoch"))
"""

from __future__ import annotations

import chainer
import chainer.functions as F
import numpy
from chainer.training import extension

from chainermn_rt.data import check_decoder, make_loader, open_source
from chainermn_rt.data.batch import to_device
from chainermn_rt.errors import UserError


def loaders(args, comm, device=None):
    """(training loader, validation loader, class count) of ``--train`` and ``--val``, decoded
    by ``--decoder``: ``turbo`` (libjpeg-turbo in worker processes) or ``dali`` (NVIDIA DALI on
    ``device``'s GPU, or in its CPU-only mode on a CPU device)."""
    if not (args.train and args.val):
        raise UserError("--train and --val are required without --synthetic")
    check_decoder(args.decoder)  # before reading anything: one line when DALI is missing
    read = {"comm": comm, "seed": args.seed, "buffer": args.shuffle_buffer, "root": args.root}
    train = open_source(args.train, train=True, **read)
    val = open_source(args.val, train=False, **read)
    classes = max(len(train.classes), len(val.classes))
    if classes > args.n_class:
        raise UserError(f"--n-class: {args.n_class}, but the data has {classes} classes; "
                        f"allowed: at least {classes}", everywhere=True)
    decode = {"decoder": args.decoder, "size": args.insize, "resize": args.val_resize,
              "workers": args.workers, "device": device}
    return (make_loader(train, args.batchsize, **decode),
            make_loader(val, args.batchsize, **decode), classes)


class ExactEvaluator(extension.Extension):
    """Validation over every image exactly once across the ranks: each rank sums its loss and
    correct answers, one allreduce adds them up (ChainerMN's evaluator averages the ranks'
    means, which weighs unequal shares wrongly)."""

    priority = extension.PRIORITY_WRITER
    name = "validation"

    def __init__(self, loader, model, comm, device):
        self.loader, self.model, self.comm, self.device = loader, model, comm, device

    def __call__(self, trainer=None) -> dict[str, float]:
        from mpi4py import MPI

        self.loader.reset()
        totals = numpy.zeros(3)  # loss sum, correct, images
        with chainer.using_config("train", False), chainer.no_backprop_mode():
            for batch in self.loader:
                x, t = to_device(batch, self.device)
                y = self.model.predictor(x)
                loss = F.softmax_cross_entropy(y, t, reduce="no").array.sum()
                correct = (y.array.argmax(axis=1) == t).sum()
                totals += [float(loss), int(correct), len(batch)]
        loss, correct, n = self.comm.mpi_comm.allreduce(totals, op=MPI.SUM)
        result = {"validation/main/loss": loss / max(n, 1),
                  "validation/main/accuracy": correct / max(n, 1), "validation/images": n}
        chainer.reporter.report(result)
        return result


class DataRate(extension.Extension):
    """Per trigger (an epoch): images/s over all ranks, and the share of the step time the
    slowest rank spent waiting for its loader (``data/wait``); printed on rank 0."""

    priority = extension.PRIORITY_WRITER

    def __init__(self, loader, comm, batch_images: int):
        self.loader, self.comm, self.batch_images = loader, comm, batch_images

    def _now(self, trainer) -> tuple[float, float, int]:
        return trainer.elapsed_time, self.loader.waited, trainer.updater.iteration

    def initialize(self, trainer) -> None:
        self.last = self._now(trainer)

    def __call__(self, trainer) -> None:
        from mpi4py import MPI

        now = self._now(trainer)
        seconds, waited, steps = (a - b for a, b in zip(now, self.last, strict=True))
        self.last = now
        share = self.comm.mpi_comm.allreduce(waited / max(seconds, 1e-9), op=MPI.MAX)
        rate = steps * self.batch_images / max(seconds, 1e-9)
        chainer.reporter.report({"data/images_per_s": rate, "data/wait": share})
        if self.comm.rank == 0:
            print(f"epoch {self.loader.epoch}: {rate:.1f} images/s, the slowest rank waited "
                  f"for data {100 * share:.1f} % of the step time", flush=True)


class SyntheticImages(chainer.dataset.DatasetMixin):
    """``n`` uint8 ``(size, size, 3)`` images; image ``i`` has label ``i % n_class`` and a
    class-dependent colour and stripe pattern under noise (the same on every rank)."""

    def __init__(self, n: int, n_class: int, size: int):
        self.n, self.n_class, self.size = n, n_class, size

    def __len__(self):
        return self.n

    def get_example(self, i):
        label = i % self.n_class
        rng = numpy.random.default_rng(i)
        colour = numpy.random.default_rng(1000 + label).uniform(-1, 1, (1, 1, 3))
        stripes = numpy.sin(numpy.arange(self.size) * (label + 1) * numpy.pi / self.size)
        image = colour * stripes[:, None, None] + rng.normal(0, 0.5, (self.size, self.size, 3))
        return numpy.clip(image * 60 + 128, 0, 255).astype(numpy.uint8), numpy.int32(label)
