"""The one error type for user mistakes: the CLI prints it as one line and exits 2."""


class UserError(Exception):
    """Bad input from a person: a site profile, a CLI argument or a job request.

    The message names the field and what is allowed, e.g.
    ``UserError("partition 'gpu': gpus_per_node is 9; allowed: 1-8")``.
    """

    exit_status = 2
