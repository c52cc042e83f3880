"""The ``#SBATCH`` options the Plan sets, and where a person sets each instead.

One table for both sides: the Plan writes only options named here (:func:`owned`), and a site
profile's ``[sbatch]`` tables may not name one of them, nor an abbreviation of one: sbatch
takes any unambiguous prefix of a long option (``--partitio``), which would override the Plan.

>>> claimed_by("partitio"), claimed_by("constraint")
('partition', None)
>>> owned("nodes")
'nodes'
"""

from __future__ import annotations

_RANKS = "--gpus-per-node or --ranks-per-node"
_GPUS = "--gpus-per-node (GPUs come from the topology's slots)"
_CPUS = "the partition's cpus_per_node"
# option -> where to set it instead. The Plan writes the first group; the rest are aliases
# and neighbours of those that would change what it decided.
PLAN_OPTIONS = {
    "job-name": "--job-name", "partition": "--partition", "nodes": "--nodes",
    "ntasks-per-node": _RANKS, "cpus-per-task": _CPUS, "gpus-per-node": _GPUS, "time": "--time",
    "mem": "--mem", "account": "account or --account", "qos": "qos or --qos", "output": "--log",
    "signal": "signal", "requeue": "requeue", "open-mode": "requeue (a requeued job appends "
                                                        "to its log)",
    "ntasks": _RANKS, "tasks-per-node": _RANKS, "ntasks-per-gpu": _RANKS,
    "cpus-per-gpu": _CPUS, "gpus": _GPUS, "gpus-per-task": _GPUS, "gpus-per-socket": _GPUS,
    "gpu-bind": "leaving it out (every rank sees its node's GPUs; `chainermn-rt rank` picks one)",
    "mem-per-cpu": "--mem", "mem-per-gpu": "--mem",
    "error": "--log (the job's output and errors share it)", "no-requeue": "requeue = false",
}


# The Plan's options that give the job's shape (what a front end that writes its own job
# script, such as ReFrame, writes from the job's fields instead) and its stop (signal, requeue).
SHAPE_OPTIONS = ("job-name", "partition", "nodes", "ntasks-per-node", "cpus-per-task",
                 "gpus-per-node", "time", "output")
STOP_OPTIONS = ("signal", "requeue", "open-mode")


def owned(option: str) -> str:
    """``option``, which the Plan may write; a programming error if the table lacks it."""
    if option not in PLAN_OPTIONS:
        raise KeyError(f"#SBATCH --{option} is not in PLAN_OPTIONS")
    return option


def claimed_by(key: str) -> str | None:
    """The Plan's option that ``key`` names or abbreviates (sbatch's prefix matching), if any."""
    if key in PLAN_OPTIONS:
        return key
    return next((option for option in PLAN_OPTIONS if option.startswith(key)), None)
