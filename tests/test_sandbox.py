"""The Slurm sandbox for real: 2 namespace nodes, PMIx, fake GPUs, limits, time-outs, teardown.

Every job runs on the real slurmctld/slurmd of the session's ``sandbox`` fixture.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.rank_contract import SLOTS_VAR
from chainermn_rt.sandbox import Sandbox, netns, processes
from chainermn_rt.sandbox.config import PMIX_TIMEOUT_S
from chainermn_rt.sandbox.daemons import MARKER_VAR
from chainermn_rt.sandbox.settings import STATE_VAR
from examples.sandbox_demo import run_demo

from conftest import PYTHON, REPO, json_objects, require_commands
from fixtures_sandbox import job_output, submit_text

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


def finished(sandbox, job_id: str, timeout: float = 300) -> str:
    """Wait for a job that must complete with 0; its output."""
    state = sandbox.slurm.wait(job_id, timeout=timeout, poll=0.5)
    out = job_output(sandbox, job_id)
    assert state == ("COMPLETED", 0), f"job {job_id}: {state}\n{out}"
    return out


@pytest.fixture(scope="module")
def timeouts(sandbox):
    """Two jobs that run into time limits, submitted first so their minute overlaps the tests."""
    whole = submit_text(sandbox, job("sleep 600"), ["--time=1", "--nodes=1", "--job-name=tmo-job"])
    # the script ends only once slurmctld has dropped the step's record, i.e. taken in its
    # exit (the derived exit code): ended before, the job once kept DerivedExitCode 0:0
    step = submit_text(sandbox, job(
        "srun --time=1 sleep 600 || true\n"
        'scontrol show job "$SLURM_JOB_ID" >/dev/null\n'  # scontrol answers here (set -e)
        'while scontrol show step "$SLURM_JOB_ID.0" >/dev/null 2>&1; do sleep 1; done\n'
        "echo script went on\nexit 0"), ["--time=5", "--nodes=1", "--job-name=tmo-step"])
    return whole, step


@pytest.mark.usefixtures("timeouts")
def test_two_nodes_have_distinct_hostnames(sandbox):
    out = finished(sandbox, submit_text(sandbox, job("srun hostname"),
                                        ["--nodes=2", "--ntasks-per-node=1"]))
    assert sorted(out.split()) == ["node1", "node2"]


def test_slurm_reads_the_sandboxs_pmix_timeout(sandbox):
    config = sandbox.slurm.output(["scontrol", "show", "config"])
    assert re.search(r"^PMIxTimeout\s*=\s*(\d+)", config, re.M).group(1) == \
        str(PMIX_TIMEOUT_S)


@pytest.mark.parametrize("launcher", ["srun --mpi=pmix", "mpirun --allow-run-as-root"])
def test_allreduce_across_nodes(sandbox, tmp_path, launcher):
    require_commands("mpirun")
    program = tmp_path / "allreduce.py"
    program.write_text(ALLREDUCE)
    out = finished(sandbox, submit_text(sandbox, job(f"{launcher} {PYTHON} {program}"),
                                        ["--nodes=2", "--ntasks-per-node=2"]))
    rows = sorted(line.split() for line in out.splitlines() if line.strip())
    assert [r[:2] for r in rows] == [[str(i), "4"] for i in range(4)], out
    assert {r[4] for r in rows} == {"10"}, out
    assert sorted(r[2] for r in rows) == ["node1", "node1", "node2", "node2"], out
    assert all(r[2] == r[3] for r in rows), "MPI processor name differs from the hostname"


@pytest.mark.parametrize("nodes, exchange", [(1, "SharedWindow"), (2, "MpiChunks")])
def test_chunked_shares_memory_within_one_node_only(sandbox, nodes, exchange):
    program = REPO / "tests" / "programs" / "report_exchange.py"
    proc = sandbox.slurm.run(["srun", "--mpi=pmix", f"--nodes={nodes}", "--ntasks-per-node=2",
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
    proc = sandbox.slurm.run(["srun", "--nodes=2", "--ntasks-per-node=2", *request_.split(),
                              "sh", "-c",
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
    proc = sandbox.slurm.run(["srun", "--nodes=2", "--ntasks-per-node=2", *request_.split(),
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


def test_a_rank_given_gpu_1_binds_to_gpu_1s_slot(sandbox):
    """A job holds node1's GPU 0; a one-GPU step there gets GPU 1 (SLURM_STEP_GPUS=1). The
    Plan's slot table for one GPU per node and the rank step bind it to GPU 1's slot (CPU 1,
    sbx_ib1), not the first slot's (CPU 0, sbx_ib0)."""
    plan = make_plan(sandbox.site, Request(nodes=1, gpus_per_node=1, partition="gpu",
                                           command=("x",)))
    slots = dict(plan.environment)[SLOTS_VAR]
    holder = submit_text(sandbox, job("sleep 300"), ["--partition=gpu", "--nodelist=node1",
                                                     "--gpus-per-node=1"])
    try:
        deadline = time.monotonic() + 60
        while sandbox.slurm.output(["squeue", "-h", "-j", holder, "-o", "%T"]).strip() \
                != "RUNNING":
            assert time.monotonic() < deadline, f"job {holder} did not start"
            time.sleep(0.5)
        proc = sandbox.slurm.run(["srun", "--partition=gpu", "--nodelist=node1", "--nodes=1",
                                  "--gpus-per-node=1", "sh", "-c",
                                  'echo "STEP_GPUS=$SLURM_STEP_GPUS"; exec "$@"', "sh", "env",
                                  f"{SLOTS_VAR}={slots}", "CHAINERMN_RT_VERBOSE=1", PYTHON,
                                  "-m", "chainermn_rt", "rank", "--", "true"], cwd=REPO)
    finally:
        sandbox.slurm.output(["scancel", holder])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "STEP_GPUS=1", proc.stdout
    assert lines[1].endswith(": GPU 0 of CUDA_VISIBLE_DEVICES=1, CPUs 1, HCA sbx_ib1:1"), \
        proc.stdout
    assert "warning" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--time=01:00:00"], "Requested time limit is invalid"),
    (["--nodes=3"], "Node count specification invalid"),
    (["--gpus-per-node=5"], "Requested node configuration is not available"),
    (["--partition=nosuch"], "invalid partition specified"),
])
def test_over_partition_limits_rejected(sandbox, args, message):
    with pytest.raises(UserError, match=message):
        submit_text(sandbox, job("hostname"), args)


def test_time_limits_reported_as_timeout(sandbox, timeouts):
    whole, step = timeouts
    # Killed at its limit, the job's record says TIMEOUT. Its exit code is a race: Slurm sends
    # SIGTERM to the job's processes one by one; 0 when it ends the batch shell (ExitCode
    # 0:15), 143 when the shell sees its `sleep` killed first and exits 128 + 15 itself.
    state = sandbox.slurm.wait(whole, timeout=300)
    assert state.state == "TIMEOUT" and state.exit_code in (0, 143), state
    # A step killed at its own limit while the script went on: the job COMPLETED, and only
    # the record's derived exit code (the worst step's: its `sleep` ended by SIGTERM, which
    # it does not handle) shows the time-out.
    assert sandbox.slurm.wait(step, timeout=300) == ("COMPLETED", 0)
    assert sandbox.job_record(step)["DerivedExitCode"] == "0:15"
    assert "DUE TO TIME LIMIT" in job_output(sandbox, step)
    assert "script went on" in job_output(sandbox, step)


def test_demo_trains_mnist_across_two_nodes_with_identical_parameters(sandbox, tmp_path, capsys):
    """`make demo`'s job: rendered 2 nodes x 2 ranks, ChainerMN MNIST, one parameter digest."""
    assert run_demo(sandbox, tmp_path, iterations=30) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    placed = sorted(re.findall(r"^  rank (\d)/4 \(local (\d)/2\) on (node\d): GPU (\d) of "
                               r"CUDA_VISIBLE_DEVICES=0,1, CPUs (\d)", out, re.MULTILINE))
    # ranks in blocks, device = local rank, CPUs from the sandbox profile's slots: GPU 0 on
    # CPU 0, GPU 1 on CPU 1, so a node's two ranks use both cores
    assert placed == [("0", "0", "node1", "0", "0"), ("1", "1", "node1", "1", "1"),
                      ("2", "0", "node2", "0", "0"), ("3", "1", "node2", "1", "1")], out
    digests = [line.split()[-1] for line in out.splitlines() if "parameters sha256" in line]
    assert len(digests) == 4 and len(set(digests)) == 1, out
    assert "final accuracy: main/accuracy" in out, out
    # the job script's `srun --cpu-bind=none` and the sandbox's TaskPlugin agree: the log shown
    # to every new user does not begin with "srun: cluster configuration lacks support for cpu
    # binding"
    assert "lacks support for cpu binding" not in out, out
    report = re.search(r"^where the job's time went, rank by rank: (\S+/report\.html) ", out,
                       re.MULTILINE)
    assert report and os.path.isfile(report.group(1)), out
    # the slow-node line once: rank 0's, in the job's log (the report's, the same, not again)
    assert out.count("chainermn-rt: slow node: ") == 1, out


def test_up_is_idempotent_and_down_leaves_nothing(tmp_path):
    """A second, one-node sandbox of its own beside the session's: up twice, a running job,
    then down; nothing of it is left."""
    require_commands("munged", "slurmctld", "slurmd", "ip")
    sb = Sandbox.from_profile(nodes=1, state_dir=tmp_path / "state")
    first = sb.up()
    try:
        assert sb.status().up, first
        assert "already up" in sb.up()
        record = json.loads((sb.state_dir / "sandbox.json").read_text())
        assert "accounting: MariaDB in" in first and "QOS normal, low (grace 00:01:00), high " \
            "(preempts low)" in first, first
        for option, slurm_said in (("--account=nope", "Invalid account"),
                                   ("--qos=nope", "Invalid qos specification")):
            refused = subprocess.run(
                [PYTHON, "-m", "chainermn_rt", "submit", "--site", "sandbox", "--nodes", "1",
                 option, "--", "true"], cwd=tmp_path, capture_output=True, text=True,
                env={**os.environ, STATE_VAR: str(sb.state_dir)})
            assert refused.returncode == 2 and slurm_said in refused.stderr, refused
            assert refused.stderr.count("\n") == 1 and not refused.stdout, refused
        running = submit_text(sb, job("srun sleep 600"), ["--nodes=1"])
        sb.slurm.run(["scontrol", "wait_job", running], timeout=60)  # waits until it runs
    finally:
        print(sb.down())
    assert_nothing_left(sb, record)
    assert sb.slurm.accounting and "mariadbd" in record["procs"] and "slurmdbd" in record["procs"]
    status = sb.status()
    assert not status.up and "down" in str(status)
    assert "not up" in sb.down()


def test_job_ids_go_on_after_down_and_up_so_a_log_holds_one_run(tmp_path):
    """`make demo` run twice: its job appends to `<name>-<id>.out` (so that a requeued job
    keeps its first run's output); ids that began again at 1 on each `up` put a second demo's
    output into the first's log. A one-node sandbox of its own, up, a job, down, twice."""
    sb = Sandbox.from_profile(nodes=1, state_dir=tmp_path / "state")
    script = tmp_path / "job.sh"
    script.write_text(job('echo "run of job $SLURM_JOB_ID"'))
    args = ["--nodes=1", "--open-mode=append", f"--output={tmp_path}/demo-%j.out"]
    ids = []
    try:
        for _ in range(2):
            sb.up()
            ids.append(sb.slurm.submit(script, args, cwd=tmp_path))
            assert sb.slurm.wait(ids[-1], timeout=120, poll=0.2) == ("COMPLETED", 0)
            sb.down()
    finally:
        sb.down()
    assert int(ids[1]) > int(ids[0]), ids
    for job_id in ids:
        assert (tmp_path / f"demo-{job_id}.out").read_text() == f"run of job {job_id}\n"


def assert_nothing_left(sb: Sandbox, record: dict) -> None:
    assert not any(processes.alive(p) for p in record["procs"].values())
    assert processes.members(set(), f"{MARKER_VAR}={sb.state_dir}".encode()) == []
    assert netns.existing(sb.settings.prefix) == []
    assert not (sb.state_dir / "scratch").exists()  # the nodes' local scratch, and what was in it
    assert not (sb.state_dir / "db").exists()  # the accounting database
    assert sorted(p.name for p in (sb.state_dir / "run").iterdir()) == []  # sockets, pid files


def test_two_sandboxes_run_side_by_side(sandbox, tmp_path):
    """Another checkout's sandbox (another state folder) while the session's runs: its own
    namespaces, and jobs on both."""
    other = Sandbox.from_profile(nodes=2, state_dir=tmp_path / "other")
    assert other.settings.prefix != sandbox.settings.prefix
    other.up()
    try:
        for sb in (other, sandbox):
            out = finished(sb, submit_text(sb, job("srun hostname"),
                                           ["--nodes=2", "--ntasks-per-node=1"]))
            assert sorted(out.split()) == ["node1", "node2"]
        assert sandbox.status().up and other.status().up
        record = json.loads((other.state_dir / "sandbox.json").read_text())
    finally:
        other.down()
    assert_nothing_left(other, record)
    assert sandbox.status().up


def test_a_sandbox_killed_without_down_is_cleared_by_the_next_up(tmp_path):
    """Its daemons killed (as by a restart's end of every process): namespaces stay behind.
    status names them; the next up clears them and starts."""
    sb = Sandbox.from_profile(nodes=1, state_dir=tmp_path / "state")
    sb.up()
    record = json.loads((sb.state_dir / "sandbox.json").read_text())
    try:
        processes.stop(list(record["procs"].values()), grace=0)
        (sb.state_dir / "sandbox.json").unlink()
        stale = netns.existing(sb.settings.prefix)
        assert stale == sorted([sb.settings.netns("head"), sb.settings.netns("node1")])
        status = sb.status()
        assert not status.up and "without `down`" in str(status) and stale[0] in str(status)
        again = sb.up()
        assert "cleared what a sandbox left" in again and sb.status().up, again
        record = json.loads((sb.state_dir / "sandbox.json").read_text())
    finally:
        sb.down()
    assert_nothing_left(sb, record)


def test_cli_status_and_down_work_from_any_folder(sandbox, tmp_path):
    """No --state: the checkout's sandbox is found from a folder outside the checkout."""
    status = subprocess.run([PYTHON, "-m", "chainermn_rt", "sandbox", "status"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"state folder {sandbox.state_dir}" in status.stdout


def test_cli_submit_reaches_the_sandbox_from_any_folder(sandbox, tmp_path):
    """`submit --site sandbox` from a user's folder, without sourcing env.sh."""
    env = {k: v for k, v in sandbox.env().items() if k != "SLURM_CONF"}
    env["PATH"] = env["PATH"].split(":", 1)[1]  # without the sandbox's wrappers
    proc = subprocess.run(
        [PYTHON, "-m", "chainermn_rt", "submit", "--site", "sandbox", "--nodes", "1",
         "--gpus-per-node", "1", "--time", "2", "--wait", "--", "hostname"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "COMPLETED, exit code 0" in proc.stdout
    assert next(tmp_path.glob("chainermn-*.out")).read_text().split()[-1] == "node1"


def test_submit_follows_the_running_sandboxs_node_count(tmp_path):
    """`sandbox up --nodes 3` on the shipped profile (its partitions say 2 nodes), then `submit
    --site sandbox --nodes 3`: the profile follows the running sandbox, whose partitions span
    its 3 nodes, and the job runs on all three (issue 33: it was refused, "allowed: 1-2"). A
    sandbox of its own; once it is down, the profile is as written again."""
    require_commands("munged", "slurmctld", "slurmd", "ip")
    env = {**os.environ, STATE_VAR: str(tmp_path / "state")}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([PYTHON, "-m", "chainermn_rt", *args], capture_output=True,
                              text=True, cwd=tmp_path, env=env, timeout=300)

    def submit(nodes: str, *more: str) -> subprocess.CompletedProcess:
        return cli("submit", "--site", "sandbox", "--nodes", nodes, "--gpus-per-node", "1",
                   "--time", "2", *more, "--", "hostname")

    try:
        up = cli("sandbox", "up", "--nodes", "3")
        assert up.returncode == 0 and "up (3 nodes)" in up.stdout, up.stdout + up.stderr
        ran = submit("3", "--wait")
        assert ran.returncode == 0 and "COMPLETED, exit code 0" in ran.stdout, ran
        # the log holds the three hosts and nothing else (no srun warning either)
        log = next(tmp_path.glob("chainermn-*.out")).read_text()
        assert sorted(log.split()) == ["node1", "node2", "node3"], log
        over = submit("4", "--dry-run")
        assert (over.returncode, over.stderr) == (2, "chainermn-rt submit: error: --nodes: 4 on "
                                                     "partition 'gpu'; allowed: 1-3\n")
    finally:
        down = cli("sandbox", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    written = submit("3", "--dry-run")
    assert (written.returncode, written.stderr) == (2, "chainermn-rt submit: error: --nodes: 3 "
                                                       "on partition 'gpu'; allowed: 1-2\n")


def test_binding_bench_runs_the_demo_under_both_bindings(sandbox):
    proc = subprocess.run([PYTHON, "-m", "bench.sandbox_binding", "--rounds", "1",
                           "--iterations", "10"], capture_output=True, text=True, cwd=REPO,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [report] = [o for o in json_objects(proc.stdout) if "runs" in o]
    assert {k: len(v) for k, v in report["runs"].items()} == {"shared": 1, "spread": 1}
    assert all(v[0] > 0 for v in report["runs"].values())


def test_mariadb_keeps_its_temporary_files_in_the_state_folder(tmp_path):
    """The database's install runs with TMPDIR naming a folder that does not exist: MariaDB
    would put its temporary tables there (or in the /tmp other sandboxes share, where a
    bootstrap once failed, "Could not remove temporary table"); the state folder's own is used."""
    require_commands("mariadb-install-db")
    from chainermn_rt.sandbox import accounting
    from chainermn_rt.sandbox.daemons import last_log_line
    from chainermn_rt.sandbox.settings import sandbox_settings
    from chainermn_rt.site import load_site, resolve_site

    s = sandbox_settings(load_site(resolve_site("sandbox")), state_dir=tmp_path / "state")
    (s.state_dir / "log").mkdir(parents=True)
    accounting.tmp_dir(s).mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "absent")}
    done = subprocess.run(accounting.install_argv(s), capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert (accounting.data_dir(s) / "mysql").is_dir()
    # a failed install's page of advice ends with a URL: the sandbox names the ERROR line
    (s.state_dir / "log" / "mariadb-install.out").write_text(
        "Installing MariaDB/MySQL system tables ...\nERROR: 1051  Unknown table 'x'\n"
        "Installation of system tables failed!\n\nPlease report at https://mariadb.org/jira\n")
    assert last_log_line(s, "mariadb-install").endswith(
        "(mariadb-install.out: ERROR: 1051  Unknown table 'x')")
