"""The Slurm sandbox for real: 2 namespace nodes, PMIx, fake GPUs, limits, time-outs, teardown.

Every job runs on the real slurmctld/slurmd of the session's ``sandbox`` fixture.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.sandbox import Sandbox, processes
from chainermn_rt.sandbox.cluster import MARKER_VAR
from chainermn_rt.sandbox.settings import sandbox_settings

from conftest import PYTHON, REPO, json_objects, require_commands

pytestmark = pytest.mark.slurm

ALLREDUCE = """\
import socket
from mpi4py import MPI
import numpy as np
comm = MPI.COMM_WORLD
total = np.array([comm.rank + 1.0])
comm.Allreduce(MPI.IN_PLACE, total)
row = f"{comm.rank} {comm.size} {socket.gethostname()} {MPI.Get_processor_name()} {total[0]:g}"
rows = comm.gather(row)  # one writer: ranks' output streams may interleave mid-line
if comm.rank == 0:
    print("\\n".join(rows), flush=True)
"""


def job(body: str) -> str:
    return "#!/bin/bash\nset -euo pipefail\n" + body + "\n"


def finished(sandbox, job_id: int, timeout: float = 300) -> str:
    """Wait for a job that must complete with 0; its output."""
    state = sandbox.wait(job_id, timeout=timeout)
    out = sandbox.output(job_id)
    assert state == ("COMPLETED", 0), f"job {job_id}: {state}\n{out}"
    return out


@pytest.fixture(scope="module")
def timeouts(sandbox):
    """Two jobs that run into time limits, submitted first so their minute overlaps the tests."""
    whole = sandbox.submit(job("sleep 600"), ["--time=1", "--nodes=1", "--job-name=tmo-job"])
    step = sandbox.submit(job("srun --time=1 sleep 600 || true\necho script went on\nexit 0"),
                          ["--time=5", "--nodes=1", "--job-name=tmo-step"])
    return whole, step


@pytest.mark.usefixtures("timeouts")
def test_two_nodes_have_distinct_hostnames(sandbox):
    out = finished(sandbox, sandbox.submit(job("srun hostname"),
                                           ["--nodes=2", "--ntasks-per-node=1"]))
    assert sorted(out.split()) == ["node1", "node2"]


@pytest.mark.parametrize("launcher", ["srun --mpi=pmix", "mpirun --allow-run-as-root"])
def test_allreduce_across_nodes(sandbox, tmp_path, launcher):
    require_commands("mpirun")
    program = tmp_path / "allreduce.py"
    program.write_text(ALLREDUCE)
    out = finished(sandbox, sandbox.submit(job(f"{launcher} {PYTHON} {program}"),
                                           ["--nodes=2", "--ntasks-per-node=2"]))
    rows = sorted(line.split() for line in out.splitlines() if line.strip())
    assert [r[:2] for r in rows] == [[str(i), "4"] for i in range(4)], out
    assert {r[4] for r in rows} == {"10"}, out
    assert sorted(r[2] for r in rows) == ["node1", "node1", "node2", "node2"], out
    assert all(r[2] == r[3] for r in rows), "MPI processor name differs from the hostname"


@pytest.mark.parametrize("nodes, exchange", [(1, "SharedSlots"), (2, "MpiChunks")])
def test_chunked_shares_memory_within_one_node_only(sandbox, nodes, exchange):
    program = REPO / "tests" / "programs" / "report_exchange.py"
    proc = sandbox.run(["srun", "--mpi=pmix", f"--nodes={nodes}", "--ntasks-per-node=2",
                        PYTHON, str(program)], cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    rows = json_objects(proc.stdout)
    ranks = 2 * nodes
    assert sorted(r["rank"] for r in rows) == list(range(ranks))
    assert {r["host"] for r in rows} == {f"node{n + 1}" for n in range(nodes)}
    assert {(r["exchange"], r["mean"]) for r in rows} == {(exchange, (ranks + 1) / 2)}


# What Slurm documents per task, 2 nodes x 2 tasks: (node-local task 0, task 1).
GPU_REQUESTS = {
    "--gpus-per-node=2": ("0,1", "0,1"),
    "--gpus-per-task=1": ("0", "1"),
    "--gpus-per-node=4 --gpu-bind=map_gpu:3,1": ("3", "1"),
}


@pytest.mark.parametrize("request_", GPU_REQUESTS)
def test_cuda_visible_devices_per_task(sandbox, request_):
    proc = sandbox.run(["srun", "--nodes=2", "--ntasks-per-node=2", *request_.split(), "sh", "-c",
                        'echo "$(hostname) $SLURM_LOCALID $CUDA_VISIBLE_DEVICES"'])
    assert proc.returncode == 0, proc.stderr
    seen = sorted(line.split() for line in proc.stdout.splitlines())
    want = sorted([node, str(local), gpus] for node in ("node1", "node2")
                  for local, gpus in enumerate(GPU_REQUESTS[request_]))
    assert seen == want


@pytest.mark.parametrize("request_, devices", [("--gpus-per-task=1", (0, 0)),
                                               ("--gpus-per-node=2", (0, 1))])
def test_runtime_finds_local_rank_and_device(sandbox, request_, devices):
    program = REPO / "tests" / "programs" / "report_rank.py"
    proc = sandbox.run(["srun", "--nodes=2", "--ntasks-per-node=2", *request_.split(),
                        PYTHON, str(program)], cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    ranks = sorted(json_objects(proc.stdout),
                   key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    for r in ranks:
        assert (r["size"], r["local_size"]) == (4, 2)
        assert r["host"] == f"node{r['rank'] // 2 + 1}"
        assert r["local_rank"] == r["rank"] % 2
        assert r["device"] == devices[r["local_rank"]], r


@pytest.mark.parametrize("args, message", [
    (["--time=01:00:00"], "Requested time limit is invalid"),
    (["--nodes=3"], "Node count specification invalid"),
    (["--gpus-per-node=5"], "Requested node configuration is not available"),
    (["--partition=nosuch"], "invalid partition specified"),
])
def test_over_partition_limits_rejected(sandbox, args, message):
    with pytest.raises(UserError, match=message):
        sandbox.submit(job("hostname"), args)


def test_time_limits_reported_as_timeout(sandbox, timeouts):
    whole, step = timeouts
    # Killed at its limit, the job's record says TIMEOUT although its exit code reads 0.
    assert sandbox.wait(whole, timeout=300) == ("TIMEOUT", 0)
    # A step killed at its own limit while the script went on: the job COMPLETED, and only
    # the record's derived exit code (the worst step's, signal 15) shows the time-out.
    assert sandbox.wait(step, timeout=300) == ("COMPLETED", 0)
    assert sandbox.record(step)["DerivedExitCode"] == "0:15"
    assert "DUE TO TIME LIMIT" in sandbox.output(step)
    assert "script went on" in sandbox.output(step)


def test_demo_trains_mnist_across_two_nodes_with_identical_parameters(sandbox, tmp_path, capsys):
    """`make demo`'s job: rendered 2 nodes x 2 ranks, ChainerMN MNIST, one parameter digest."""
    from chainermn_rt.sandbox.demo import run_demo

    assert run_demo(sandbox, tmp_path, iterations=30) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    placed = sorted(re.findall(r"^  rank (\d)/4 \(local (\d)/2\) on (node\d): GPU (\d) of "
                               r"CUDA_VISIBLE_DEVICES=0,1, CPUs (\d)", out, re.MULTILINE))
    # ranks in blocks, device = local rank, CPUs from the sandbox profile's slots (GPU 0,1: CPU 0)
    assert placed == [("0", "0", "node1", "0", "0"), ("1", "1", "node1", "1", "0"),
                      ("2", "0", "node2", "0", "0"), ("3", "1", "node2", "1", "0")], out
    digests = [line.split()[-1] for line in out.splitlines() if "parameters sha256" in line]
    assert len(digests) == 4 and len(set(digests)) == 1, out
    assert "final accuracy: main/accuracy" in out, out


def test_up_is_idempotent_and_down_leaves_nothing(tmp_path):
    """A second, one-node sandbox of its own: up twice, a running job, then down."""
    require_commands("munged", "slurmctld", "slurmd", "ip")
    shipped = Sandbox.from_profile().site
    site = dataclasses.replace(shipped, sandbox={
        **shipped.sandbox, "prefix": "cmrtsbxt", "controller_port": 6917, "slurmd_port": 6918})
    sb = Sandbox(site, sandbox_settings(site, nodes=1, state_dir=tmp_path / "state"))
    first = sb.up()
    try:
        assert sb.status().up, first
        assert "already up" in sb.up()
        record = json.loads((sb.state_dir / "sandbox.json").read_text())
        running = sb.submit(job("srun sleep 600"), ["--nodes=1"])
        sb.run(["scontrol", "wait_job", str(running)], timeout=60)  # waits until it runs
    finally:
        print(sb.down())
    assert not any(processes.alive(p) for p in record["procs"].values())
    assert processes.members(set(), f"{MARKER_VAR}={sb.state_dir}".encode()) == []
    names = subprocess.run(["ip", "netns", "list"], check=False, capture_output=True,
                           text=True).stdout
    for ns in record["netns"]:
        assert ns not in names
        assert not Path(f"/run/netns/{ns}").exists()
    status = sb.status()
    assert not status.up and "down" in str(status)
    assert "not up" in sb.down()


def test_loopback_fallback_runs_mpi_across_its_nodes_and_goes_down(tmp_path):
    """Where namespaces are not permitted: every slurmd on 127.0.0.1, Open MPI over TCP."""
    require_commands("munged", "slurmctld", "slurmd")
    shipped = Sandbox.from_profile().site
    site = dataclasses.replace(shipped, sandbox={
        **shipped.sandbox, "prefix": "cmrtsbxl", "controller_port": 7817, "slurmd_port": 7818})
    sb = Sandbox(site, sandbox_settings(site, nodes=2, state_dir=tmp_path / "state"))
    program = tmp_path / "allreduce.py"
    program.write_text(ALLREDUCE)
    assert "loopback mode" in sb.up("loopback")
    try:
        out = finished(sb, sb.submit(job(f"srun --mpi=pmix {PYTHON} {program}"),
                                     ["--nodes=2", "--ntasks-per-node=2"]))
        rows = sorted(line.split() for line in out.splitlines() if line.strip())
        assert [(r[0], r[1], r[4]) for r in rows] == [(str(i), "4", "10") for i in range(4)]
        record = json.loads((sb.state_dir / "sandbox.json").read_text())
    finally:
        sb.down()
    assert not any(processes.alive(p) for p in record["procs"].values())
    assert processes.members(set(), f"{MARKER_VAR}={sb.state_dir}".encode()) == []
