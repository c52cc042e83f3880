"""The trainer extension behind :func:`chainermn_rt.resumable`: agreed snapshots, resume, stop.

Every rank saves its own file (its iterator's order and position, its random state, the model,
the optimizer, the extensions' state), all from the same iteration; rank 0 publishes the set
once every file is on disk (:mod:`chainermn_rt.snapshots.store`). A set is written every
``every`` iterations and when the batch shell asks for one (its time-limit or preemption
signal, through :data:`~chainermn_rt.rank_contract.STOP_FILE_VAR`); after the latter the
program stops with status 0 and the shell requeues the job.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

import chainer
import numpy

from chainermn_rt.errors import print_line
from chainermn_rt.rank_contract import STOP_DONE_SUFFIX, STOP_FILE_VAR, STOP_READY_SUFFIX
from chainermn_rt.snapshots import store

_RNG = "_chainermn_rt/"  # key prefix of the random states in a rank's file
STOP_CHECK_SECONDS = 1.0  # rank 0 looks for the stop file at most this often


class World:
    """What the snapshots need of MPI: rank, size, bcast, allgather (mpi4py's communicator)."""

    def __init__(self, mpi_comm):
        self.mpi = mpi_comm
        self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()

    def first_error(self, error: str | None) -> str | None:
        """Every rank's error (or None) -> the lowest rank's error, the same on every rank."""
        return next((e for e in self.mpi.allgather(error) if e), None)


def random_state() -> dict[str, numpy.ndarray]:
    """NumPy's global generator (shuffling, weight initialisation) and Python's ``random``."""
    name, keys, pos, has_gauss, cached = numpy.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {_RNG + "numpy_keys": keys,
            _RNG + "numpy_rest": numpy.array([pos, has_gauss, cached], dtype=numpy.float64),
            _RNG + "python": numpy.frombuffer(
                json.dumps([version, list(internal), gauss_next]).encode(), dtype=numpy.uint8)}


def set_random_state(arrays: dict[str, numpy.ndarray]) -> None:
    pos, has_gauss, cached = arrays[_RNG + "numpy_rest"].tolist()
    numpy.random.set_state(("MT19937", arrays[_RNG + "numpy_keys"], int(pos), int(has_gauss),
                            cached))
    version, internal, gauss_next = json.loads(arrays[_RNG + "python"].tobytes())
    random.setstate((version, tuple(internal), gauss_next))


def trainer_arrays(trainer) -> dict[str, numpy.ndarray]:
    serializer = chainer.serializers.DictionarySerializer()
    serializer.save(trainer)
    return {**serializer.target, **random_state()}


def load_trainer(trainer, arrays: dict[str, numpy.ndarray]) -> None:
    chainer.serializers.NpzDeserializer(arrays).load(trainer)
    set_random_state(arrays)
    for optimizer in trainer.updater.get_all_optimizers().values():
        _parameters_already_equal(optimizer)


def _parameters_already_equal(optimizer) -> None:
    """ChainerMN's multi-node optimizer spends its first update broadcasting rank 0's parameters
    (no step is taken). After a resume they are equal already (every rank loaded the same), and
    the uninterrupted run would take a step: mark them as broadcast."""
    if "target_params" in vars(optimizer):  # chainermn.optimizers._MultiNodeOptimizer
        object.__setattr__(optimizer, "target_params", [
            (name, param.data is not None) for name, param in sorted(
                optimizer.target.namedparams())])


class Resumable(chainer.training.Extension):
    """Called after every iteration's update, after every other extension."""

    trigger = (1, "iteration")
    priority = -200  # after chainer's own snapshot extension (-100)
    name = "chainermn_rt_resumable"

    def __init__(self, world: World, directory: Path, every: int, keep: int):
        self.world, self.directory, self.every, self.keep = world, Path(directory), every, keep
        self.stop_file = os.environ.get(STOP_FILE_VAR) or None
        self._last_look = 0.0
        if self.stop_file is not None and world.rank == 0:
            try:  # tells the batch shell this program resumes (rank_contract)
                Path(self.stop_file + STOP_READY_SUFFIX).touch()
            except OSError:
                pass

    def __call__(self, trainer) -> None:
        iteration = trainer.updater.iteration
        stop = self.stop_requested()
        if stop or (self.every and iteration % self.every == 0):
            path = self.save(trainer)
            if stop:
                self.stopped(path)

    def stop_requested(self) -> bool:
        """Rank 0's look at the stop file, broadcast: every rank stops at the same iteration."""
        if self.stop_file is None:
            return False
        seen = False
        if self.world.rank == 0 and time.monotonic() - self._last_look >= STOP_CHECK_SECONDS:
            self._last_look = time.monotonic()
            seen = os.path.exists(self.stop_file)
        return bool(self.world.mpi.bcast(seen, root=0))

    def save(self, trainer) -> Path:
        """Write this iteration's set (a collective call); :class:`store.SnapshotError` on
        every rank when any rank could not write."""
        iteration, world = trainer.updater.iteration, self.world
        tmp = store.temp_dir(self.directory, iteration)
        error = None
        if world.rank == 0:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                store.prune(self.directory, self.keep)  # stale .tmp folders too
                tmp.mkdir()
            except OSError as err:
                error = f"{tmp}: {err.strerror}"
        error = world.mpi.bcast(error, root=0)
        digest = None
        if error is None:
            try:
                data = store.npz_bytes(trainer_arrays(trainer))
                store.write_file(tmp / store.rank_file(world.rank), data)
                digest = hashlib.sha256(data).hexdigest()
            except OSError as err:
                error = f"rank {world.rank}: {tmp}: {err.strerror}"
        error = world.first_error(error)
        digests = world.mpi.gather(digest, root=0)
        final = self.directory / store.set_name(iteration)
        if error is None and world.rank == 0:
            try:
                store.publish(self.directory, iteration,
                              {store.rank_file(r): d for r, d in enumerate(digests)})
                store.prune(self.directory, self.keep)
            except OSError as err:
                error = f"{final}: {err.strerror}"
        error = world.mpi.bcast(error, root=0)
        if error is not None:
            raise store.SnapshotError(f"snapshot of iteration {iteration}: {error}")
        return final

    def stopped(self, path: Path) -> None:
        """After the requested set: tell the shell where it is, then end the program."""
        if self.world.rank == 0:
            store.write_file(Path(self.stop_file + STOP_DONE_SUFFIX), f"{path}\n".encode())
            print_line(f"chainermn-rt: snapshot {path} written on the job's request (time limit "
                       "or preemption); stopping so the job can be requeued")
        sys.exit(0)
