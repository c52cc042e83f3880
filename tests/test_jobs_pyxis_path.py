"""The job path through pyxis as the sandbox's unprivileged user (sandbox-pyxis: Slurm 22.05's
slurmd loading pyxis 0.24.0 with ``container_scope=job``, enroot 4.1.2, the cpu image's
SquashFS): what the Plan writes for pyxis (the job's folder mounted and the ranks' working
folder, the job's variables winning over the image's ENV, no home) under the doctor, the stall
watchdog, a failing rank, QOS preemption and a resume, staging and the timeline; and that
nothing of the containers stays on the nodes.

The profile binds only the programs' folder, read-only, as a site binds its project file
system: the job's folder (its log, the stop file, snapshots, the timeline, the staged data) is
seen by the ranks through the job-folder mount alone. Every job is 2 nodes x 2 ranks; seconds
are printed (``pytest -s``), not checked.
"""

from __future__ import annotations

import json
import pwd
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import numpy
import pytest
from test_jobs_pyxis import DIGEST, jobs_as_user

from chainermn_rt.rank_contract import TIMELINE_FOLDER
from chainermn_rt.sandbox import Sandbox, scratch
from chainermn_rt.sandbox.settings import HOST_USER, STATE_VAR
from chainermn_rt.staging import FOLDER_PREFIX

from conftest import PYTHON, json_objects
from fixtures_sandbox import job_output, submit_text, user_folder

pytestmark = [pytest.mark.slurm, pytest.mark.docker]  # docker: the SquashFS of the cpu image
SITE = "sandbox-pyxis"
MNIST = ["--n-train", "4000", "--n-test", "400", "--unit", "100", "--batchsize", "50",
         "--log-every", "20", "--no-progress"]


class Jobs:
    """The user's jobs through ``chainermn-rt`` from new folders of the sandbox's shared
    folder; ``tree`` holds examples/ and tests/programs/, the profile's one bind."""

    def __init__(self, ctx: dict) -> None:
        self.sb: Sandbox = ctx["sb"]
        self.tree: Path = ctx["tree"]
        self.profile: Path = ctx["profile"]
        self.image: list[str] = ctx["image"]
        self.uid = pwd.getpwnam(HOST_USER).pw_uid

    def folder(self, name: str) -> Path:
        return user_folder(self.sb, f"{name}-{secrets.token_hex(3)}")

    def program(self, *parts: str) -> str:
        return str(self.tree.joinpath("tests", "programs", *parts))

    def cli(self, cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run([PYTHON, "-m", "chainermn_rt", *args], cwd=cwd,
                              env={**self.sb.env(), STATE_VAR: str(self.sb.state_dir)},
                              capture_output=True, text=True, timeout=timeout)

    def submit(self, cwd: Path, name: str, command: list[str], *args: str,
               wait: bool = True, site: Path | None = None) -> tuple[str, str, str]:
        """``submit --site PROFILE --nodes 2 ... [--wait] -- COMMAND`` from ``cwd``: (job id,
        final state or "", the job's log)."""
        started = time.monotonic()
        proc = self.cli(cwd, "submit", "--site", str(site or self.profile), "--nodes", "2",
                        "--time",
                        "5", "--job-name", name, *self.image, *args,
                        *(["--wait", "--wait-timeout", "600"] if wait else []), "--", *command)
        job = re.match(r"submitted job (\d+)", proc.stdout)
        assert job, proc.stdout + proc.stderr
        if not wait:
            return job.group(1), "", ""
        log = cwd / f"{name}-{job.group(1)}.out"
        text = log.read_text(errors="replace") if log.exists() else ""
        ended = re.search(rf"job {job.group(1)}: (\w+), exit code", proc.stdout)
        assert ended, proc.stdout + proc.stderr + text[-3000:]
        print(f"\nMEASURED {name}: job {job.group(1)} {ended.group(1)} "
              f"{time.monotonic() - started:.1f} s from submit to its end")
        return job.group(1), ended.group(1), text

    def leftovers(self) -> dict[str, list[str]]:
        """What enroot and pyxis keep of the user's containers on each node: enroot's
        containers (data) and runtime folder, pyxis's files, the user's squashfuse mounts."""
        found: dict[str, list[str]] = {}
        for node in self.sb.settings.node_names():
            base = scratch.node_folder(self.sb.settings, node)
            found[node] = sorted(
                str(p.relative_to(base)) for top in (f"enroot/data/user-{self.uid}",
                                                     f"enroot/runtime/user-{self.uid}", "pyxis")
                for p in (base / top).rglob("*") if p.is_file() or top != "pyxis")
        ps = subprocess.run(["pgrep", "-u", str(self.uid), "-f", "squashfuse"],
                            capture_output=True, text=True).stdout.split()
        return {**found, **({"squashfuse": ps} if ps else {})}

    def nothing_left(self) -> None:
        """Wait for the job's epilog (pyxis's removal of its named containers, squashfuse's
        last mounts); then nothing of the user's containers is on any node."""
        deadline = time.monotonic() + 60
        while any(self.leftovers().values()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(self.leftovers().values()), self.leftovers()
        drained = self.sb.slurm.output(["sinfo", "-h", "-R"])
        assert not drained.strip(), drained  # pyxis's epilog failing drains the nodes


@pytest.fixture(scope="module")
def jobs(sandbox_pyxis, cpu_sqfs) -> Jobs:
    """sandbox-pyxis as the user, binding the programs' folder only (read-only)."""
    try:
        pwd.getpwnam(HOST_USER)
    except KeyError:
        pytest.fail(f"no user {HOST_USER} on this machine (run `make setup`)", pytrace=False)
    ctx = jobs_as_user(sandbox_pyxis, SITE, HOST_USER, cpu_sqfs)
    text = ctx["profile"].read_text()
    assert text.count('\nbinds = ["/tmp:/tmp"]\n') == 1
    tree = ctx["tree"]
    ctx["profile"].write_text(text.replace('\nbinds = ["/tmp:/tmp"]\n',
                                           f'\nbinds = ["{tree}:{tree}:ro"]\n'))
    return Jobs(ctx)


def test_the_ranks_start_in_the_jobs_folder_with_the_jobs_variables(jobs):
    """A program named by a relative path runs in the job's folder and writes there; the job's
    --env VIRTUAL_ENV wins over the image's ENV (``--container-env``) while the image's
    PIP_DISABLE_PIP_VERSION_CHECK, which the job does not set, reaches the ranks too; the stop
    file's variable is the job's; the home is not mounted."""
    folder = jobs.folder("env")
    shutil.copy(jobs.program("report_env.py"), folder / "report_env.py")
    job, state, log = jobs.submit(folder, "env", [
        "python3", "report_env.py", "VIRTUAL_ENV", "PIP_DISABLE_PIP_VERSION_CHECK",
        "CHAINERMN_RT_STOP_FILE", "OMPI_MCA_btl"], "--env", "VIRTUAL_ENV=/from/the/job")
    assert state == "COMPLETED", log[-3000:]
    ranks = sorted(json_objects(log), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3], log
    assert {r["cwd"] for r in ranks} == {str(folder)}, ranks
    assert {json.dumps(r["env"], sort_keys=True) for r in ranks} == {json.dumps({
        "VIRTUAL_ENV": "/from/the/job", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "CHAINERMN_RT_STOP_FILE": f"{folder}/.chainermn-rt-stop-{job}",
        "OMPI_MCA_btl": "self,vader,tcp"}, sort_keys=True)}, ranks
    assert sorted(p.read_text() for p in (folder / "ranks").glob("rank*.txt")) == [
        "node1", "node1", "node2", "node2"]
    jobs.nothing_left()


def test_without_container_env_the_images_value_wins_and_named_containers_are_unpacked(jobs):
    """What the Plan's flags prevent and what it does not do, by hand in one batch script:
    without ``--container-env`` the image's VIRTUAL_ENV beats the job's (pyxis's rule); a named
    container is unpacked on each node (the image's SquashFS is not), then reused; the job
    fails at its end, and pyxis's job epilog (``container_scope=job``) removes it from both
    nodes."""
    image = jobs.sb.site.container.image if not jobs.image else jobs.image[1]
    folder = jobs.folder("named")
    data = f"{jobs.sb.settings.scratch[0]}/enroot/data/user-{jobs.uid}"
    flags = "--ntasks-per-node=1 --no-container-mount-home"
    text = f"""#!/bin/bash
now() {{ date +%s.%N; }}
VIRTUAL_ENV=/from/the/job srun -N1 -n1 --container-image={image} {flags} printenv VIRTUAL_ENV
a=$(now); srun --container-image={image} --container-name=probe {flags} true; b=$(now)
srun --container-name=probe {flags} true; c=$(now)
srun --container-image={image} {flags} true; d=$(now)
srun {flags} sh -c 'echo "$(hostname): $(ls {data}) $(du -sm {data} | cut -f1) MB"'
echo "seconds: named $(echo "$b - $a" | bc), again $(echo "$c - $b" | bc), \
unnamed $(echo "$d - $c" | bc)"
exit 3
"""
    job = submit_text(jobs.sb, text, ["--nodes=2", "--time=5", f"--uid={HOST_USER}",
                                      f"--gid={HOST_USER}", f"--chdir={folder}"])
    state = jobs.sb.slurm.wait(job, timeout=600, poll=0.5)
    out = job_output(jobs.sb, job)
    print(f"\nMEASURED {out.splitlines()[-1]}")
    assert tuple(state) == ("FAILED", 3), out
    lines = out.splitlines()
    assert lines[0] == "/opt/chainermn_rt/venv", out  # the image's, not the job's
    unpacked = sorted(line for line in lines if ": pyxis_" in line)
    assert [line.split(" ")[:2] for line in unpacked] == [
        ["node1:", f"pyxis_{job}_probe"], ["node2:", f"pyxis_{job}_probe"]], out
    print(f"MEASURED the named container on each node: {unpacked[0].split(' ', 2)[2]}")
    jobs.nothing_left()


def test_the_doctor_passes_in_the_container(jobs):
    """``chainermn-rt doctor --site PROFILE --nodes 2`` as the user: its probe runs in the
    image, its reports land in the job's folder."""
    folder = jobs.folder("doctor")
    started = time.monotonic()
    proc = jobs.cli(folder, "doctor", "--site", str(jobs.profile), "--nodes", "2", "--json",
                    "--out", str(folder), "--wait-timeout", "600", *jobs.image)
    print(f"\nMEASURED doctor: {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert {c["status"] for c in checks.values()} <= {"PASS", "n/a"}, proc.stdout
    for name in ("reports", "launcher-mpi", "versions", "cpu-sharing", "allreduce-cpu"):
        assert checks[name]["status"] == "PASS", checks[name]
    assert checks["versions"]["reason"].endswith("; Open MPI v4.1.4"), checks["versions"]


def _mnist_files(root: Path, seed: int = 0) -> None:
    """MNIST-shaped data where Chainer keeps its download (``pfnet/chainer/mnist`` under
    ``$CHAINER_DATASET_ROOT``: ``x`` uint8 [N, 784], ``y`` uint8): a stroke pattern per class
    and noise, 2000 to train and 400 to test."""
    folder = root / "pfnet" / "chainer" / "mnist"
    folder.mkdir(parents=True)
    rng = numpy.random.default_rng(seed)
    templates = rng.random((10, 784)) > 0.8
    for name, n in (("train", 2000), ("test", 400)):
        y = rng.integers(0, 10, n).astype(numpy.uint8)
        x = numpy.clip(templates[y] * 200 + rng.normal(0, 30, (n, 784)), 0, 255)
        numpy.savez_compressed(folder / f"{name}.npz", x=x.astype(numpy.uint8), y=y)
    for path in (root, *root.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)


def test_chainermns_mnist_recipe_unmodified(jobs):
    """ChainerMN's MNIST recipe with no chainermn-rt in it (tests/programs/plain_mnist.py:
    create_communicator, get_mnist, scatter_dataset, the multi-node optimizer and evaluator,
    Chainer's Trainer), MNIST's files in the job's folder as Chainer keeps them: two epochs,
    evaluated on every rank, one set of parameters."""
    folder = jobs.folder("plain")
    _mnist_files(folder / "datasets")
    _, state, log = jobs.submit(folder, "plain", ["python3", jobs.program("plain_mnist.py")],
                                "--env", f"CHAINER_DATASET_ROOT={folder / 'datasets'}")
    assert state == "COMPLETED", log[-3000:]
    epochs = [e for e in json_objects(log) if "epoch" in e]
    assert [e["epoch"] for e in epochs] == [1, 2], log[-3000:]
    assert all(0 <= e["validation/main/accuracy"] <= 1 for e in epochs), epochs
    digests = DIGEST.findall(log)
    assert len(digests) == 4 and len({d for _, d in digests}) == 1, log[-3000:]
    jobs.nothing_left()


def test_a_sites_mpich_bound_under_pmi2_is_one_world(jobs):
    """Issue 42's bind model under pyxis: Debian 12's MPICH (as a site lays it out: the library
    and its libmpi.so.12 link) bound into the image, ``srun --mpi=pmi2``. enroot's PMI hook
    writes the first task's PMI_RANK into the container's environment, where it beats every
    other task's: without the step naming pmi2's per-task variables in ``--container-env``
    ranks shared a rank and MPI_Init failed ("unable to allocate shared memory") or hung."""
    mpich = jobs.folder("site-mpich")
    shutil.copy2("/usr/lib/x86_64-linux-gnu/libmpich.so.12", mpich / "libmpich.so.12")
    (mpich / "libmpi.so.12").symlink_to("libmpich.so.12")
    (mpich / "libmpich.so.12").chmod(0o644)
    site = mpich / "bound.toml"
    text = jobs.profile.read_text()
    assert text.count('srun_mpi = "pmix"') == 1 and text.count("[environment]\n") == 1
    # UCX between the processes of a user namespace (enroot's), as under ch-run
    site.write_text(text.replace('srun_mpi = "pmix"', 'srun_mpi = "pmi2"').replace(
        "[environment]\n", '[environment]\nUCX_POSIX_USE_PROC_LINK = "n"\nUCX_TLS = "^cma"\n')
        + f'\n[mpi]\nmodel = "bind"\nfamily = "mpich"\nlibrary = "{mpich}/libmpi.so.12"\n'
        f'paths = ["{mpich}"]\n')
    _, state, log = jobs.submit(jobs.folder("mpich"), "mpich",
                                ["python3", jobs.program("report_mpi.py")], site=site)
    assert state == "COMPLETED", log[-3000:]
    ranks = sorted(json_objects(log), key=lambda r: r["rank"])
    assert [(r["rank"], r["size"]) for r in ranks] == [(i, 4) for i in range(4)], log[-3000:]
    assert {(r["mpi"], r["libmpi"]) for r in ranks} == {
        ("MPICH Version:\t4.0.2", f"{mpich}/libmpich.so.12")}, log[-3000:]
    jobs.nothing_left()


def test_a_stalled_rank_ends_its_job_in_one_line(jobs):
    """An unmodified ChainerMN script; rank 1 stops before iteration 4."""
    _, state, log = jobs.submit(jobs.folder("stall"), "stall", [
        "python3", jobs.program("stall_rank.py"), "--how", "loop", "--plain"],
        "--env", "CHAINERMN_RT_STALL_TIMEOUT=5")
    assert state == "FAILED", log[-3000:]
    host = re.search(r"rank 1 on (node\d) stalls", log)
    assert host, log[-3000:]
    stall = [line for line in log.splitlines() if line.startswith("chainermn-rt: stall:")]
    assert len(stall) == 1 and re.fullmatch(
        rf"chainermn-rt: stall: ranks 0,2-3 wait in multi_node_mean_grad \(iteration 4\) for "
        rf"\d+ s; not arrived: rank 1 on {host.group(1)} \(after iteration 3, outside "
        rf"collectives for \d+ s\); aborting the job", stall[0]), log[-3000:]
    jobs.nothing_left()


def test_a_failing_rank_ends_its_job_in_one_line_and_leaves_nothing(jobs):
    """An unmodified ChainerMN script: rank 1 raises while the others wait in an allreduce."""
    _, state, log = jobs.submit(jobs.folder("fail"), "fail", [
        "python3", jobs.program("fail_rank.py")], "--time", "3")
    assert state == "FAILED", log[-3000:]
    host = re.search(r"rank 1 on (node\d): first allreduce 4", log)
    assert host, log[-3000:]
    said = [line for line in log.splitlines() if line.startswith("chainermn-rt: rank")]
    assert said == [f"chainermn-rt: rank 1 on {host.group(1)} failed: RuntimeError: rank 1 "
                    "fails on purpose; aborting the job"], log[-3000:]
    jobs.nothing_left()


def test_qos_preemption_resumes_bit_identically_from_snapshots_in_the_jobs_folder(jobs):
    """As tests/test_resume_sandbox.py: a job under QOS low, slowed from iteration 41, is
    preempted by one under QOS high once it has its snapshot of iteration 40 (written to
    ``out/`` of the job's folder: the ranks see it through the job-folder mount); the shell
    (Slurm 22.05) requeues it, and the resumed run ends bit-identical to an uninterrupted
    one. Nothing of the containers stays on the nodes."""
    program = ["python3", jobs.program("resumable_mnist.py"), *MNIST, "--iterations", "60",
               "--snapshot-every", "20", "--out", "out"]
    _, state, log = jobs.submit(jobs.folder("reference"), "resume", program)
    assert state == "COMPLETED", log[-3000:]
    uninterrupted = DIGEST.findall(log)
    assert len(uninterrupted) == 4 and "resuming from" not in log, log[-3000:]

    folder = jobs.folder("preempted")
    started = time.monotonic()
    low, _, _ = jobs.submit(folder, "resume", [*program, "--slow-from", "41"], "--qos", "low",
                            wait=False)
    snapshot = folder / "out" / "snapshots" / "iter_000000040"
    while not snapshot.exists():
        path = folder / f"resume-{low}.out"
        assert jobs.sb.slurm.state(low) is None, path.read_text() if path.exists() else ""
        assert time.monotonic() - started < 600, f"{snapshot} did not appear"
        time.sleep(0.5)
    high = submit_text(jobs.sb, "#!/bin/sh\nsrun true\n",
                       ["--qos=high", "--nodes=2", "--exclusive", "--job-name=high"])
    assert jobs.sb.slurm.wait(high, timeout=600, poll=0.5) == ("COMPLETED", 0)
    final = jobs.sb.slurm.wait(low, timeout=600, poll=0.5)
    log = (folder / f"resume-{low}.out").read_text(errors="replace")
    print(f"\nMEASURED preempted job {low}: {final.state} {time.monotonic() - started:.1f} s "
          "from submit to its end")
    assert tuple(final) == ("COMPLETED", 0), log[-3000:]
    for line in ("SIGUSR2: asking the ranks for a snapshot",
                 "written on the job's request (time limit or preemption)",
                 f"requeueing job {low} (restart 1 of at most 3)",
                 "chainermn-rt: resuming from"):
        assert line in log, f"{line!r} missing:\n{log[-3000:]}"
    assert DIGEST.findall(log) == uninterrupted, log[-6000:]
    runs = jobs.sb.slurm.output(["sacct", "-n", "-P", "-X", "-D", "-j", f"{low},{high}", "-o",
                                 "JobID,State,QOS,Start"])
    assert [r.split("|")[:3] for r in sorted(runs.splitlines(), key=lambda r: r.split("|")[3])
            ] == [[low, "REQUEUED", "low"], [high, "COMPLETED", "high"],
                  [low, "COMPLETED", "low"]], runs
    jobs.nothing_left()


def test_staged_shards_and_the_timeline_in_the_container(jobs):
    """Made-up shards in the job's folder staged to each node's own scratch (the copy step runs
    in the container too), each rank reading its node's copy; then MNIST with ``--timeline``,
    whose records (in the job's folder) ``chainermn-rt timeline JOB`` and ``report JOB``
    merge. The staged copies go with the job."""
    folder = jobs.folder("stage")
    for argv in (["data", "synth", "jpegs", "--classes", "2", "--per-class", "8"],
                 ["data", "pack", "jpegs", "shards/train", "--shard-size", "4"]):
        proc = jobs.cli(folder, *argv, timeout=300)
        assert proc.returncode == 0, proc.stderr
    checks = folder / "checks"
    checks.mkdir(mode=0o777)
    checks.chmod(0o777)
    shards = folder / "shards" / "train"
    job, state, log = jobs.submit(folder, "stage", [
        "sh", "-c", 'python3 "$0" "$1" "$2" && shift 2 && exec python3 "$@"',
        jobs.program("stage_check.py"), str(shards), str(checks),
        jobs.program("timeline_mnist.py"), *MNIST, "--iterations", "20", "--out", "result"],
        "--stage", str(shards), "--timeline", "--env", "OMP_NUM_THREADS=1")
    assert state == "COMPLETED", log[-3000:]
    local = jobs.sb.settings.scratch[0]
    reports = [json.loads(p.read_text()) for p in sorted(checks.glob("rank*.run0.json"))]
    assert sorted(r["host"] for r in reports) == ["node1", "node1", "node2", "node2"], reports
    for r in reports:
        assert r["local"] == f"{local}/{FOLDER_PREFIX}{job}/0" and r["shards_ok"], r
    assert len({(r["device"], r["inode"]) for r in reports}) == 2, reports
    for command in ("timeline", "report"):
        proc = jobs.cli(folder, command, job, timeout=300)
        assert proc.returncode == 0, proc.stderr
    records = folder / TIMELINE_FOLDER / job
    trace = json.loads((records / "trace.json").read_text())
    assert len([e for e in trace["traceEvents"] if e["name"] == "step"]) == 4 * 20
    assert (records / "report.html").exists()
    for node in jobs.sb.settings.node_names():
        assert not list(scratch.node_folder(jobs.sb.settings, node).glob(f"{FOLDER_PREFIX}*"))
    jobs.nothing_left()

