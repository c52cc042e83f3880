"""Debian's Open MPI 4.1.4 start-up crash on the sandbox: how it is told apart, and the one
policy for it.

Now and then (2 of 300 bare ``srun --mpi=pmix`` launches of 2 x 2 ranks with the host's
cores busy, none of 150 idle; docs/sandbox.md) a rank segfaults in ``MPI_Init``: waiting
in the modex fence, it receives the first message of a peer already past ``MPI_Init``, and its
TCP BTL calls the PML's handler for it, not yet registered (a null pointer; the core dump's
stack: ``ompi_mpi_init`` -> ``opal_progress`` -> libevent -> ``mca_btl_tcp``). The job's log
then shows Open MPI's report of a segfault at address ``(nil)``, before any rank said it had
started.

The policy: a launch that crashed so is started once more, and only once. A sandbox job goes
through :meth:`chainermn_rt.submission.Cluster.run`, which submits it once more (saying so)
and raises JobFailed if it crashes again; a test that starts ranks itself (mpirun, srun) and
fails showing the crash is run once more (tests/conftest.py). A job on a real cluster ends as
it ends.

>>> crashed_at_start("Signal: Segmentation fault (11)\\nFailing at address: (nil)\\n")
True
>>> crashed_at_start("Signal: Segmentation fault (11)\\nFailing at address: (nil)\\n"
...                  "4 ranks, communicator ...", started=" ranks, communicator ")
False
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# Open MPI's report of the crash, as the job's log shows it: the signal and the address.
MARKS = ("Signal: Segmentation fault", "Failing at address: (nil)")
AGAIN = 1  # how many more times a launch that crashed so is started


def crashed_at_start(text: str, started: str | None = None) -> bool:
    """``text`` (a job's log, a test's failure) shows the crash above, and not ``started``
    (when given): a line that the program prints once its ranks are past MPI's start-up."""
    return all(mark in text for mark in MARKS) and (started is None or started not in text)


def launched(launch: Callable[[], T], crashed: Callable[[T], bool],
             before_again: Callable[[T], object] = lambda result: None) -> list[T]:
    """The policy: ``launch()``, and while its result ``crashed`` and AGAIN more tries are left,
    ``before_again(result)`` and launch once more. Every result, in order: the last one is
    the launch's outcome (it may still show the crash: the caller says what that means).

    >>> results = iter(["crash", "ok"])
    >>> launched(lambda: next(results), lambda r: r == "crash")
    ['crash', 'ok']
    """
    results = [launch()]
    while crashed(results[-1]) and len(results) <= AGAIN:
        before_again(results[-1])
        results.append(launch())
    return results


def once_more(job: str) -> str:
    """What is said when ``job`` crashed so and is submitted once more."""
    return (f"job {job}: Debian's Open MPI 4.1.4 crashed in MPI_Init, a known fault of the "
            "sandbox's MPI (docs/sandbox.md); submitting the job once more")


def again(jobs: list[str], log: Path | None) -> str:
    """JobFailed's message when every one of ``jobs`` crashed so (no crash marks in it: the
    tests' rerun of a failure that shows them must not start it a third time)."""
    return (f"jobs {', '.join(jobs)}: Debian's Open MPI 4.1.4 crashed in MPI_Init each time, "
            f"a known fault of the sandbox's MPI (docs/sandbox.md); see {log or 'the log'}")
