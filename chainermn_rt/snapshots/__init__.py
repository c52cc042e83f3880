"""Training that survives time limits, preemption and failures: ``chainermn_rt.resumable``.

Example (after the trainer's extensions are set, just before ``trainer.run()``)::

    comm, device = chainermn_rt.setup()
    ...
    trainer = chainer.training.Trainer(updater, (10000, "iteration"), out="result")
    chainermn_rt.resumable(trainer, comm, every=500)   # resumes from result/snapshots/
    trainer.run()

On start it loads the newest complete set in ``OUT/snapshots`` (a damaged one is skipped with a
warning), or the set ``resume`` names (a damaged one is an error). During training it writes a
set every ``every`` iterations, keeping ``keep``, and one when the job's batch shell asks (its
``--signal`` came: time limit or preemption); then the program ends with status 0 and the shell
requeues the job. The continued run is bit-identical to an uninterrupted one with the same seed
(NumPy's and Python's random state are in the set; CuPy's is not: seed it per iteration if the
model draws random numbers on the GPU).
"""

from __future__ import annotations

from pathlib import Path

from chainermn_rt.errors import UserError, print_line
from chainermn_rt.snapshots import store
from chainermn_rt.snapshots.store import SnapshotError, check_set

__all__ = ["SnapshotError", "check_set", "resumable"]


def resumable(trainer, comm, *, every: int = 0, keep: int = 2, resume: str | Path | None = None,
              directory: str | Path | None = None) -> int:
    """Make ``trainer`` resumable on every rank of ``comm`` (a ChainerMN communicator or an
    mpi4py one); returns the iteration it resumes from (0: a fresh start)."""
    from chainermn_rt.snapshots.extension import Resumable, World, load_trainer

    for name, value, low in (("every", every, 0), ("keep", keep, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise UserError(f"resumable: {name}={value!r}; allowed: an integer >= {low}")
    world = World(getattr(comm, "mpi_comm", comm))
    directory = Path(directory) if directory else Path(trainer.out) / "snapshots"
    if resume:
        candidates, explicit = [Path(resume)], True
    else:
        candidates, explicit = store.complete_sets(directory), False
    start = 0
    for path in candidates:
        arrays, error = None, None
        try:
            arrays = store.check_file(path, store.manifest_for(path, world.size), world.rank)
        except SnapshotError as err:
            error = str(err)
        error = world.first_error(error)
        if error is None:
            try:
                load_trainer(trainer, arrays)
            except (KeyError, ValueError) as err:
                error = f"snapshot {path}: {type(err).__name__}: {err}; allowed: a set this " \
                        "program wrote (the same model, optimizer, iterators and extensions)"
            error = world.first_error(error)
            if error is not None:  # the trainer may be half loaded: never go on
                raise SnapshotError(error, everywhere=True)
            start = trainer.updater.iteration
            if world.rank == 0:
                print_line(f"chainermn-rt: resuming from {path} (iteration {start})")
            break
        if explicit:
            raise SnapshotError(f"resume: {error}", everywhere=True)
        if world.rank == 0:
            print_line(f"chainermn-rt: warning: skipping {error}")
    trainer.extend(Resumable(world, directory, every, keep))
    return start
