"""Batches of decoded images for Chainer's trainer: a rank's samples (``sources``) decoded by
worker processes into shared memory, handed over as uint8; ``batch.to_device`` makes them
float32 NCHW, normalised, on the device (so 150 KB cross to a GPU per image, not 602 KB).

    train = Loader(ShardSource(path, comm.rank, comm.size, train=True), 32, TrainCrop())
    updater = StandardUpdater(train, optimizer, converter=to_device, device=device)

The sample stream, the crops and so every batch depend only on the seed, the rank and the
epoch, not on the worker count or timing, and ``serialize`` keeps the place in the epoch:
a resumed job sees the same batches as an uninterrupted one. Workers are fresh interpreters
(``chainermn_rt.data.worker``: not forked after MPI) with one thread each; a worker that dies
or a sample that cannot be decoded raises :class:`~chainermn_rt.data.shards.DataError` naming
the shard and key (the abort rule ends the job with that line).
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import weakref

import numpy

from chainermn_rt.data import jpeg, worker
from chainermn_rt.data import worker_protocol as protocol
from chainermn_rt.data.cpus import default_workers
from chainermn_rt.data.iterator import BatchIterator, Job
from chainermn_rt.data.shards import DataError

POLL_S = 0.5  # how often a wait for a worker checks that it still lives


class Loader(BatchIterator):
    """A Chainer iterator of :class:`Batch` es of ``batch_size`` from ``source`` (a
    ``sources.Source``) cropped by ``transform`` to ``size`` x ``size``.
    ``workers``: decoding processes (0: in this process; default: the rank's CPUs less one for
    the trainer).
    ``repeat=False``: one pass, the last batch possibly smaller (validation)."""

    def __init__(self, source, batch_size: int, transform, *, size: int = 224,
                 workers: int | None = None, repeat: bool = True, depth: int | None = None):
        self.workers = default_workers(spare=1) if workers is None else workers
        self._closed: list[int] = []  # shards closed here since the last dispatch
        super().__init__(source, batch_size, repeat=repeat,
                         on_shard_close=self._closed.append if self.workers else None)
        self.transform, self.size = transform, size
        self.depth = depth or max(2, 2 * self.workers)
        shape = (self.depth + 1, batch_size, size, size, 3)
        self._procs, self._conns, self._shm = [], [], None
        self._sent: set[int] = set()  # shards whose descriptor the workers hold
        if self.workers:
            self._start(shape)
        else:
            self._slots = numpy.empty(shape, numpy.uint8)
        self._restart()

    def _produce(self) -> tuple[Job, numpy.ndarray]:
        self._fill()
        job = self._pop_in_flight()
        if job is None:
            raise StopIteration
        slot = job.index % len(self._slots)
        if self.workers:
            self._wait(job)
        else:
            self._decode_here(job, slot)
        return job, self._slots[slot, :len(job.samples)]

    def _drop_in_flight(self) -> None:
        if self.workers:
            for job in self._in_flight():
                self._wait(job, check=False)

    def finalize(self) -> None:
        self._finalizer()

    # --- decoding --------------------------------------------------------------------------
    def _fill(self) -> None:
        """Hand batches to the workers until ``depth`` are in flight (one, without workers)."""
        while len(self._in_flight()) < (self.depth if self.workers else 1):
            job = self._take()
            if job is None:
                return
            self._add_in_flight(job)
            if self.workers:
                try:
                    self._dispatch(job)
                except OSError:  # a worker has gone: _wait says how
                    pass

    def _dispatch(self, job: Job) -> None:
        """Send ``job`` to its worker: shards the workers were not handed yet first, and images
        as spans of them (the worker reads them); images held here as one message after."""
        for sample in job.samples:
            shard = sample.file
            if shard is not None and shard.ident not in self._sent:
                for conn, proc in zip(self._conns, self._procs, strict=True):
                    conn.send(protocol.OpenShard(shard.ident))
                    shard.hand_to(conn, proc.pid)
                self._sent.add(shard.ident)
        if self._closed:
            gone = tuple(i for i in self._closed if i in self._sent)
            self._sent.difference_update(gone)
            self._closed.clear()
            if gone:
                for conn in self._conns:
                    conn.send(protocol.CloseShards(gone))
        held = [s.data for s in job.samples if s.file is None]
        refs = [None if s.file is None else protocol.ImageRef(s.file.ident, *s.data)
                for s in job.samples]
        conn = self._conns[job.index % self.workers]
        conn.send(protocol.Decode(
            job.index, job.index % len(self._slots), job.epoch_of, [s.key for s in job.samples],
            [s.shard for s in job.samples], refs,
            list(itertools.accumulate(map(len, held))) if held else None))
        if held:
            conn.send_bytes(b"".join(held))

    def _decode_here(self, job: Job, slot: int) -> None:
        try:
            worker.decode_into(self._slots[slot], [(s.key, s.image, s.shard)
                                                   for s in job.samples],
                               self.transform, job.epoch_of)
        except jpeg.DecodeError as err:
            raise DataError(str(err)) from None

    def _wait(self, job: Job, check: bool = True) -> None:
        w = job.index % self.workers
        conn, proc = self._conns[w], self._procs[w]
        try:
            while not conn.poll(POLL_S):
                if proc.poll() is not None:
                    raise EOFError
            done: protocol.Decoded = conn.recv()
        except (EOFError, OSError):
            if not check:
                return
            code = proc.wait()
            how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
                   else f"exit status {code}")
            first = job.samples[0]
            raise DataError(f"loader worker {w} (pid {proc.pid}) died ({how}) while decoding "
                            f"{first.shard}: sample {first.key!r} and {len(job.samples) - 1} "
                            "more") from None
        if check and done.error:
            raise DataError(done.error)
        assert done.batch == job.index, (done.batch, job.index)

    def _start(self, shape: tuple[int, ...]) -> None:
        from multiprocessing import shared_memory
        from multiprocessing.connection import Connection

        need = int(numpy.prod(shape))
        free = shutil.disk_usage(worker.SHM).free
        if free < need:
            raise DataError(f"loader: {worker.SHM} has {free >> 20} MiB free, the batches "
                            f"need {need >> 20} MiB; allowed: fewer workers or a smaller batch, "
                            "or a larger /dev/shm (docker run --shm-size)")
        self._shm = shared_memory.SharedMemory(create=True, size=need)
        self._slots = numpy.ndarray(shape, numpy.uint8, self._shm.buf)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        for _ in range(self.workers):
            mine, theirs = socket.socketpair()
            proc = subprocess.Popen(
                [sys.executable, "-m", "chainermn_rt.data.worker", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=env)
            theirs.close()
            conn = Connection(mine.detach())
            conn.send(protocol.Setup(self._shm.name, shape, self.transform))
            self._procs.append(proc)
            self._conns.append(conn)
        self._finalizer = weakref.finalize(self, _stop, self._procs, self._conns, self._shm)

    def _finalizer(self) -> None:  # replaced by a weakref.finalize when there are workers
        pass


def _stop(procs, conns, shm) -> None:
    for conn in conns:
        try:
            conn.send(protocol.Stop())
            conn.close()
        except OSError:
            pass
    for proc in procs:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if shm is not None:
        try:
            shm.close()
        except BufferError:  # a batch still points into it: the mapping goes with the process
            pass
        shm.unlink()
