"""chainermn-rt's ReFrame checks: ``reframe -C CONFIG -c THIS_FILE -r`` (docs/reframe.md).

ReFrame's Python loads this file (it imports ``reframe``, which chainermn-rt itself never
does). Each check plans its job like any chainermn-rt job (the profile named in the
partition's ``extras``, the same launcher options, container, rank step and environment) and
runs it under ReFrame's ``srun`` launcher; none is ever requeued; nothing is downloaded.

- ``ChainermnRtDoctor``: the doctor's probe on every rank, then the doctor's checks over
  their reports; it passes when none fails.
- ``ChainermnRtAllreduce``: ``bench allreduce`` at ``size`` (64 MiB), every communicator the
  ranks have;
  ``busbw`` is pure_nccl's where they ran it, else MPI's (what the doctor measures), against
  the profile's ``allreduce_busbw_gbps``: at least half of it (the doctor's rule).
- ``ChainermnRtTrain``: ``bench train --model MODEL --insize 32 --iterations 5`` (``model``:
  resnet50); images/s.
"""

from __future__ import annotations

import os
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import (
    performance_function,
    run_after,
    run_before,
    sanity_function,
    variable,
)

from chainermn_rt.doctor import node_check
from chainermn_rt.doctor.check import FAIL
from chainermn_rt.doctor.cluster import BANDWIDTH_FACTOR
from chainermn_rt.doctor.job import collect, doctor_plan, expected
from chainermn_rt.job_request import Request
from chainermn_rt.plan import Plan, make_plan
from chainermn_rt.reframe.jobs import job_fields
from chainermn_rt.site import Site, load_site


class _ChainermnRtCheck(rfm.RunOnlyRegressionTest):
    """The common part: the Plan, then ReFrame's job fields from it."""

    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    num_nodes = variable(int, value=2)
    # GPUs (= ranks) per node on GPU partitions, ranks on CPU ones; None: every slot
    ranks_per_node = variable(int, type(None), value=None)
    maintainers = ["chainermn-rt"]
    tags = {"chainermn-rt"}

    def request(self, site: Site) -> Request:
        part = site.partition(self.current_partition.name)
        per_node = {"gpus_per_node": self.ranks_per_node} if part.topology.gpus else \
            {"ranks_per_node": self.ranks_per_node}
        return Request(nodes=self.num_nodes, partition=part.name,
                       python=self.current_partition.extras.get("chainermn_rt_python"),
                       **per_node)

    def plan(self, site: Site) -> Plan:
        raise NotImplementedError

    @run_after("setup")
    def from_plan(self):
        extras = self.current_partition.extras
        self.site = load_site(extras["chainermn_rt_site"])
        self.job_plan = self.plan(self.site)
        fields = job_fields(self.job_plan)
        self.num_tasks = fields.num_tasks
        self.num_tasks_per_node = fields.num_tasks_per_node
        self.num_cpus_per_task = fields.num_cpus_per_task
        self.time_limit = fields.time_limit
        self.executable = fields.executable
        if fields.gpus_per_node:
            self.extra_resources = {"gpus": {"num_gpus_per_node": fields.gpus_per_node}}
        self.launcher_options = fields.launcher_options
        self.plan_options = fields.options
        self.prerun_cmds = list(fields.prerun_cmds)

    @run_before("run")
    def launcher_and_no_requeue(self):
        self.job.launcher.options = list(self.launcher_options)
        self.job.options += [*self.plan_options, "--no-requeue"]


@rfm.simple_test
class ChainermnRtDoctor(_ChainermnRtCheck):
    descr = "chainermn-rt doctor: the probe on every rank, then the doctor's checks"

    def plan(self, site: Site) -> Plan:
        self.reports = Path(self.stagedir) / "reports"
        os.makedirs(self.reports, exist_ok=True)
        return doctor_plan(site, self.request(site), self.reports)

    @sanity_function
    def no_check_fails(self):
        broken = node_check.broken(self.reports)  # a node whose enroot cannot run (pyxis)
        if broken:
            return sn.assert_false(broken, msg="doctor: " + "; ".join(broken.values()))
        checks = collect(self.reports, expected(self.site, self.job_plan))
        failed = [f"{c.name}: {c.reason}" for c in checks if c.status == FAIL]
        return sn.assert_false(failed, msg="doctor: " + "; ".join(failed))


@rfm.simple_test
class ChainermnRtAllreduce(_ChainermnRtCheck):
    descr = "bench allreduce at one size: busbw against the profile's expectation"
    size = variable(str, value="64M")  # bench allreduce's --min-bytes and --max-bytes

    def plan(self, site: Site) -> Plan:
        # every communicator the ranks have (pure_nccl only where each has a GPU with NCCL)
        return make_plan(site, Request(**{**self.request(site).__dict__,
                                          "module": "chainermn_rt", "command": (
            "bench", "allreduce", "--min-bytes", self.size, "--max-bytes", self.size)}))

    @run_before("performance")
    def reference_from_the_profile(self):
        want = self.current_partition.extras.get("allreduce_busbw_gbps")
        if want is not None:
            self.reference = {"*": {"busbw": (want, BANDWIDTH_FACTOR - 1, None, "GB/s")}}

    @sanity_function
    def right_results(self):
        return sn.assert_found(r"^# wrong elements: 0 OK$", self.stdout)

    @performance_function("GB/s")
    def busbw(self):
        """pure_nccl's where the ranks ran it, else MPI's: what the doctor measures."""
        line = sn.evaluate(sn.extractsingle(r"^# average busbw \(GB/s\): (.*)$",
                                            self.stdout, 1))
        found = dict(pair.rsplit(" ", 1) for pair in line.split(", "))
        return float(found.get("pure_nccl", found["mpi"]))


@rfm.simple_test
class ChainermnRtTrain(_ChainermnRtCheck):
    descr = "bench train: a model (ResNet-50) at 32 px on synthetic data, images/s"
    model = variable(str, value="resnet50")  # bench train's --model: resnet50 or mlp

    def plan(self, site: Site) -> Plan:
        return make_plan(site, Request(**{**self.request(site).__dict__,
                                          "module": "chainermn_rt", "command": (
            "bench", "train", "--model", self.model, "--insize", "32", "--iterations", "5",
            "--warmup", "1")}))

    @sanity_function
    def trained(self):
        return sn.assert_found(r'"images_per_s"', self.stdout)

    @performance_function("images/s")
    def images_per_s(self):
        return sn.extractsingle(r'"images_per_s": ([0-9.e+-]+)', self.stdout, 1, float)
