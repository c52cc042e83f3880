"""``chainermn-rt doctor --site`` for real on the Slurm sandbox (2 nodes x 2 ranks): a healthy
job passes; each failure, provoked the way it happens on clusters, is found with its message."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from chainermn_rt.doctor import job, reports
from chainermn_rt.job_request import Request
from chainermn_rt.render import render
from chainermn_rt.site import load_site
from chainermn_rt.submission import Cluster

from conftest import REPO

pytestmark = pytest.mark.slurm
SITE = REPO / "slurm" / "sites" / "sandbox.toml"


def _cli(sandbox, cwd, *args):
    """``chainermn-rt doctor ARGS`` from ``cwd``: (the process, the job's folder). On the
    sandbox the command itself submits a job that Open MPI's start-up crash killed once more
    (chainermn_rt.submission.Cluster.run)."""
    argv = [sys.executable, "-m", "chainermn_rt", "doctor", "--wait-timeout", "540", *args]
    proc = subprocess.run(argv, env=sandbox.env(), capture_output=True, text=True, cwd=cwd,
                          timeout=1200)
    return proc, next(cwd.glob("doctor-*"), None)


def _doctor(sandbox, cwd, *args):
    """``chainermn-rt doctor --nodes 2 --gpus-per-node 2 --json ARGS`` from ``cwd``;
    (exit status, {check: Check as a dict}, the exclude file's text)."""
    bad = cwd / "bad.txt"
    proc, _ = _cli(sandbox, cwd, "--nodes", "2", "--gpus-per-node", "2", "--exclude-bad",
                   str(bad), "--json", *args)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    found = json.loads(proc.stdout)
    return proc.returncode, {c["name"]: c for c in found["checks"]}, bad.read_text()


def _profile(tmp_path, old: str, new: str):
    text = SITE.read_text()
    assert old in text
    path = tmp_path / "crafted.toml"
    path.write_text(text.replace(old, new))
    return path


def _failed(found):
    return sorted(name for name, c in found.items() if c["status"] == "FAIL")


def test_a_healthy_two_node_job_passes_and_prints_the_table(sandbox, tmp_path):
    proc, folder = _cli(sandbox, tmp_path, "--site", "sandbox", "--nodes", "2",
                        "--gpus-per-node", "2", "--exclude-bad", "bad.txt")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # one line per job submitted: a second after Open MPI's start-up crash (mpi_crash)
    submitted = [ln for ln in proc.stdout.splitlines() if ln.startswith("submitted doctor job ")]
    lines = proc.stdout.splitlines()[len(submitted):]
    assert submitted and proc.stdout.startswith(submitted[0]), proc.stdout
    assert lines[0].split() == ["check", "status", "reason"]
    rows = {line.split()[0]: line.split()[1] for line in lines[1:]}
    assert set(rows.values()) <= {"PASS", "n/a"}, proc.stdout
    assert rows["allreduce-cpu"] == rows["launcher-mpi"] == rows["cpu-sharing"] == "PASS"
    assert (tmp_path / "bad.txt").read_text() == ""
    assert folder.parent == tmp_path  # the job's folder, in the current one
    assert {p.name for p in folder.iterdir()} >= {"doctor.sh", "ranks.json", "rank-0.json",
                                                  "rank-3.json"}


def test_two_ranks_on_one_gpu_are_found(sandbox, tmp_path):
    """``SLURM_GPU_BIND=map_gpu:0``, srun's input variable for ``--gpu-bind=map_gpu:0``, gives
    the job's first GPU of a node to every task there: both ranks of a node see and use it."""
    code, found, bad = _doctor(sandbox, tmp_path, "--site", str(SITE),
                               "--env", "SLURM_GPU_BIND=map_gpu:0")
    assert code == 1
    check = found["gpu-per-rank"]
    assert check["status"] == "FAIL"
    # GPU 0 of the job's GPUs: the node's GPU 0 unless other jobs hold it
    assert re.fullmatch(r"node1: ranks 0, 1 all use GPU \d; node2: ranks 2, 3 all use GPU \d",
                        check["reason"]), check["reason"]
    assert "SLURM_GPU_BIND" in check["hint"]
    assert bad == "node1,node2\n"
    hostlist = sandbox.slurm.run(["scontrol", "show", "hostlist", bad.strip()])
    assert hostlist.stdout.strip() == "node[1-2]", hostlist.stderr


def test_a_launcher_without_pmi_is_found_from_the_rank_files(sandbox, tmp_path):
    """``srun --mpi=none``: the ranks share no PMI with MPI. Debian's Open MPI 4.1 then aborts
    in MPI_Init ("direct launched using srun, but OMPI was not built with SLURM's PMI
    support"); an MPI that starts singletons instead is the next test. Either way the
    collector has each rank's report, written before MPI started."""
    site = load_site(SITE)
    out = job.make_folder(job.folder_for(tmp_path / "doctor"))
    plan = job.doctor_plan(site, Request(nodes=2, gpus_per_node=2, command=("true",)), out)
    text = render(plan)
    assert text.count("--mpi=pmix") == 1
    script = out / "doctor.sh"
    script.write_text(text.replace("--mpi=pmix", "--mpi=none"))
    job_id, final, _, _ = Cluster(site, sandbox.slurm).run(script, timeout=540)
    found = {c.name: c for c in job.collect(out, job.expected(site, plan), final, job_id)}
    assert sorted(p.name for p in out.glob("rank-*.json")) == [f"rank-{i}.json" for i in range(4)]
    assert found["reports"].status == "PASS"
    check = found["launcher-mpi"]
    assert check.status == "FAIL", check
    assert check.reason.startswith("MPI_Init did not return on ranks 0, 1, 2, 3 of 4: the "
                                   "launcher and MPI share no PMI")
    assert "srun --mpi=pmix" in check.hint
    assert found["allreduce-cpu"].reason.startswith("not run")
    assert found["job"].status == "FAIL"


def test_ranks_that_start_as_one_rank_worlds_are_found_with_their_worlds(sandbox, tmp_path):
    """Every rank alone in an MPI world of its own, as Open MPI 5 starts them under srun
    without a PMIx server it reaches (open-mpi/ompi#13523), or as an MPI built without Slurm's
    PMI does. Provoked with the sandbox's Open MPI 4.1: ``srun --mpi=none`` gives the ranks no
    PMI, and an interpreter that drops SLURM_NODELIST hides the allocation from Open MPI, which
    then starts each rank as a singleton (with it, Open MPI aborts in MPI_Init: the test
    above). The doctor says how many worlds of which size."""
    python = tmp_path / "python-without-nodelist"
    python.write_text(f"#!/bin/sh\nunset SLURM_NODELIST\nexec {shlex.quote(sys.executable)} "
                      '"$@"\n')
    python.chmod(0o755)
    site = load_site(SITE)
    out = job.make_folder(job.folder_for(tmp_path / "doctor"))
    request = Request(nodes=2, gpus_per_node=2, command=("true",), python=str(python))
    plan = job.doctor_plan(site, request, out)
    text = render(plan)
    assert text.count("--mpi=pmix") == 1
    script = out / "doctor.sh"
    script.write_text(text.replace("--mpi=pmix", "--mpi=none"))
    job_id, final, _, _ = Cluster(site, sandbox.slurm).run(script, timeout=540)
    found = {c.name: c for c in job.collect(out, job.expected(site, plan), final, job_id)}
    assert tuple(final) == ("COMPLETED", 0), found["job"]
    assert found["reports"].status == "PASS", found["reports"]
    check = found["launcher-mpi"]
    assert check.status == "FAIL", check
    assert check.reason == ("4 ranks started as 4 one-rank worlds (MPI_COMM_WORLD size 1 each; "
                            "expected one world of 4): the launcher's PMI did not reach the MPI "
                            "library")
    assert "srun --mpi=pmix" in check.hint
    assert found["allreduce-cpu"].reason.startswith("not run")
    ranks, gathered = reports.load_reports(out)
    assert not gathered  # each rank its world's rank 0: each names itself
    assert [(r["mpi"]["size"], r["mpi"]["world"]["rank"]) for r in ranks] == [
        (1, 0), (1, 1), (1, 2), (1, 3)]


def test_a_rank_that_a_signal_ends_is_named_in_the_jobs_row(sandbox, tmp_path):
    """As the debian13 stack's Open MPI 5.0.7 crashes in MPI_Init now and then (a
    segmentation fault): the job's row says which task on which node, from srun's own line.
    Here rank 1's interpreter kills itself with SIGSEGV as its probe starts."""
    python = tmp_path / "python-rank1-segv"
    python.write_text(
        "#!/bin/sh\n"
        'if [ "$1 $2" = "-m chainermn_rt.doctor.probe" ] && [ "$SLURM_PROCID" = 1 ]; then '
        "kill -SEGV $$; fi\n"
        f'exec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    code, found, _ = _doctor(sandbox, tmp_path, "--site", str(SITE), "--python", str(python))
    assert code == 1
    assert re.fullmatch(r"job \d+ FAILED, exit code \d+; srun: task 1 on node1: Segmentation "
                        r"fault( \(core dumped\))?", found["job"]["reason"]), found["job"]
    assert found["reports"]["status"] == "FAIL"  # rank 1's at least; the others' by timing


def test_another_library_version_on_one_node_is_found(sandbox, tmp_path):
    """One node imports another chainer, as when a node-local install or a stray PYTHONPATH in
    one node's environment shadows the shared one. ``--python`` names the interpreter on the
    compute nodes; here it is a wrapper that runs the same Python but, on node2 only (Slurm's
    SLURMD_NODENAME), first puts on PYTHONPATH a folder holding a full, importable copy of the
    installed chainer whose ``_version.py`` says 7.8.0."""
    shadow = tmp_path / "shadow"
    installed = importlib.util.find_spec("chainer").submodule_search_locations[0]
    shutil.copytree(installed, shadow / "chainer", ignore=shutil.ignore_patterns("__pycache__"))
    version = shadow / "chainer" / "_version.py"
    version.write_text(version.read_text().replace("__version__ = '7.8.1'",
                                                   "__version__ = '7.8.0'"))
    python = tmp_path / "python-node2-shadowed"
    python.write_text(
        "#!/bin/sh\n"
        f'if [ "$SLURMD_NODENAME" = node2 ]; then PYTHONPATH={shlex.quote(str(shadow))}; '
        "export PYTHONPATH; fi\n"
        f'exec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    code, found, bad = _doctor(sandbox, tmp_path, "--site", str(SITE), "--python", str(python))
    assert code == 1 and _failed(found) == ["versions"], found
    assert found["versions"]["reason"] == (
        "chainer 7.8.1 on node1 (ranks 0, 1), 7.8.0 on node2 (ranks 2, 3); "
        "chainermn 7.8.1 on node1 (ranks 0, 1), 7.8.0 on node2 (ranks 2, 3)")
    assert bad == "node2\n"


def test_ranks_sharing_a_cpu_while_the_other_idles_are_found(sandbox, tmp_path):
    """As the sandbox's old profile put GPUs 0 and 1 of a node both on CPU "0" (both ranks of a
    node on one core while the other idled: MNIST measured 2.75x slower). Here GPUs 2 and 3
    too, so that whichever two GPUs Slurm gives the job (other jobs may hold some), its ranks
    share CPU 0."""
    profile = tmp_path / "crafted.toml"
    text, count = re.subn(r'cpus = "1", (hcas = \["sbx_ib\d:1"\] \})', r'cpus = "0", \1',
                          SITE.read_text())
    assert count == 2  # the fake4 slots of GPUs 1 and 3
    profile.write_text(text)
    code, found, bad = _doctor(sandbox, tmp_path, "--site", str(profile))
    assert code == 1 and _failed(found) == ["cpu-sharing"], found
    assert found["cpu-sharing"]["reason"].startswith(
        "node1: ranks 0 and 1 share CPU(s) 0 while CPU(s) 1")
    assert bad == "node1,node2\n"


def test_bandwidth_below_the_profiles_expectation_is_found(sandbox, tmp_path):
    """The sandbox's TCP bridge is nowhere near 1000 GB/s."""
    profile = _profile(tmp_path, "[sandbox]", "[checks]\nallreduce_busbw_gbps = 1000\n\n[sandbox]")
    code, found, bad = _doctor(sandbox, tmp_path, "--site", str(profile),
                               "--bandwidth-bytes", str(1 << 20))
    assert code == 1 and _failed(found) == ["bandwidth"], found
    assert "(mpi, 1048576 bytes) is below 0.5 x the expected 1000 GB/s" in \
        found["bandwidth"]["reason"]
    assert bad == ""  # the job as a whole: no node to blame
