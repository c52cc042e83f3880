"""The recorder behind :func:`chainermn_rt.timeline`: it stamps each phase of a Chainer
trainer's steps on every rank and appends them to the rank's record file.

What it wraps (instance attributes only; the classes stay as they are):

- ``trainer.run``: the clock estimate against rank 0 before training, and after it (when it
  ends normally) the last window, the second estimate, the end line and rank 0's verdict;
- ``updater.update`` (a step begins), the updater's iterators' ``next`` (``data``), the
  communicator's ``multi_node_mean_grad``/``allreduce_grad``/``bcast_data`` (``exchange``, only
  inside an update) and the multi-node optimizer's own optimizer's ``update`` (``update``);
  ``compute`` is the time from the batch to the exchange;
- each extension, when it runs (``ext:NAME``), through a thin proxy set in its trainer entry
  when training starts; the recorder's own extension runs last and ends the step.

Per step it costs a few function calls and clock readings; lines are kept in memory and
written in one ``write`` every ``flush_seconds`` (or ``max_lines`` lines). Every few seconds
(``metrics_every``) the ranks hand rank 0 their recent steps' durations over the timeline's
own communicator (:mod:`~chainermn_rt.timeline.live`): the straggler rule's tallies and the
site's metrics.
"""

from __future__ import annotations

import atexit
import functools
import os
import socket
import time
from pathlib import Path

import chainer
import numpy

from chainermn_rt import host_list
from chainermn_rt.errors import print_line
from chainermn_rt.files import write_atomically
from chainermn_rt.rank_contract import STAGE_DIR_VAR
from chainermn_rt.timeline import clock as clocks
from chainermn_rt.timeline import gpu, metrics, records
from chainermn_rt.timeline.live import COLUMNS, Live
from chainermn_rt.timeline.straggler import SLOW_NODES_FILE

EXCHANGES = ("multi_node_mean_grad", "allreduce_grad", "bcast_data")
FIRST_WINDOW = 10  # recorded steps before rank 0 sizes the windows from their times
MAX_WINDOW = 10000  # steps per window at most (bounds the memory the windows take)


class _Timed:
    """An extension in its trainer entry, timed when it runs; everything else goes to it."""

    def __init__(self, extension, name: str, recorder: Recorder):
        object.__setattr__(self, "_extension", extension)
        object.__setattr__(self, "_phase", records.EXTENSION + name)
        object.__setattr__(self, "_recorder", recorder)

    def __call__(self, trainer):
        rec = self._recorder
        begin = rec.stamp()
        rec.ranges.push(self._phase)
        try:
            return self._extension(trainer)
        finally:
            rec.ranges.pop()
            rec.phase(self._phase, begin, rec.stamp())

    def __getattr__(self, name):
        return getattr(self._extension, name)

    def __setattr__(self, name, value):
        setattr(self._extension, name, value)


class _StepEnd(chainer.training.Extension):
    """The recorder's own extension: after every other one, it ends the step."""

    trigger = (1, "iteration")
    priority = -1000  # after chainermn_rt.resumable's (-200)
    name = "chainermn_rt_timeline"

    def __init__(self, recorder: Recorder):
        self.recorder = recorder

    def __call__(self, trainer) -> None:
        self.recorder.end_step(trainer.updater.iteration)

    def finalize(self, trainer=None) -> None:  # also when training failed: keep what was seen
        self.recorder.flush()


class Recorder:
    """One rank's recorder; :meth:`install` hooks it into a trainer."""

    def __init__(self, mpi_comm, directory: Path | None, *, every: int = 1, sync: bool = False,
                 nvtx=None, metrics_dir: Path | None = None, metrics_every: float = 15.0,
                 flush_seconds: float = 2.0, max_lines: int = 1024,
                 clock: clocks.Clock | None = None, environ=os.environ):
        self.mpi = mpi_comm.Dup()  # collective: the timeline's own messages
        self.rank, self.size = self.mpi.Get_rank(), self.mpi.Get_size()
        self.directory = Path(directory) if directory else None
        self.every, self.metrics_every, self.flush_seconds = every, metrics_every, flush_seconds
        self.metrics_dir = Path(metrics_dir) if metrics_dir else None
        self.job = environ.get("SLURM_JOB_ID") or None
        self.restart = int(environ.get("SLURM_RESTART_COUNT") or 0)
        self.staged = bool(environ.get(STAGE_DIR_VAR))  # the data on the nodes (--stage)
        self.clock = clock or clocks.Clock()
        self.ranges = gpu.Ranges(nvtx)
        self._sync = gpu.synchronizer(sync)
        self.sync = sync
        self.hosts = dict(enumerate(self.mpi.allgather(socket.gethostname())))
        self.writer = None
        if self.directory is not None:
            if self.rank == 0:
                self.directory.mkdir(parents=True, exist_ok=True)
            self.mpi.Barrier()
            self.writer = records.Writer(self.directory / records.file_name(self.rank))
        self.max_lines = max_lines
        self.live = Live(self.size, every, self.staged) if self.rank == 0 else None
        # the step being recorded
        self._begin: int | None = None
        self._phases: list[tuple[str, int, int]] = []
        self._samples = 0
        self._data_end = None
        self._first: dict[str, int] = {}  # phase -> when it first began in this step
        self._in_update = False
        self._compute_open = False
        # the part's counts and the current window
        self.count = 0
        self._window: list[tuple] = []
        self._window_size: int | None = None
        self._window_start = time.monotonic()
        self._last_flush = time.monotonic()
        self._iteration = 0

    # --- stamps ------------------------------------------------------------------------------
    def stamp(self) -> int:
        if self._sync is not None:
            self._sync()
        return self.clock.now_us()

    def phase(self, name: str, begin: int, end: int) -> None:
        if self._begin is not None:
            self._phases.append((name, begin, end))

    # --- hooks -------------------------------------------------------------------------------
    def install(self, trainer, comm) -> None:
        updater = trainer.updater
        update = updater.update

        @functools.wraps(update)
        def timed_update():
            self.begin_step()
            try:
                return update()
            finally:
                self.end_update()

        updater.update = timed_update
        iterators = getattr(updater, "_iterators", None) or {"main": updater.get_iterator("main")}
        for iterator in iterators.values():
            iterator.next = self._timed_next(iterator.next)
        for name in EXCHANGES:
            method = getattr(comm, name, None)
            if callable(method):
                setattr(comm, name, self._timed_phase(method, "exchange"))
        for optimizer in updater.get_all_optimizers().values():
            actual = vars(optimizer).get("actual_optimizer")  # chainermn's multi-node optimizer
            if actual is not None:
                actual.update = self._timed_phase(actual.update, "update")
        trainer.extend(_StepEnd(self))
        run = trainer.run

        @functools.wraps(run)
        def timed_run(*args, **kwargs):
            self.start(trainer)
            result = run(*args, **kwargs)
            self.finish(trainer)
            return result

        trainer.run = timed_run
        atexit.register(self.flush)  # a program that stops by sys.exit (resumable's stop)

    def _timed_next(self, next_):
        @functools.wraps(next_)
        def timed():
            begin = self.stamp()
            self.ranges.push("data")
            try:
                batch = next_()
            finally:
                self.ranges.pop()
            end = self.stamp()
            self.phase("data", begin, end)
            self._data_end = end
            try:
                self._samples += len(batch)
            except TypeError:
                pass
            if self._in_update:
                self.ranges.push("compute")
                self._compute_open = True
            return batch
        return timed

    def _close_compute(self) -> None:
        if self._compute_open:
            self.ranges.pop()
            self._compute_open = False

    def _timed_phase(self, method, phase: str):
        """``method`` (an exchange, the optimizer's update) timed as ``phase`` when it runs
        inside an update; the first of each phase in a step ends ``compute``."""
        @functools.wraps(method)
        def timed(*args, **kwargs):
            if not self._in_update:
                return method(*args, **kwargs)
            begin = self.stamp()
            self._close_compute()
            self._first.setdefault(phase, begin)
            self.ranges.push(phase)
            try:
                return method(*args, **kwargs)
            finally:
                self.ranges.pop()
                self.phase(phase, begin, self.stamp())
        return timed

    # --- a step ------------------------------------------------------------------------------
    def begin_step(self) -> None:
        self._begin = self.stamp()
        self._phases = []
        self._samples = 0
        self._data_end = None
        self._first = {}
        self._in_update = True
        self.ranges.push("step")

    def end_update(self) -> None:
        self._in_update = False
        end = self.stamp()
        self._close_compute()
        if self._begin is None:
            return
        compute_end = self._first.get("exchange") or self._first.get("update") or end
        compute_begin = self._data_end if self._data_end is not None else self._begin
        if compute_begin <= compute_end:
            self._phases.append(("compute", compute_begin, compute_end))

    def end_step(self, iteration: int) -> None:
        if self._begin is None:
            return
        end = self.stamp()
        self.ranges.pop()
        begin, self._begin = self._begin, None
        self._iteration = iteration
        if iteration % self.every:
            return
        order = {name: i for i, name in enumerate(records.PHASES)}
        phases = sorted(self._phases, key=lambda p: (p[1], order.get(p[0], 9)))
        if self.writer is not None:
            self.writer.add(records.step_line(iteration, self._samples, begin, end, phases))
        spans = {name: 0 for name in (*records.PHASES, "ext")}
        for name, b, e in phases:
            key = "ext" if name.startswith(records.EXTENSION) else name
            if key in spans:
                spans[key] += e - b
        self._window.append((self.count, spans["data"], spans["compute"], spans["exchange"],
                             spans["update"], spans["ext"], end - begin, self._samples))
        self.count += 1
        if time.monotonic() - self._last_flush >= self.flush_seconds or \
                (self.writer is not None and self.writer.pending >= self.max_lines):
            self.flush()
        if self.count == FIRST_WINDOW:
            self._size_windows()
            self.gather()
        elif self._window_size and (self.count - FIRST_WINDOW) % self._window_size == 0:
            self.gather()

    def _size_windows(self) -> None:
        """Rank 0 sizes the windows so that one passes every ``metrics_every`` seconds."""
        size = None
        if self.rank == 0:
            seconds = numpy.median([row[COLUMNS.index("step")] for row in self._window]) / 1e6
            size = int(min(max(self.metrics_every / max(seconds, 1e-6), 1), MAX_WINDOW))
        self._window_size = self.mpi.bcast(size, root=0)

    # --- rank 0's view ----------------------------------------------------------------------
    def gather(self) -> None:
        """Every rank's window to rank 0 (a collective on the timeline's communicator)."""
        window = numpy.array(self._window, dtype=numpy.float64).reshape(-1, len(COLUMNS))
        self._window = []
        windows = self.mpi.gather(window, root=0)
        if self.rank != 0:
            return
        now = time.monotonic()
        self.live.add(windows, now - self._window_start)
        self._window_start = now
        self.write_metrics()

    def write_metrics(self) -> None:
        if self.metrics_dir is None or self.live is None:
            return
        text = metrics.exposition(self.job or "none", self.live.figures, ranks=self.size,
                                  iteration=self._iteration, hosts=self.hosts,
                                  slow=[v.rank for v in self.live.judge.verdicts()],
                                  now=time.time())
        try:
            metrics.write(self.metrics_dir, self.job or "none", text)
        except OSError as err:
            print_line(f"chainermn-rt: warning: timeline metrics: {self.metrics_dir}: "
                       f"{err.strerror}; not written")
            self.metrics_dir = None

    # --- the part's start and end ------------------------------------------------------------
    def start(self, trainer) -> None:
        """Before training: time every extension, estimate the clock, write the part line."""
        own = _StepEnd
        for name, entry in trainer._extensions.items():  # noqa: SLF001
            if not isinstance(entry.extension, (own, _Timed)):
                entry.extension = _Timed(entry.extension, name, self)
        offset, rtt = clocks.estimate(self.mpi, self.clock)
        bound = self.mpi.reduce(rtt / 2, op=_max(), root=0)
        if self.writer is not None:
            part = records.parts_in(self.writer.path) + 1
            self.writer.add(records.part_line(records.PartInfo(
                part, self.rank, self.size, self.hosts[self.rank], os.getpid(), self.job,
                self.restart, self.clock.origin_ns, offset, rtt, self.every, self.sync,
                self.staged)))
            self.flush()
        if self.rank == 0:
            where = f"to {self.directory}" if self.directory else "for the metrics only"
            print_line(f"chainermn-rt: timeline: recording {where}; clocks aligned to rank 0's "
                       f"within {bound:.0f} us")
        self._window_start = time.monotonic()

    def finish(self, trainer) -> None:
        """After training that ended normally (on every rank): the last window, the second
        clock estimate, the end line; rank 0 prints the verdict and writes the host list."""
        self.gather()
        offset, rtt = clocks.estimate(self.mpi, self.clock)
        if self.writer is not None:
            self.writer.add(records.end_line(self.clock.now_us(), self.count, offset, rtt))
            self.close()
        if self.rank != 0:
            return
        judge = self.live.judge
        print_line(judge.line(self.hosts))
        if self.directory is not None:
            try:
                write_atomically(self.directory / SLOW_NODES_FILE,
                                 lambda f: f.write(host_list.text(judge.hosts(self.hosts))))
            except OSError as err:
                print_line(f"chainermn-rt: warning: timeline: {self.directory}: "
                           f"{err.strerror}; {SLOW_NODES_FILE} not written")
        if self.metrics_dir is not None:
            metrics.remove(self.metrics_dir, self.job or "none")

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if self.writer is None:
            return
        try:
            self.writer.flush()
        except OSError as err:  # the disk is full, the folder gone: training goes on
            print_line(f"chainermn-rt: warning: timeline: rank {self.rank}: "
                       f"{self.writer.path}: {err.strerror}; recording stops")
            self.writer = None

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            try:
                self.writer.close()
            except OSError:
                pass


def _max():
    from mpi4py import MPI

    return MPI.MAX
