"""The errors a command reports as one line, each with its exit status (``chainermn-rt --help``).

>>> UserError.exit_status, JobFailed.exit_status, EnvironmentProblem.exit_status
(2, 1, 3)
"""

import sys


class UserError(Exception):
    """Bad input from a person: a site profile, a CLI argument or a job request.

    The message names the field and what is allowed, e.g.
    ``UserError("partition 'gpu': gpus_per_node is 9; allowed: 1-8")``. ``everywhere``:
    every rank of a job finds it alike (its settings, a damaged snapshot): the launcher's
    rank 0 alone reports it.
    """

    exit_status = 2

    def __init__(self, message: str, everywhere: bool = False):
        super().__init__(message)
        self.everywhere = everywhere


class JobFailed(Exception):
    """A job or a check did not succeed (or did not end in the time given)."""

    exit_status = 1


class EnvironmentProblem(Exception):
    """This machine cannot do it now: a missing tool, Slurm unreachable, the sandbox not up, or
    an answer from the cluster that is not what its command prints (``CPUTot=abc``, binary
    garbage, truncated XML: not the person's input). The message says what to do, or names the
    command, node and field."""

    exit_status = 3


EXIT_STATUSES = {0: "success", JobFailed.exit_status: "the job or a check failed",
                 UserError.exit_status: "bad input (a site profile, an argument, a request)",
                 EnvironmentProblem.exit_status: "the environment is not ready (a missing "
                                                 "tool, Slurm unreachable or its answer "
                                                 "damaged, the sandbox down)"}


def message_value(text: str, limit: int = 80, quote: bool = False) -> str:
    """``text`` from outside (Slurm, a node, a file) fit for a one-line message: as it is when
    printable, short and not empty (and not ``quote``), else its ``repr`` (control characters
    escaped), cut to ``limit``.

    >>> message_value("pmix"), message_value("a\\nb"), message_value("9" * 100, 8)
    ('pmix', "'a\\\\nb'", "'99999999'...")
    """
    if text and text.isprintable() and len(text) <= limit and not quote:
        return text
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def one_line(text: str) -> str:
    """``text`` with its control characters escaped, so that a value from outside (a path
    holding a newline) cannot break a message in two.

    >>> one_line("--site: /tmp/a\\nb.toml: no such file")
    '--site: /tmp/a\\\\nb.toml: no such file'
    """
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def print_line(line: str) -> None:
    """``line`` (:func:`one_line`) and its newline to stderr in one write. Under
    ``PYTHONUNBUFFERED=1`` ``print()`` writes them apart, and a launcher that forwards many
    processes' output (mpirun, srun) may put another's text, such as its own MPI_Abort notice,
    between the two."""
    sys.stderr.flush()
    sys.stderr.write(one_line(line) + "\n")
    sys.stderr.flush()
