"""``chainermn-rt doctor --site`` without Slurm: each cross-rank check passes on a healthy
report set and fails, with its message, on a provoked one; the exclude list; the job's plan;
the per-rank facts and the probe under real MPI ranks."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from chainermn_rt.doctor import cluster, facts, job, probe, reports
from chainermn_rt.doctor.check import FAIL, NA, PASS
from chainermn_rt.doctor.cluster import Expected
from chainermn_rt.doctor.table import exclude_text, format_table
from chainermn_rt.errors import UserError
from chainermn_rt.job_request import Request
from chainermn_rt.rank_contract import SLOTS_VAR, Slot, dump_slots
from chainermn_rt.site import load_site, parse_site
from chainermn_rt.slurm_client import FinalState

from conftest import PYTHON, REPO, clean_launcher_env, run_mpi

SANDBOX = REPO / "slurm" / "sites" / "sandbox.toml"
VERSIONS = {"python": "3.11.7", "chainer": "7.8.1", "chainermn": "7.8.1", "cupy": "13.6.0",
            "numpy": "2.4.6", "mpi4py": "4.1.2", "nccl": "23203"}
HCAS = "=mlx5_0:1,mlx5_1:1"
OK = {"ok": True, "wrong": 0, "elements": 262144, "first_wrong": None}


def _rank(node: int, local: int, per_node: int = 4, nodes: int = 2) -> dict:
    """A healthy rank: node ``node`` has CPUs 0-3 (NUMA 0: 0-1, NUMA 1: 2-3) and 4 GPUs (0-1 on
    NUMA 0, 2-3 on NUMA 1); local rank i on GPU i and CPU i, memory on GPU i's NUMA node."""
    rank, numa = node * per_node + local, local // 2
    name = f"node{node + 1}"
    return {
        "host": name, "node": name,
        "launcher": {"name": "slurm", "rank": rank, "size": nodes * per_node,
                     "local_rank": local, "local_size": per_node},
        "mpi": {"rank": rank, "size": nodes * per_node, "local_rank": local,
                "local_size": per_node, "processor_name": name,
                "library": "Open MPI v4.1.4, package: Debian OpenMPI",
                "cuda_aware": {"value": True, "source": "MPIX_Query_cuda_support"},
                "libmpi": "/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4"},
        "env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "UCX_NET_DEVICES": f"mlx5_{numa}:1",
                "NCCL_IB_HCA": HCAS},
        "visible_gpus": 4,
        "slot": {"gpu": local, "numa": numa, "cpus": str(local), "hcas": [f"mlx5_{numa}:1"]},
        "gpu": {"device": local, "physical": str(local), "cuda": True,
                "uuid": f"GPU-{node}{local}", "numa": numa},
        "cpus": [local], "allowed_cpus": [0, 1, 2, 3], "cpu_numa": [numa], "numa_nodes": [0, 1],
        "memory_policy": f"bind:{numa}", "memory_numa": [numa],
        "versions": dict(VERSIONS), "errors": [],
        "allreduce_cpu": dict(OK), "allreduce_gpu": dict(OK),
        "bandwidth": {"communicator": "pure_nccl", "nbytes": 1 << 26, "seconds": 0.001,
                      "algbw_gbps": 100.0, "busbw_gbps": 175.0, "wrong": 0},
    }


def _healthy(nodes: int = 2, per_node: int = 4) -> list[dict]:
    return [_rank(n, i, per_node, nodes) for n in range(nodes) for i in range(per_node)]


def _by_name(found):
    return {c.name: c for c in found}


EXPECTED = Expected(ranks=8, busbw_gbps=200.0)


def _run(reps, gathered=True, expected=EXPECTED):
    return _by_name(cluster.run_checks(reps, gathered, expected))


def test_a_healthy_cluster_passes_every_check():
    found = _run(_healthy())
    stated = ("fabric", "nccl-plugin")  # what the profile of EXPECTED does not state
    assert {n: c.status for n, c in found.items()} == {n: NA if n in stated else PASS
                                                       for n in found}, found
    assert len(found) == 16
    assert cluster.failed_nodes(list(found.values())) == []


def _fails(reps, name, message, nodes=None, **kw):
    c = _run(reps, **kw)[name]
    assert c.status == FAIL, c
    assert message in c.reason, c.reason
    assert c.hint
    if nodes is not None:
        assert c.nodes == nodes
    return c


def test_ranks_sharing_cpus_while_others_idle_fail():
    reps = _healthy()
    reps[1]["cpus"] = [0]  # node1's GPUs 0 and 1 both on CPU 0, as the sandbox's old profile
    c = _fails(reps, "cpu-sharing", "node1: ranks 0 and 1 share CPU(s) 0 while CPU(s) 1 stay "
                                    "idle", ("node1",))
    assert "topology" in c.hint


def test_sharing_cpus_with_none_idle_passes():
    reps = _healthy()
    for r in reps:  # 4 ranks over 2 allowed CPUs: sharing is unavoidable, nothing idles
        r["allowed_cpus"], r["cpus"] = [0, 1], [r["launcher"]["local_rank"] % 2]
        r["cpu_numa"] = [0]
        r["slot"]["numa"] = r["gpu"]["numa"] = 0
        r["memory_numa"] = [0]
    assert _run(reps)["cpu-sharing"].status == PASS


def test_cpus_on_another_numa_node_than_the_gpu_fail():
    reps = _healthy()
    reps[2]["cpus"], reps[2]["cpu_numa"] = [0], [0]  # GPU 2 is on NUMA node 1
    _fails(reps, "numa", "rank 2 on node1: GPU 2 on NUMA node 1, its CPUs on 0", ("node1",))


def test_memory_on_another_numa_node_than_the_gpu_fails():
    reps = _healthy()
    reps[5]["memory_policy"], reps[5]["memory_numa"] = "bind:1", [1]  # GPU 1 is on NUMA 0
    _fails(reps, "numa", "rank 5 on node2: GPU 1 on NUMA node 0, its memory on 1 (bind:1)",
           ("node2",))


def test_numa_of_a_fake_gpu_comes_from_the_slot_table():
    reps = _healthy()
    for r in reps:
        r["gpu"].update(cuda=False, uuid=None, numa=None)  # no CuPy: the profile's slot says
    reps[0]["slot"]["numa"] = 1
    _fails(reps, "numa", "rank 0 on node1: GPU 0 on NUMA node 1, its CPUs on 0")


def test_per_task_gpu_isolation_fails():
    reps = _healthy()
    for r in reps:
        r["env"]["CUDA_VISIBLE_DEVICES"], r["visible_gpus"] = str(r["gpu"]["physical"]), 1
    _fails(reps, "gpu-visibility", "node1: ranks 0, 1, 2, 3 see 1 GPU(s) "
                                   "(CUDA_VISIBLE_DEVICES=0) of the 4 its ranks use",
           ("node1", "node2"))


def test_differing_nccl_ib_hca_within_a_node_fails():
    reps = _healthy()
    for r in reps[4:]:
        r["env"]["NCCL_IB_HCA"] = "=" + r["env"]["UCX_NET_DEVICES"]  # per rank: the mistake
    c = _fails(reps, "nccl-ib-hca", "node2: NCCL_IB_HCA is =mlx5_0:1 on ranks 4, 5, "
                                    "=mlx5_1:1 on ranks 6, 7", ("node2",))
    assert "UCX_NET_DEVICES" in c.hint


def test_consecutive_ranks_on_alternating_sockets_fail():
    reps = _healthy()
    for r in reps[:4]:  # cyclic: local ranks 0, 1, 2, 3 on NUMA nodes 0, 1, 0, 1
        local = r["launcher"]["local_rank"]
        numa = local % 2
        r["cpus"], r["cpu_numa"], r["memory_numa"] = [2 * numa + local // 2], [numa], [numa]
        r["gpu"]["numa"] = r["slot"]["numa"] = numa
    c = _fails(reps, "rank-order", "node1: consecutive ranks 0-3 sit on NUMA nodes 0, 1, 0, 1",
               ("node1",))
    assert _run(reps)["numa"].status == PASS  # each rank is still near its own GPU
    assert "block" in c.hint


def test_two_ranks_on_one_gpu_fail():
    reps = _healthy()
    reps[1]["gpu"] = dict(reps[0]["gpu"])
    _fails(reps, "gpu-per-rank", "node1: ranks 0, 1 all use GPU GPU-00", ("node1",))


def test_equal_processor_names_across_nodes_fail():
    reps = _healthy()
    for r in reps:
        r["mpi"]["processor_name"] = "localhost"  # e.g. containers with one fixed hostname
    c = _fails(reps, "processor-names", "nodes node1, node2 all report processor name "
                                        "'localhost'", ("node1", "node2"))
    assert "intra_rank" in c.reason


def test_differing_processor_names_within_a_node_fail():
    reps = _healthy()
    reps[3]["mpi"]["processor_name"] = "node1-container"
    _fails(reps, "processor-names", "node1's ranks report processor names node1, "
                                    "node1-container", ("node1",))


def test_a_version_mismatch_fails_and_blames_the_odd_node():
    reps = _healthy()
    for r in reps[4:]:
        r["versions"]["chainer"] = r["versions"]["chainermn"] = "7.8.0"
    c = _fails(reps, "versions", "chainer 7.8.1 on node1 (ranks 0, 1, 2, 3), 7.8.0 on node2 "
                                 "(ranks 4, 5, 6, 7)", ("node2",))
    assert "chainermn 7.8.1" in c.reason and "numpy" not in c.reason


def test_a_different_mpi_on_one_rank_fails():
    reps = _healthy()
    reps[6]["mpi"]["library"] = "MPICH Version: 4.1"
    reps[6]["mpi"]["cuda_aware"]["value"] = False
    c = _fails(reps, "versions", "MPI Open MPI v4.1.4, package: Debian OpenMPI on node1, node2 "
                                 "(ranks 0, 1, 2, 3, 4, 5, 7), MPICH Version: 4.1 on node2 "
                                 "(rank 6)", ("node2",))
    assert "CUDA-aware MPI True" in c.reason


def _in_worlds(reps, roots):
    """What the probe leaves when MPI started the ranks in several worlds: ``roots[i]`` is
    the launcher rank of rank i's world's MPI rank 0 (its pid here: the world's identity)."""
    for r, root in zip(reps, roots, strict=True):
        members = [i for i, x in enumerate(roots) if x == root]
        r["mpi"].update(rank=members.index(_rank_of(r)), size=len(members),
                        local_rank=0, local_size=1,
                        world={"host": reps[root]["host"], "pid": 1000 + root, "rank": root})
        for key in ("allreduce_cpu", "allreduce_gpu", "bandwidth"):
            del r[key]
    return reps


def _rank_of(r):
    return r["launcher"]["rank"]


def test_every_rank_alone_in_its_world_fails_with_the_pmi_hint():
    """Open MPI 5 under srun without a PMIx server it can reach starts singletons
    (open-mpi/ompi#13523)."""
    found = _run(_in_worlds(_healthy(), range(8)), gathered=False)
    c = found["launcher-mpi"]
    assert c.status == FAIL and c.nodes == ()
    assert c.reason == ("8 ranks started as 8 one-rank worlds (MPI_COMM_WORLD size 1 each; "
                        "expected one world of 8): the launcher's PMI did not reach the MPI "
                        "library")
    assert "srun --mpi=pmix" in c.hint
    for name in ("allreduce-cpu", "allreduce-gpu", "bandwidth"):
        assert found[name].status == FAIL and found[name].reason.startswith("not run"), name


def test_ranks_in_worlds_of_mixed_sizes_fail_naming_each_world():
    c = _run(_in_worlds(_healthy(), [0, 0, 0, 0, 0, 5, 6, 7]), gathered=False)["launcher-mpi"]
    assert c.status == FAIL and c.nodes == ()
    assert c.reason == ("8 ranks started as 4 MPI worlds (1 world of 5: ranks 0-4; 3 one-rank "
                        "worlds: ranks 5-7; expected one world of 8): the launcher's PMI did "
                        "not reach the MPI library")
    c = _run(_in_worlds(_healthy(), [0, 0, 0, 0, 4, 4, 4, 4]), gathered=False)["launcher-mpi"]
    assert c.reason == ("8 ranks started as 2 MPI worlds (2 worlds of 4: ranks 0-3, ranks 4-7; "
                        "expected one world of 8): MPI did not join them into one world")
    assert "srun --mpi=pmix" in c.hint


def test_one_rank_worlds_are_found_where_the_launcher_does_not_say_its_size():
    reps = _in_worlds(_healthy(1, 2), [0, 1])
    for r in reps:
        r["launcher"].update(name="pmix", size=None, local_rank=None, local_size=None)
    c = _run(reps, gathered=False, expected=Expected(ranks=2))["launcher-mpi"]
    assert c.reason.startswith("2 ranks started as 2 one-rank worlds (MPI_COMM_WORLD size 1 "
                               "each; expected one world of 2)"), c.reason


def test_ranks_stuck_beside_their_own_world_name_no_other_world():
    reps = _healthy()
    for r in reps:
        r["mpi"]["world"] = {"host": "node1", "pid": 1000, "rank": 0}
    for r in reps[1:]:
        r["mpi"] = None  # rank 0 through MPI_Init, the rest of its world of 8 not
    c = _run(reps, gathered=False)["launcher-mpi"]
    assert c.reason == ("MPI_Init did not return on ranks 1, 2, 3, 4, 5, 6, 7 of 8: the launcher "
                        "and MPI share no PMI, or MPI failed (the job's log says which)")


def test_reports_without_world_names_are_grouped_by_size():
    """A rank whose report names no world (an older probe on one node, or one that stopped
    before the broadcast): the worlds are told apart by size alone, no world split in two."""
    reps = _healthy()
    for r in reps:
        r["mpi"]["world"] = {"host": "node1", "pid": 1000, "rank": 0}
    del reps[5]["mpi"]["world"]
    assert _run(reps)["launcher-mpi"].status == PASS
    reps = _in_worlds(_healthy(), [0, 0, 0, 0, 0, 5, 6, 7])
    del reps[0]["mpi"]["world"]
    assert _run(reps, gathered=False)["launcher-mpi"].reason.startswith(
        "8 ranks started as 4 MPI worlds (1 world of 5: ranks 0-4; 3 one-rank worlds: ranks "
        "5-7;")


def test_ranks_stuck_in_mpi_init_beside_a_one_rank_world_are_both_named():
    """One rank that fell back to a singleton leaves the others waiting for it in MPI_Init's
    fence: the check names both."""
    reps = _in_worlds(_healthy(), range(8))
    for r in reps[:7]:
        r["mpi"] = None
    c = _run(reps, gathered=False)["launcher-mpi"]
    assert c.reason == ("MPI_Init did not return on ranks 0, 1, 2, 3, 4, 5, 6 of 8: the launcher "
                        "and MPI share no PMI, or MPI failed (the job's log says which); rank 7 "
                        "started as a one-rank world (MPI_COMM_WORLD size 1; expected one world "
                        "of 8)")


def test_ranks_whose_mpi_never_started_fail():
    reps = _healthy()
    for r in reps:
        r["mpi"] = None  # MPI_Init aborted (Open MPI under srun --mpi=none)
    c = _run(reps, gathered=False)["launcher-mpi"]
    assert c.status == FAIL
    assert c.reason.startswith("MPI_Init did not return on ranks 0, 1, 2, 3, 4, 5, 6, 7 of 8")


def test_a_launcher_mpi_rank_mismatch_fails():
    reps = _healthy()
    reps[4]["mpi"]["rank"], reps[5]["mpi"]["rank"] = 5, 4
    _fails(reps, "launcher-mpi", "rank 4 on node2: launcher 4 of 8 (local 0), MPI 5 of 8 "
                                 "(local 0)")


def test_missing_reports_fail():
    _fails(_healthy()[:6], "reports", "2 of 8 ranks wrote no report: ranks 6, 7")


def test_a_rank_that_could_not_place_itself_fails():
    reps = _healthy()
    reps[7]["errors"] = ["5 ranks on this node but only 4 GPUs visible"]
    _fails(reps, "reports", "rank 7 on node2: 5 ranks on this node but only 4 GPUs visible",
           ("node2",))


def test_a_wrong_allreduce_fails_on_the_ranks_that_saw_it():
    reps = _healthy()
    for r in reps[4:6]:
        r["allreduce_cpu"] = {"ok": False, "wrong": 3, "elements": 262144,
                              "first_wrong": {"index": 7, "got": 1.0, "want": 252.0}}
    _fails(reps, "allreduce-cpu", "ranks 4, 5 on node2: 3 of 262144 elements wrong (element "
                                  "7: 1, want 252)", ("node2",))
    reps = _healthy()
    reps[0]["allreduce_gpu"] = dict(reps[4]["allreduce_cpu"], ok=False, wrong=1,
                                    first_wrong={"index": 0, "got": 2.0, "want": 0.0})
    _fails(reps, "allreduce-gpu", "rank 0 on node1: 1 of 262144 elements wrong", ("node1",))


def test_gpu_checks_do_not_apply_without_gpus():
    reps = _healthy()
    for r in reps:
        r["gpu"] = None
        del r["allreduce_gpu"]
    found = _run(reps)
    for name in ("gpu-per-rank", "gpu-visibility", "numa", "allreduce-gpu"):
        assert found[name].status == NA, found[name]


def test_low_bandwidth_fails():
    c = _fails(_healthy(), "bandwidth", "busbw 175 GB/s (pure_nccl, 67108864 bytes) is below "
                                        "0.5 x the expected 400 GB/s",
               expected=Expected(ranks=8, busbw_gbps=400.0))
    assert c.nodes == ()
    assert _run(_healthy(), expected=Expected(ranks=8, busbw_gbps=350.0))["bandwidth"].status \
        == PASS
    assert _run(_healthy(), expected=Expected(ranks=8))["bandwidth"].status == NA


def test_the_slowest_rank_sets_the_bandwidth():
    reps = _healthy()
    reps[3]["bandwidth"] = dict(reps[3]["bandwidth"], busbw_gbps=20.0)
    _fails(reps, "bandwidth", "busbw 20 GB/s")


def test_the_exclude_list_names_each_blamed_node_once():
    reps = _healthy(nodes=11, per_node=4)
    reps[1]["cpus"] = [0]  # node1
    reps[41]["gpu"] = dict(reps[40]["gpu"])  # node11
    reps[9]["versions"]["numpy"] = "1.26.4"  # node3
    found = cluster.run_checks(reps, True, Expected(ranks=44))
    assert exclude_text(found) == "node1,node3,node11\n"
    assert exclude_text(cluster.run_checks(_healthy(), True, Expected(ranks=8))) == ""


def test_the_table_shows_hints_of_failed_checks_only():
    reps = _healthy()
    reps[1]["gpu"] = dict(reps[0]["gpu"])
    text = format_table(cluster.run_checks(reps, True, Expected(ranks=8)))
    lines = text.splitlines()
    assert lines[0].split() == ["check", "status", "reason"]
    row = next(i for i, line in enumerate(lines) if line.startswith("gpu-per-rank"))
    assert lines[row + 1].strip().startswith("hint: one rank per GPU")
    assert sum("hint:" in line for line in lines) == 1


# -- the site profile's [checks] table -------------------------------------------------------

def _profile(extra: str) -> dict:
    import tomllib

    return tomllib.loads(SANDBOX.read_text() + "\n" + extra)


def test_the_profile_gives_the_expected_bandwidth():
    site = parse_site(_profile("[checks]\nallreduce_busbw_gbps = 370\n"), SANDBOX)
    assert site.allreduce_busbw_gbps == 370.0
    assert load_site(SANDBOX).allreduce_busbw_gbps is None


@pytest.mark.parametrize("table, message", [
    ("allreduce_busbw_gbps = -1", "checks.allreduce_busbw_gbps: -1 is not allowed; allowed: a "
                                  "number > 0"),
    ("allreduce_busbw_gbps = true", "checks.allreduce_busbw_gbps: True is not allowed"),
    ('allreduce_busbw_gbps = "fast"', "checks.allreduce_busbw_gbps: 'fast' has the wrong type"),
    ("busbw = 3", "checks.busbw: unknown field; allowed: allreduce_busbw_gbps"),
])
def test_a_bad_checks_table_names_the_field(table, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_site(_profile(f"[checks]\n{table}\n"), SANDBOX)


# -- the job ---------------------------------------------------------------------------------

def test_the_doctor_job_is_a_training_job_with_the_probe_as_its_command(tmp_path):
    site = load_site(SANDBOX)
    plan = job.doctor_plan(site, Request(nodes=2, gpus_per_node=2, command=("true",)), tmp_path)
    assert plan.command == (sys.executable, "-m", "chainermn_rt.doctor.probe",
                            "--out", str(tmp_path))
    assert plan.launch[:2] == ("srun", "--mpi=pmix")
    assert plan.rank_step[-2:] == ("rank", "--")
    sbatch = dict(plan.sbatch)
    assert sbatch["time"] == "00:10:00" and sbatch["job-name"] == "chainermn-doctor"
    assert sbatch["output"] == str(tmp_path / "doctor-%j.out")
    assert job.expected(site, plan) == Expected(ranks=4, busbw_gbps=None)


def test_the_bandwidth_probe_runs_when_the_profile_expects_one(tmp_path):
    site = parse_site(_profile("[checks]\nallreduce_busbw_gbps = 1\n"), SANDBOX)
    request = Request(nodes=1, command=("true",), time="5")
    plan = job.doctor_plan(site, request, tmp_path)
    assert plan.command[-2:] == ("--bandwidth-bytes", str(64 << 20))
    assert dict(plan.sbatch)["time"] == "5"
    assert "--bandwidth-bytes" not in job.doctor_plan(site, request, tmp_path, 0).command
    with pytest.raises(UserError, match="--bandwidth-bytes: -1"):
        job.doctor_plan(site, request, tmp_path, -1)


def test_the_folder_must_be_new_or_empty(tmp_path):
    out = job.folder_for(tmp_path / "a" / "b")
    assert out == tmp_path / "a" / "b" and not out.exists()  # made only once all is checked
    assert job.make_folder(out) == out and out.is_dir()
    (out / "rank-0.json").write_text("{}")
    with pytest.raises(UserError, match="--out: .* is not an empty folder"):
        job.folder_for(out)
    with pytest.raises(UserError, match="--out: .* is a file"):
        job.folder_for(out / "rank-0.json" / "c")


def _cli(*args, cwd=REPO):
    return subprocess.run([PYTHON, "-m", "chainermn_rt", "doctor", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("args, message", [
    (["--nodes", "2"], "--nodes: checks a cluster; allowed: with --site SITE"),
    (["--exclude-bad", "x"], "--exclude-bad: checks a cluster; allowed: with --site SITE"),
    (["--image", "img.sif"], "--image: img.sif is not a file; allowed: a SIF file (make sif), "
                             "or --image alone inside an image"),
    (["--site", "sandbox"], "--nodes: missing; allowed: the number of nodes to check"),
    (["--site", "sandbox", "--nodes", "2", "--image"], "--image: with --site it names the "
                                                       "job's container image"),
    (["--site", "sandbox", "--nodes", "3"], "--nodes: 3 on partition 'gpu'; allowed: 1-2"),
    (["--site", "sandbox", "--nodes", "1", "--exclude-bad", "/nowhere/bad.txt"],
     "--exclude-bad: /nowhere/bad.txt; allowed: a file in an existing folder"),
])
def test_bad_arguments_are_one_line_and_exit_2(args, message, tmp_path):
    proc = _cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("chainermn-rt doctor: error: "), lines
    assert message in lines[0]
    assert not list(tmp_path.iterdir())  # no folder, no job


def test_a_sandbox_that_is_not_up_is_one_line_and_exit_3(tmp_path):
    env = dict(os.environ, CHAINERMN_RT_SANDBOX=str(tmp_path / "no-sandbox"))
    proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "doctor", "--site", "sandbox",
                           "--nodes", "1"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stderr.startswith("chainermn-rt doctor: error: the sandbox of ")
    assert "chainermn-rt sandbox up" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert not list(tmp_path.iterdir())


# -- the probe's facts -----------------------------------------------------------------------

def test_numa_and_cpu_facts_come_from_sysfs(tmp_path):
    for node, cpus in ((0, "0-3"), (1, "4-7")):
        d = tmp_path / f"devices/system/node/node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    (tmp_path / "devices/system/cpu").mkdir(parents=True)
    (tmp_path / "devices/system/cpu/online").write_text("0-7\n")
    nodes = facts.numa_cpus(tmp_path)
    assert nodes == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    assert facts.numa_of_cpus([3, 4], nodes) == [0, 1]
    assert facts.policy_nodes("interleave:0,1") == [0, 1]
    assert facts.policy_nodes("prefer:1") == [1]


def test_rank_facts_follow_the_per_rank_step():
    slots = [Slot(gpu=0, numa=0, cpus="0", hcas=("sbx_ib0:1",)),
             Slot(gpu=1, numa=0, cpus="1", hcas=("sbx_ib1:1",))]
    env = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
           "SLURM_NODEID": "1", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
           "SLURMD_NODENAME": "node2", "CUDA_VISIBLE_DEVICES": "0,1",
           "NCCL_IB_HCA": "=sbx_ib0:1,sbx_ib1:1", SLOTS_VAR: dump_slots(slots)}
    found = facts.rank_facts(env)
    assert found["node"] == "node2"
    assert found["launcher"] == {"name": "slurm", "rank": 3, "size": 4, "local_rank": 1,
                                 "local_size": 2}
    assert found["gpu"] == {"device": 1, "physical": "1", "cuda": False, "uuid": None,
                            "numa": None}
    assert found["slot"] == slots[1].to_json() and found["visible_gpus"] == 2
    assert found["env"]["NCCL_IB_HCA"] == "=sbx_ib0:1,sbx_ib1:1"
    assert found["versions"]["chainer"] == "7.8.1" and found["versions"]["cupy"] is None
    assert found["mpi"] is None and found["errors"] == []
    json.dumps(found)  # JSON-ready
    # Slurm's list of the node's GPU indices names the GPU, as in the per-rank step
    swapped = facts.rank_facts(env | {"SLURM_STEP_GPUS": "1,0"})
    assert (swapped["gpu"]["physical"], swapped["slot"]) == ("0", slots[0].to_json())


def test_a_rank_the_slot_table_cannot_place_says_why():
    env = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "2", "SLURM_LOCALID": "2",
           "SLURM_STEP_TASKS_PER_NODE": "3", "CUDA_VISIBLE_DEVICES": "0,1"}
    found = facts.rank_facts(env)
    assert "3 ranks on this node but only 2 GPUs visible" in found["errors"][0]
    assert found["gpu"] is None


def test_ranks_wait_for_each_others_files_before_mpi(tmp_path):
    for rank in range(3):
        reports.write_json(reports.rank_file(tmp_path, rank), {})
    probe.wait_for_peers(tmp_path, 3, timeout=600)  # all there: returns at once
    probe.wait_for_peers(tmp_path, 4, timeout=0)  # one missing: gives up when told
    assert [p.name for p in reports.rank_files(tmp_path)] == [f"rank-{i}.json" for i in range(3)]


def test_verdict_finds_the_first_wrong_element():
    import numpy

    want = numpy.arange(5.0)
    got = want.copy()
    got[3] = -1
    assert probe.verdict(got, want) == {"ok": False, "wrong": 1, "elements": 5,
                                        "first_wrong": {"index": 3, "got": -1.0, "want": 3.0}}
    assert probe.verdict(want * (1 + 1e-9), want, exact=False)["ok"]


@pytest.mark.mpi
def test_the_probe_under_three_mpi_ranks_passes_the_checks(tmp_path):
    """Real MPI ranks on this machine (mpirun, no Slurm): reports written, gathered, checked."""
    run_mpi(3, ["-m", "chainermn_rt.doctor.probe", "--out", str(tmp_path)])
    found, gathered = reports.load_reports(tmp_path)
    assert gathered and [r["launcher"]["rank"] for r in found] == [0, 1, 2]
    # one world, named alike by every rank: its MPI rank 0's identity
    assert [r["mpi"]["world"] for r in found] == [found[0]["mpi"]["world"]] * 3
    assert found[0]["mpi"]["world"]["rank"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rank-0.json", "rank-1.json", "rank-2.json", "ranks.json"]
    result = _by_name(cluster.run_checks(found, gathered, Expected(ranks=3)))
    assert result["allreduce-cpu"].status == PASS, result["allreduce-cpu"]
    assert result["launcher-mpi"].status == PASS, result["launcher-mpi"]
    assert result["versions"].status == PASS
    assert all(c.status in (PASS, NA) for c in result.values()), result


def test_probes_that_mpi_starts_as_singletons_report_one_rank_worlds(tmp_path):
    """Three probes whose launcher variables say ranks 0-2 of 3 but that no launcher with a
    PMI started (Open MPI without Slurm's SLURM_NODELIST: singletons): each writes its rank
    file, names itself as its world and skips the collectives; the check says so."""
    env = clean_launcher_env()
    procs = [subprocess.Popen(
        [PYTHON, "-m", "chainermn_rt.doctor.probe", "--out", str(tmp_path)], cwd=REPO,
        env=dict(env, SLURM_STEP_ID="0", SLURM_PROCID=str(i), SLURM_LOCALID=str(i),
                 SLURM_NODEID="0", SLURM_STEP_NUM_TASKS="3", SLURM_STEP_TASKS_PER_NODE="3"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(3)]
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
    found, gathered = reports.load_reports(tmp_path)
    assert not gathered and [r["mpi"]["size"] for r in found] == [1, 1, 1]
    assert sorted(r["mpi"]["world"]["rank"] for r in found) == [0, 1, 2]
    assert all("allreduce_cpu" not in r for r in found)
    check = _by_name(cluster.run_checks(found, gathered, Expected(ranks=3)))["launcher-mpi"]
    assert check.reason == ("3 ranks started as 3 one-rank worlds (MPI_COMM_WORLD size 1 each; "
                            "expected one world of 3): the launcher's PMI did not reach the MPI "
                            "library")


@pytest.mark.gpu
def test_the_probe_on_a_gpu_averages_with_pure_nccl(tmp_path):
    """On a machine with a CUDA GPU: its UUID and NUMA node are read, and ChainerMN's
    pure_nccl mean of GPU buffers is right."""
    run_mpi(1, ["-m", "chainermn_rt.doctor.probe", "--out", str(tmp_path)],
            env=dict(os.environ, CUDA_VISIBLE_DEVICES="0"))
    (report,), gathered = reports.load_reports(tmp_path)
    assert report["gpu"]["uuid"].startswith("GPU-") and report["versions"]["cupy"]
    assert report["allreduce_gpu"]["ok"], report["allreduce_gpu"]
    result = _by_name(cluster.run_checks([report], gathered, Expected(ranks=1)))
    assert result["allreduce-gpu"].status == PASS


def test_reports_files_are_written_whole(tmp_path):
    reports.write_json(reports.rank_file(tmp_path, 3), {"a": 1})
    assert json.loads((tmp_path / "rank-3.json").read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["rank-3.json"]  # no temporary left
    data = copy.deepcopy(_healthy(1, 2))
    for r in data:
        reports.write_json(reports.rank_file(tmp_path, r["launcher"]["rank"]), r)
    found, gathered = reports.load_reports(tmp_path)
    assert not gathered and len(found) == 3


def test_damaged_report_files_count_as_not_written(tmp_path):
    """The doctor's folder is on a shared file system: a cut, binary, huge or FIFO report is
    a rank that did not report (the checks name it), never a traceback or an endless read."""
    data = _healthy(1, 4)
    for r in data[:2]:
        reports.write_json(reports.rank_file(tmp_path, r["launcher"]["rank"]), r)
    reports.rank_file(tmp_path, 2).write_bytes(b'{"launcher": {"rank": 2')  # cut short
    os.mkfifo(reports.rank_file(tmp_path, 3))
    (tmp_path / reports.GATHERED).write_bytes(b"\xff\xfe[" + b"[" * 100_000)  # not JSON
    found, gathered = reports.load_reports(tmp_path)
    assert not gathered and [r["launcher"]["rank"] for r in found] == [0, 1]
    result = _run(found, gathered, Expected(ranks=4))
    assert result["reports"].status == FAIL and "2 of 4 ranks wrote no report" in \
        result["reports"].reason, result["reports"]
    reports.rank_file(tmp_path, 2).write_bytes(b" " * (reports.MAX_RANK_BYTES + 1) + b"{}")
    assert len(reports.load_reports(tmp_path)[0]) == 2


def test_a_failed_jobs_row_names_the_task_a_signal_ended(tmp_path):
    """What the debian13 stack's Open MPI 5.0.7 left when it crashed in MPI_Init: srun's lines
    for every task, in no order; the row names the crashed one, not the tasks ended after."""
    (tmp_path / "doctor-26.out").write_text(
        "[node2:20855:0:20855] Caught signal 11 (Segmentation fault: address not mapped to "
        "object at address 0xe0)\n"
        " 4  /lib/x86_64-linux-gnu/libmpi.so.40(mca_pml_ob1_recv_frag_callback_match+0xaa)\n"
        "slurmstepd-node1: error: *** STEP 26.0 ON node1 CANCELLED AT 2026-12-06T17:53:38 ***\n"
        "srun: error: node1: task 0: Exited with exit code 14\n"
        "srun: error: node6: task 5: Killed\n"
        "srun: error: node2: task 1: Segmentation fault (core dumped)\n"
        "srun: error: node8: tasks 6-7: Killed\n")
    c = job.job_check(FinalState("FAILED", 14), "26", tmp_path)
    assert c.status == FAIL
    assert c.reason == ("job 26 FAILED, exit code 14; srun: task 1 on node2: Segmentation fault "
                        "(core dumped)")
    assert c.hint == f"read {tmp_path / 'doctor-26.out'}"
    (tmp_path / "doctor-27.out").write_text("srun: error: node1: task 0: Exited with exit code 1\n")
    assert job.job_check(FinalState("FAILED", 1), "27", tmp_path).reason == \
        "job 27 FAILED, exit code 1"
    assert job.job_check(FinalState("TIMEOUT", 0), "28", tmp_path).reason == \
        "job 28 TIMEOUT, exit code 0"  # no log at all


# -- the network the profile states (doctor/network.py) ---------------------------------------

def _with(reps, **network):
    return [{**r, "network": {"ofi": None, "ucx": None, "nccl_plugin": None, **network}}
            for r in reps]


def test_the_stated_ofi_provider_must_be_on_every_rank():
    want = replace(EXPECTED, fabric="ofi", provider="cxi")
    reps = _with(_healthy(), ofi=["cxi", "tcp", "shm"])
    assert _run(reps, expected=want)["fabric"].status == PASS
    reps[5]["network"]["ofi"] = ["tcp", "udp", "shm"]  # a node whose cxi is missing
    check = _run(reps, expected=want)["fabric"]
    assert (check.status, check.reason, check.nodes) == (
        FAIL, "cxi expected, found on node2 (rank 5): shm, tcp, udp (fi_info -l)", ("node2",))


def test_ucx_must_reach_infiniband_where_the_profile_says_ucx():
    want = replace(EXPECTED, fabric="ucx")
    assert _run(_with(_healthy(), ucx=["self", "tcp", "rc_mlx5", "dc_mlx5"]),
                expected=want)["fabric"].status == PASS
    check = _run(_with(_healthy(), ucx=["self", "tcp", "posix"]), expected=want)["fabric"]
    assert check.status == FAIL and check.reason.startswith(
        "an InfiniBand or RoCE transport expected, found on node1, node2 (ranks 0,1,2,3,4,5,6,7)"
        ": posix, self, tcp (ucx_info -d)")


def test_the_nccl_plugin_must_load_and_export_ncclnet():
    want = replace(EXPECTED, nccl_plugin="/opt/ofi-nccl/libnccl-net.so")
    good = {"path": want.nccl_plugin, "loaded": True, "error": None, "symbols": ["ncclNet_v8"]}
    reps = _with(_healthy(), nccl_plugin=good)
    assert _run(reps, expected=want)["nccl-plugin"].reason == (
        "/opt/ofi-nccl/libnccl-net.so loads on every rank, exporting ncclNet_v8")
    reps[0]["network"]["nccl_plugin"] = {**good, "loaded": False, "symbols": [],
                                          "error": "libfabric.so.1: cannot open shared object"}
    check = _run(reps, expected=want)["nccl-plugin"]
    assert (check.status, check.reason) == (
        FAIL, "/opt/ofi-nccl/libnccl-net.so does not load on node1 (rank 0): libfabric.so.1: "
        "cannot open shared object")


def test_every_rank_loads_the_library_the_profile_binds():
    reps = _healthy()
    want = replace(EXPECTED, mpi_library="/opt/mpich/lib/libmpi.so.12")
    check = _run(reps, expected=want)["mpi-library"]
    assert check.status == FAIL and check.reason == (
        "/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4 on node1, node2 (ranks 0,1,2,3,4,5,6,7); "
        "the profile binds /opt/mpich/lib/libmpi.so.12")
    reps[3]["mpi"]["libmpi"] = "/opt/other/libmpi.so.40"
    assert _run(reps)["mpi-library"].status == FAIL  # two libraries in one job
