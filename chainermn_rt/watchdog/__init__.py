"""The stall watchdog: a collective that waits too long for a rank is named, then the job ends.

``chainermn_rt.setup()`` calls :func:`watch` on the communicator it makes; under the per-rank
step, so does ``chainermn.create_communicator`` (:mod:`~chainermn_rt.watchdog.autowatch`).
Each collective method of the communicator then notes where this rank is (:class:`Progress`:
a few attribute writes per call).
A daemon thread on every rank sends that to rank 0 every few seconds over a duplicate of the
communicator's MPI communicator; rank 0's thread finds a collective that has waited
``CHAINERMN_RT_STALL_TIMEOUT`` seconds (default 600; 0: no watchdog), or ranks silent for
``CHAINERMN_RT_SILENT_TIMEOUT`` seconds (default 30: dead, wedged, their node lost) while
others wait in one, prints one line naming the ranks that have not arrived, their iteration
and where they are
(:mod:`~chainermn_rt.watchdog.diagnosis`), then aborts the job
(``CHAINERMN_RT_STALL_ACTION=warn``: only prints, once per stalled collective)::

    chainermn-rt: stall: ranks 0-2 wait in multi_node_mean_grad (iteration 121) for 600 s;
    not arrived: rank 3 on node2 (after iteration 120, outside collectives for 601 s)

NCCL has no such check of its own; a GPU communicator's NCCL start-up happens in its first
collective, so a rank that never gets there is named the same way. MPI's own start-up is
bounded by :mod:`chainermn_rt.watchdog.startup`. Needs ``MPI_THREAD_MULTIPLE`` (mpi4py asks
for it); without it the watchdog warns and stays off.
"""

from __future__ import annotations

import atexit
import functools
import socket
import threading
import time

from chainermn_rt.errors import print_line
from chainermn_rt.watchdog.diagnosis import Report, diagnose
from chainermn_rt.watchdog.settings import Settings, read

# The communicator methods that are collectives (ChainerMN's and mpi4py's names).
COLLECTIVES = ("multi_node_mean_grad", "allreduce_grad", "bcast_data", "broadcast_data",
               "bcast_obj", "gather_obj", "allreduce_obj", "scatter_obj", "allreduce", "bcast",
               "gather", "allgather", "alltoall", "scatter", "split")
GRADIENTS = ("multi_node_mean_grad", "allreduce_grad")  # one per training iteration
_TAG = 0x57D  # the reports' tag on the watchdog's own communicator


class Progress:
    """Where this rank is: collectives entered, iteration, the collective it is in, since when.
    The multi-node optimizer's first iteration broadcasts the parameters instead of averaging
    gradients, so a broadcast before any gradient counts as iteration 1."""

    def __init__(self):
        self.seq, self.gradients, self.first_bcast = 0, 0, False
        self.op: str | None = None
        self.since = time.monotonic()
        self.depth = 0

    @property
    def iteration(self) -> int:
        return self.gradients + self.first_bcast

    def enter(self, op: str) -> None:
        self.depth += 1
        if self.depth > 1:  # a collective inside a collective: the outer one counts
            return
        if op in GRADIENTS:
            self.gradients += 1
        elif op in ("bcast_data", "broadcast_data") and not self.gradients:
            self.first_bcast = True
        self.seq, self.op, self.since = self.seq + 1, op, time.monotonic()

    def leave(self) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.op, self.since = None, time.monotonic()

    def report(self) -> Report:
        return Report(self.seq, self.iteration, self.op, time.monotonic() - self.since)


def _watched(method, name: str, progress: Progress):
    @functools.wraps(method)
    def call(*args, **kwargs):
        progress.enter(name)
        try:
            return method(*args, **kwargs)
        finally:
            progress.leave()

    return call


class Watchdog(threading.Thread):
    """Every ``interval`` s: send this rank's report to rank 0; on rank 0, diagnose."""

    def __init__(self, mpi_comm, progress: Progress, settings: Settings):
        super().__init__(name="chainermn-rt-watchdog", daemon=True)
        self.comm = mpi_comm.Dup()  # collective: every rank makes its watchdog together
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.progress, self.settings = progress, settings
        quiet = min(settings.stall_timeout, settings.silent_timeout or settings.stall_timeout)
        self.interval = min(max(quiet / 6, 0.2), 10.0)
        self.stopping = threading.Event()
        self.reports: dict[int, Report | None] = dict.fromkeys(range(self.size))
        self.heard = dict.fromkeys(range(self.size), time.monotonic())
        # collective too: every rank's host, known before any report
        self.hosts = dict(enumerate(self.comm.allgather(socket.gethostname())))
        self.offset: dict[int, float] = {}
        self.warned: set[int] = set()

    def run(self) -> None:
        while True:  # a first report at once, then one every interval
            message = (self.progress.report(), time.monotonic())
            if self.rank == 0:
                self.take(0, message)
                self.receive()
                self.check()
            else:
                self.comm.send(message, dest=0, tag=_TAG)
            if self.stopping.wait(self.interval):
                return

    def take(self, rank: int, message) -> None:
        """A report, dated by the sender's clock: the least delay seen so far maps its clock to
        ours, so a report that arrives late still counts from when it was sent."""
        report, sent = message
        now = time.monotonic()
        self.offset[rank] = min(self.offset.get(rank, now - sent), now - sent)
        self.reports[rank] = Report(*report)
        self.heard[rank] = max(self.heard[rank], sent + self.offset[rank])

    def receive(self) -> None:
        from mpi4py import MPI

        status = MPI.Status()
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=_TAG, status=status):
            source = status.Get_source()
            self.take(source, self.comm.recv(source=source, tag=_TAG))

    def check(self) -> None:
        now = time.monotonic()
        silent = {r: now - t for r, t in self.heard.items()}
        aged = {r: rep._replace(seconds=rep.seconds + silent[r]) if rep else None
                for r, rep in self.reports.items()}  # as of now
        line = diagnose(aged, self.hosts, silent, self.settings.stall_timeout,
                        self.settings.silent_timeout)
        if line is None:
            return
        seq = max(r.seq for r in aged.values() if r)
        if self.settings.action == "warn":
            if seq not in self.warned:
                self.warned.add(seq)
                print_line(f"chainermn-rt: warning: {line}")
            return
        from mpi4py import MPI

        print_line(f"chainermn-rt: {line}; aborting the job")
        MPI.COMM_WORLD.Abort(1)

    def stop(self) -> None:
        """Before MPI finalises (atexit): end the thread, take what was sent."""
        self.stopping.set()
        self.join(timeout=2 * self.interval + 5)
        if self.rank == 0:
            self.receive()


def watch(comm, settings: Settings | None = None):
    """Watch ``comm``'s collectives (a ChainerMN communicator); returns ``comm``. Off when
    ``CHAINERMN_RT_STALL_TIMEOUT=0``, for one rank, or without ``MPI_THREAD_MULTIPLE``."""
    from mpi4py import MPI

    settings = settings or read()
    mpi_comm = comm.mpi_comm
    if not settings.stall_timeout or mpi_comm.Get_size() < 2 or getattr(comm, "_watchdog", None):
        return comm
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        if mpi_comm.Get_rank() == 0:
            print_line("chainermn-rt: warning: no stall watchdog: MPI was not initialised with "
                       "MPI_THREAD_MULTIPLE")
        return comm
    progress = Progress()
    for name in COLLECTIVES:
        method = getattr(comm, name, None)
        if callable(method):
            setattr(comm, name, _watched(method, name, progress))
    dog = Watchdog(mpi_comm, progress, settings)
    comm._watchdog = dog
    dog.start()
    atexit.register(dog.stop)
    return comm
