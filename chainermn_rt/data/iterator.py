"""What both loaders (``loader.Loader``: libjpeg-turbo in worker processes; ``dali.DaliLoader``:
NVIDIA DALI) share: a Chainer iterator that cuts a rank's sample stream (``sources``) into
batches, counts epochs as Chainer's iterators do, keeps its place in the epoch through
``serialize`` and measures the time spent waiting for data. A loader supplies the images of
each batch (:meth:`BatchIterator._produce`): it takes a batch's samples (``_take``), counts it
in flight while its decoder has it (``_add_in_flight``, ``_pop_in_flight``, ``_in_flight``:
the queue is the base's own) and drops what it has in flight on a restart
(``_drop_in_flight``).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import NamedTuple

import chainer
import numpy

from chainermn_rt.data.batch import Batch
from chainermn_rt.data.shards import DataError
from chainermn_rt.data.sources import Source


class Job(NamedTuple):
    index: int
    samples: list  # Sample
    epoch_of: list  # the epoch each sample belongs to (a batch may straddle two)
    end: tuple[int, int, bool]  # (epoch, position) after it, and whether it ended an epoch


class BatchIterator(chainer.dataset.Iterator):
    """Batches of ``batch_size`` samples of ``source`` (a ``sources.Source``); ``repeat=False``:
    one pass, the last batch possibly smaller (validation). ``on_shard_close(ident)``: told
    when a shard the stream opened is closed (not a method of the loader's: a shard that
    outlives the loader must not keep it alive)."""

    def __init__(self, source: Source, batch_size: int, *, repeat: bool = True,
                 on_shard_close: Callable[[int], None] | None = None):
        self.source, self.batch_size, self.repeat = source, batch_size, repeat
        self.epoch, self.current_position, self.is_new_epoch = 0, 0, False
        self._previous_epoch_detail = -1.0
        self.waited = 0.0  # seconds __next__ spent waiting for data
        self._lengths: dict[int, int] = {}
        self._on_shard_close = on_shard_close
        self.__in_flight: collections.deque[Job] = collections.deque()

    # --- what a loader supplies ------------------------------------------------------------
    def _produce(self) -> tuple[Job, object]:
        """The next batch's job and its images ((n, size, size, 3) uint8); StopIteration at
        the end of a one-pass loader."""
        raise NotImplementedError

    def _drop_in_flight(self) -> None:
        """Forget the batches started but not handed out (the place in the epoch changed);
        :meth:`_in_flight` still lists them."""

    # --- the batches in flight: with the decoder, not yet handed out -----------------------
    def _add_in_flight(self, job: Job) -> None:
        """``job`` is with the decoder now (after :meth:`_take`)."""
        self.__in_flight.append(job)

    def _pop_in_flight(self) -> Job | None:
        """The oldest batch in flight, no longer in flight; None when there is none."""
        return self.__in_flight.popleft() if self.__in_flight else None

    def _in_flight(self) -> tuple[Job, ...]:
        """The batches in flight, oldest first."""
        return tuple(self.__in_flight)

    # --- Chainer's iterator interface -------------------------------------------------------
    def __next__(self) -> Batch:
        start = time.perf_counter()
        job, images = self._produce()
        self.waited += time.perf_counter() - start
        self._previous_epoch_detail = self.epoch_detail
        self.epoch, self.current_position, self.is_new_epoch = job.end
        n = len(job.samples)
        labels = numpy.fromiter((s.label for s in job.samples), numpy.int32, n)
        return Batch(images, labels)

    next = __next__

    @property
    def epoch_detail(self) -> float:
        return self.epoch + self.current_position / self._length(self.epoch)

    @property
    def previous_epoch_detail(self) -> float | None:
        return None if self._previous_epoch_detail < 0 else self._previous_epoch_detail

    def reset(self) -> None:
        self.epoch, self.current_position, self.is_new_epoch = 0, 0, False
        self._previous_epoch_detail = -1.0
        self._restart()

    def serialize(self, serializer) -> None:
        self.epoch = serializer("epoch", self.epoch)
        self.current_position = serializer("current_position", self.current_position)
        self.is_new_epoch = serializer("is_new_epoch", self.is_new_epoch)
        self._previous_epoch_detail = serializer("previous_epoch_detail",
                                                 self._previous_epoch_detail)
        if isinstance(serializer, chainer.serializer.Deserializer):
            self._restart()

    def source_name(self) -> str:
        return str(getattr(self.source, "folder", "data"))

    # --- reading ---------------------------------------------------------------------------
    def _length(self, epoch: int) -> int:
        if epoch not in self._lengths:
            self._lengths[epoch] = self.source.length(epoch)
        return max(1, self._lengths[epoch])

    def _restart(self) -> None:
        """Read on from (epoch, current_position): drop what is in flight, skip what was read."""
        if self.__in_flight:
            self._drop_in_flight()
        self.__in_flight.clear()
        self._next_index = 0
        self._read = (self.epoch, self.current_position)
        self._stream = None
        self._ended = False

    def _samples_of(self, epoch: int, skip: int):
        length = self.source.length(epoch)
        stream = self.source.stream(epoch, self._on_shard_close)
        self._lengths[epoch] = length
        for _ in range(skip):  # read, not decoded
            next(stream, None)
        return length, stream

    def _take(self) -> Job | None:
        """The next batch's samples, or None at the end of a one-pass loader."""
        epoch, position = self._read
        samples, epochs, crossed = [], [], False
        while len(samples) < self.batch_size and not self._ended:
            if self._stream is None:
                self._stream = self._samples_of(epoch, position)
            length, stream = self._stream
            if position < length:
                sample = next(stream, None)
                if sample is None:
                    raise DataError(f"{self.source_name()}: epoch {epoch} ended after {position} "
                                    f"samples; its manifest promised {length}")
                samples.append(sample)
                epochs.append(epoch)
                position += 1
            if position >= length:  # the epoch is over
                if not self.repeat:
                    self._ended = True
                    break
                epoch, position, crossed, self._stream = epoch + 1, 0, True, None
        self._read = (epoch, position)
        if not samples:
            return None
        job = Job(self._next_index, samples, epochs, (epoch, position, crossed))
        self._next_index += 1
        return job
