"""A ReFrame configuration for a site profile (``chainermn-rt site reframe``).

One system named after the site; one ReFrame partition per profile partition: scheduler
``squeue`` where Slurm keeps no accounting (ReFrame's ``slurm`` backend asks sacct; a sandbox
with ``accounting = false``) else ``slurm``, launcher ``srun``, access ``--partition=P`` (every
other option, the account and qos among them, comes from each check's Plan:
:mod:`chainermn_rt.reframe.jobs`),
a ``gpus`` resource for ``--gpus-per-node``, the node's GPUs and CPUs, and in ``extras`` what
the checks need: the profile's path, the Python of the ranks, and ``allreduce_busbw_gbps``.

>>> from chainermn_rt.site import load_site
>>> conf = configuration(load_site("slurm/sites/sandbox.toml"), "squeue", "/usr/bin/python3")
>>> part = conf["systems"][0]["partitions"][0]
>>> part["name"], part["scheduler"], part["access"], part["devices"]
('gpu', 'squeue', ['--partition=gpu'], [{'type': 'gpu', 'num_devices': 4}])
"""

from __future__ import annotations

import re

from chainermn_rt.errors import EnvironmentProblem, UserError, message_value
from chainermn_rt.quoting import comment, python
from chainermn_rt.site import Partition, Site

SCHEDULERS = ("slurm", "squeue")
ENVIRON = "chainermn-rt"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")  # ReFrame's system and partition names
_STORAGE = re.compile(r"accounting_storage/[a-z0-9_]+\Z")  # Slurm's AccountingStorageType


def _name(text: str, what: str) -> str:
    if not _NAME.match(text):
        raise UserError(f"{what}: {text!r} is not a ReFrame name; allowed: a letter or _, then "
                        "letters, digits, _ and -")
    return text


def _partition(site: Site, p: Partition, scheduler: str, python: str | None) -> dict:
    access = [f"--partition={p.name}"]
    extras = {"chainermn_rt_site": str(site.path.absolute()), "chainermn_rt_python": python,
              "nodes": p.nodes, "gpus_per_node": p.topology.gpus}
    if site.allreduce_busbw_gbps is not None:
        extras["allreduce_busbw_gbps"] = site.allreduce_busbw_gbps
    part = {"name": _name(p.name, f"partition {p.name!r}"),
            "descr": f"{p.nodes} nodes x {len(p.topology.slots)} ranks, {p.topology.gpus} GPUs",
            "scheduler": scheduler, "launcher": "srun", "access": access,
            "environs": [ENVIRON], "max_jobs": 4,
            "resources": [{"name": "gpus", "options": ["--gpus-per-node={num_gpus_per_node}"]}],
            "processor": {"num_cpus": p.cpus_per_node}, "extras": extras}
    if p.topology.gpus:
        part["devices"] = [{"type": "gpu", "num_devices": p.topology.gpus}]
    return part


def scheduler_for(slurm_config: dict[str, str]) -> str:
    """ReFrame's backend for a Slurm (``scontrol show config``): squeue without accounting.
    EnvironmentProblem (exit 3) for an answer without Slurm's ``AccountingStorageType``, which
    every Slurm prints: it is not Slurm's configuration.

    >>> scheduler_for({"AccountingStorageType": "accounting_storage/none"})
    'squeue'
    """
    kind = slurm_config.get("AccountingStorageType")
    if kind is None or not _STORAGE.match(kind):
        said = "no AccountingStorageType" if kind is None else \
            f"AccountingStorageType={message_value(kind, 40)}"
        raise EnvironmentProblem(f"scontrol show config: {said}, which Slurm always prints as "
                                 "accounting_storage/NAME; run it where Slurm's scontrol reaches "
                                 "the cluster, or give --scheduler slurm|squeue")
    return "squeue" if kind == "accounting_storage/none" else "slurm"


def ranks_python(site: Site, given: str | None, here: str) -> str | None:
    """The ranks' Python: as given, else the Plan's choice (the profile's, the container's:
    None), else on bare metal ``here`` (ReFrame's own Python would lack the stack)."""
    return given or site.python or (here if site.container.runtime == "none" else None)


def configuration(site: Site, scheduler: str, python: str | None) -> dict:
    """``python``: the ranks' interpreter; None lets each check's Plan choose."""
    if scheduler not in SCHEDULERS:
        raise UserError(f"--scheduler: {scheduler!r}; allowed: {' | '.join(SCHEDULERS)}")
    if site.launcher != "srun":
        raise UserError(f"{site.path}: launcher {site.launcher}; allowed: srun (ReFrame's srun "
                        "launcher runs the checks)")
    name = _name(site.name, f"{site.path}: name")
    return {
        "systems": [{"name": name, "descr": site.description or f"site {name}",
                     "hostnames": [".*"], "modules_system": "nomod",
                     "partitions": [_partition(site, p, scheduler, python)
                                    for p in site.partitions]}],
        "environments": [{"name": ENVIRON, "target_systems": [name]}],
    }


def config_text(conf: dict, source: str) -> str:
    """The configuration as the Python file ReFrame's ``-C`` reads: one assignment, every value
    a Python literal (:func:`chainermn_rt.quoting.python`), ``source`` only in a comment."""
    return (f"# ReFrame configuration written by `chainermn-rt site reframe` from "
            f"{comment(source)}.\n"
            "# Run the checks: reframe -C THIS_FILE -c \"$(python3 -m chainermn_rt.reframe."
            "checks_path)\" -r\n"
            f"site_configuration = {python(conf, 'the ReFrame configuration')}\n")
