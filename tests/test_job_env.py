"""JobEnvironment from each launcher's real variables, and the cross-check with MPI."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.job_env import JobEnvironment, LauncherMismatch, check_against_mpi

from conftest import PYTHON, REPO, run_mpi

# What `srun -N2 -n4` sets for its task 3 (second task on the second node).
SLURM_STEP = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0",
              "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
              "SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_NNODES": "2",
              "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NUM_NODES": "2",
              "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
              "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_TOPOLOGY_ADDR": "node2",
              "PMIX_RANK": "3", "PMIX_NAMESPACE": "slurm.pmix.7.0"}
# What Open MPI 4.1's mpirun -np 2 sets for rank 1 (copied from this machine).
OPENMPI = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
           "OMPI_COMM_WORLD_NODE_RANK": "1", "OMPI_MCA_orte_num_nodes": "1",
           "OMPI_MCA_orte_ess_num_procs": "2", "PMIX_RANK": "1", "PMIX_NAMESPACE": "1231749121"}
# MPICH's Hydra, 3 nodes x 2 ranks, rank 5.
HYDRA = {"PMI_RANK": "5", "PMI_SIZE": "6", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
         "PMI_FD": "6", "PMI_PORT": "node1:4242"}


def fields(env: JobEnvironment) -> tuple:
    return (env.launcher, env.global_rank, env.world_size, env.local_rank, env.local_size,
            env.node_index, env.num_nodes)


@pytest.mark.parametrize("environ, expected", [
    ({}, ("none", 0, 1, 0, 1, 0, 1)),
    (SLURM_STEP, ("slurm", 3, 4, 1, 2, 1, 2)),
    # heterogeneous step: 3 tasks on node 0, 1 on node 1; this is node 1's task
    ({**SLURM_STEP, "SLURM_STEP_TASKS_PER_NODE": "3,1", "SLURM_NODEID": "1",
      "SLURM_LOCALID": "0"}, ("slurm", 3, 4, 0, 1, 1, 2)),
    # older Slurm without SLURM_STEP_* counts: the job-wide ones
    ({k: v for k, v in SLURM_STEP.items() if not k.startswith("SLURM_STEP_")},
     ("slurm", 3, 4, 1, 2, 1, 2)),
    # mpirun inside a batch script: the batch step's SLURM_PROCID=0 must not win
    ({**{k: v for k, v in SLURM_STEP.items() if "STEP" not in k}, "SLURM_PROCID": "0",
      **OPENMPI}, ("openmpi", 1, 2, 1, 2, 0, 1)),
    (OPENMPI, ("openmpi", 1, 2, 1, 2, 0, 1)),
    ({**OPENMPI, "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
      "OMPI_MCA_orte_num_nodes": "4"}, ("openmpi", 5, 8, 1, 2, 2, 4)),
    (HYDRA, ("hydra", 5, 6, 1, 2, 2, 3)),
    # srun --mpi=pmi2 sets PMI_* too (copied from the sandbox), naming its step in PMI_JOBID
    ({**{k: v for k, v in SLURM_STEP.items() if not k.startswith("PMIX")}, "PMI_RANK": "3",
      "PMI_SIZE": "4", "PMI_FD": "13", "PMI_JOBID": "7.0"}, ("slurm", 3, 4, 1, 2, 1, 2)),
    # Hydra's mpiexec in a batch script: the batch step is no PMI server
    ({**{k: v for k, v in SLURM_STEP.items() if "STEP" not in k}, "SLURM_PROCID": "0",
      **HYDRA, "PMI_JOBID": "kvs_123_0"}, ("hydra", 5, 6, 1, 2, 2, 3)),
    ({**HYDRA, "I_MPI_ROOT": "/opt/intel/mpi"}, ("intelmpi", 5, 6, 1, 2, 2, 3)),
    # a bare PMIx server names the rank only; MPI completes the rest
    ({"PMIX_RANK": "2", "PMIX_NAMESPACE": "prterun-x-1"},
     ("pmix", 2, None, None, None, None, None)),
    # Hydra without the local rank: unknown, not rank 0 of the node
    ({k: v for k, v in HYDRA.items() if k != "MPI_LOCALRANKID"},
     ("hydra", 5, 6, None, 2, None, 3)),
    # the batch script itself (no step): one process
    ({"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "4"},
     ("none", 0, 1, 0, 1, 0, 1)),
])
def test_detect(environ, expected):
    env = JobEnvironment.detect(environ)
    assert fields(env) == expected
    assert env.hostname and env.launcher in env.describe()


@pytest.mark.parametrize("environ, field", [
    ({**SLURM_STEP, "SLURM_PROCID": "three"}, "SLURM_PROCID"),
    ({**SLURM_STEP, "SLURM_STEP_TASKS_PER_NODE": "2(x"}, "SLURM_STEP_TASKS_PER_NODE"),
    ({**SLURM_STEP, "SLURM_NODEID": "5"}, "SLURM_STEP_TASKS_PER_NODE"),
    ({**OPENMPI, "OMPI_COMM_WORLD_SIZE": "-2"}, "OMPI_COMM_WORLD_SIZE"),
])
def test_bad_values_name_the_variable(environ, field):
    with pytest.raises(UserError, match=field):
        JobEnvironment.detect(environ)


def test_detect_is_light():
    """The per-rank step runs it before MPI: no chainer, numpy or mpi4py import."""
    code = ("import sys; from chainermn_rt.job_env import JobEnvironment; "
            "from chainermn_rt.devices import choose_device; import chainermn_rt; "
            "JobEnvironment.detect(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('chainer', 'chainermn', 'numpy', 'mpi4py', 'cupy')))")
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=REPO,
                         check=True).stdout
    assert out.strip() == "[]"


class FakeComm:
    """Stands in for an mpi4py communicator where a wrong MPI would report rank 0 of 1."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size


def test_mismatch_every_rank_zero_of_one():
    env = JobEnvironment.detect(SLURM_STEP)
    with pytest.raises(LauncherMismatch, match=r"rank 3 of 4 but MPI says rank 0 of 1.*srun"):
        check_against_mpi(env, FakeComm(0, 1))


def test_mismatch_no_launcher_but_many_ranks():
    with pytest.raises(LauncherMismatch, match="no launcher variables"):
        check_against_mpi(JobEnvironment.detect({}), FakeComm(1, 2))


def test_an_unreported_rank_is_unknown_never_zero():
    env = JobEnvironment.detect({"PMIX_RANK": "2"})
    assert not env.complete
    assert env.describe().startswith("pmix: rank 2/?, local ?/?, node ?/? on ")
    with pytest.raises(LauncherMismatch, match=r"says rank 2 of \? but MPI says rank 0 of 1"):
        check_against_mpi(env, FakeComm(0, 1))


def test_agreement_returns_env_unchanged():
    env = JobEnvironment.detect(SLURM_STEP)
    assert check_against_mpi(env, FakeComm(3, 4)) is env


CHECK = """
import json
from mpi4py import MPI
from chainermn_rt.job_env import JobEnvironment, check_against_mpi
raw = JobEnvironment.detect()
env = check_against_mpi(raw, MPI.COMM_WORLD)
rows = MPI.COMM_WORLD.gather([raw.launcher, env.global_rank, env.world_size, env.local_rank,
                             env.local_size, env.node_index, env.num_nodes])
if rows:
    print(json.dumps(rows), flush=True)
"""


@pytest.mark.mpi
def test_real_mpirun_agrees_with_mpi(tmp_path):
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    rows = json.loads(run_mpi(2, [str(script)]).stdout)
    assert rows == [["openmpi", 0, 2, 0, 2, 0, 1], ["openmpi", 1, 2, 1, 2, 0, 1]]


@pytest.mark.mpi
def test_pmix_only_is_completed_by_mpi(tmp_path):
    """Drop Open MPI's variables: only PMIX_RANK is left; MPI's processor names fill in."""
    script = tmp_path / "check.py"
    script.write_text("import os\nfor k in [k for k in os.environ if k.startswith("
                      "'OMPI_COMM_WORLD')]: del os.environ[k]\n" + CHECK)
    rows = json.loads(run_mpi(2, [str(script)]).stdout)
    assert rows == [["pmix", 0, 2, 0, 2, 0, 1], ["pmix", 1, 2, 1, 2, 0, 1]]


def test_mpi_singleton_under_srun_variables_is_a_mismatch():
    """A real singleton MPI process given a Slurm step's variables: the classic mismatch."""
    code = ("from mpi4py import MPI; from chainermn_rt.job_env import *; "
            "check_against_mpi(JobEnvironment.detect(), MPI.COMM_WORLD)")
    slurm = {k: v for k, v in SLURM_STEP.items() if k.startswith("SLURM")}
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=REPO,
                          check=False, env={**_clean_env(), **slurm}, timeout=120)
    assert proc.returncode != 0
    assert "LauncherMismatch" in proc.stderr and "rank 0 of 1" in proc.stderr


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_"))}
