"""The whole job path on today's cluster: the debian13 sandbox (Slurm 24.11, PMIx 5, Open MPI 5
and Apptainer 1.4.5 on Debian 13 nodes) driven by ``chainermn-rt submit --wait`` and
``chainermn-rt doctor`` with the shipped profile sandbox-debian13, whose ranks run in the cpu
image's SIF: its Open MPI 4.1 and PMIx 4.2 client against Slurm's PMIx 5 server (the hybrid
model). Jobs run as the root's unprivileged user ``chainermn`` where Apptainer differs for one
(no setuid: the SIF mounted through squashfuse, not a loop device), as root elsewhere;
bare-metal ranks run the nodes' Open MPI 5.

Every job is 2 nodes x 2 ranks but the hybrid model's 2 x 8. Seconds are printed
(``pytest -s``), not checked.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from chainermn_rt.doctor import job as doctor_job
from chainermn_rt.doctor import reports
from chainermn_rt.job_request import Request
from chainermn_rt.render import render
from chainermn_rt.sandbox import Sandbox, scratch
from chainermn_rt.sandbox.root import load_pins, run_in_root
from chainermn_rt.sandbox.settings import STATE_VAR
from chainermn_rt.site import load_site, resolve_site
from chainermn_rt.slurm_rules import pmix_folders
from chainermn_rt.staging import FOLDER_PREFIX
from chainermn_rt.submission import Cluster

from conftest import PYTHON, json_objects
from fixtures_sandbox import job_output, submit_text, user_folder, user_tree

pytestmark = [pytest.mark.slurm, pytest.mark.debian13]
SITE = "sandbox-debian13"
IMAGE_OS, NODE_OS = "Debian GNU/Linux 12 (bookworm)", "Debian GNU/Linux 13 (trixie)"
DIGEST = re.compile(r"^rank (\d) parameters sha256 (\w+)$", re.MULTILINE)
MNIST = ["--n-train", "4000", "--n-test", "400", "--unit", "100", "--batchsize", "50",
         "--log-every", "20", "--no-progress"]


@dataclass
class Done:
    job: str
    state: str
    log: str
    seconds: float


@dataclass
class Jobs:
    """Submits through the CLI to the session's debian13 sandbox; ``tree`` holds copies of
    examples/ and tests/programs/ that the unprivileged user (and so the SIF) can read, at
    the same relative places."""

    sb: Sandbox
    image: list[str]  # --runtime none, or --image and the SIF in the users' shared folder
    tree: Path
    profile: Path  # the shipped profile binding the users' shared folder, as a site would
    as_user: Path  # that, with the user's #SBATCH --uid/--gid

    @property
    def env(self) -> dict[str, str]:
        return {**self.sb.env(), STATE_VAR: str(self.sb.state_dir)}

    def folder(self, name: str) -> Path:
        """A new folder the user may write, where a job runs and logs."""
        return user_folder(self.sb, f"{name}-{secrets.token_hex(3)}")

    def program(self, *parts: str) -> str:
        return str(self.tree.joinpath(*parts))

    def cli(self, cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run([PYTHON, "-m", "chainermn_rt", *args], cwd=cwd, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def submit(self, cwd: Path, name: str, command: list[str], *args: str, user=False,
               wait=True) -> Done | str:
        """``chainermn-rt submit --site sandbox-debian13 --nodes 2 ... [--wait] -- COMMAND``
        from ``cwd``; the job id when not waiting."""
        started = time.monotonic()
        proc = self.cli(cwd, "submit", "--site", str(self.as_user if user else self.profile),
                        "--nodes", "2", "--time", "5", "--job-name", name, *self.image, *args,
                        *(["--wait", "--wait-timeout", "600"] if wait else []), "--",
                        *command)
        job = re.match(r"submitted job (\d+)", proc.stdout)
        assert job, proc.stdout + proc.stderr
        if not wait:
            return job.group(1)
        seconds = time.monotonic() - started
        log = cwd / f"{name}-{job.group(1)}.out"
        text = log.read_text(errors="replace") if log.exists() else ""
        ended = re.search(rf"job {job.group(1)}: (\w+), exit code", proc.stdout)
        assert ended, proc.stdout + proc.stderr + text[-3000:]
        print(f"\nMEASURED {name}{' as the user' if user else ''}: job {job.group(1)} "
              f"{ended.group(1)} {seconds:.1f} s from submit to its end")
        return Done(job.group(1), ended.group(1), text, seconds)


@pytest.fixture(scope="module")
def jobs(sandbox_debian13) -> Jobs:
    """What a cluster's users do: programs copied to the shared folder (the sandbox's, outside
    /tmp), which the profile binds into containers as sites bind their project file system."""
    sb = sandbox_debian13
    tree = user_tree(sb)
    shared = tree.parent
    text = resolve_site(SITE).read_text()
    assert text.count("\n[container]\n") == 1
    text = text.replace("\n[container]\n", f'\n[container]\nbinds = ["{shared}"]\n')
    profile = user_folder(sb, "profile") / "site.toml"
    profile.write_text(text)
    user = load_pins().user
    as_user = profile.with_name("as-user.toml")
    as_user.write_text(f'{text}\n[sbatch]\nuid = "{user}"\ngid = "{user}"\n')
    return Jobs(sb, ["--runtime", "none"], tree, profile, as_user)


@pytest.fixture(scope="module")
def shared_sif(jobs, cpu_sif) -> Path:
    """The suite's cpu SIF copied where the user may read it (the checkout may be private)."""
    path = user_folder(jobs.sb, "images") / cpu_sif.name
    shutil.copyfile(cpu_sif, path)
    path.chmod(0o644)
    return path


@pytest.fixture(scope="module")
def in_sif(jobs, shared_sif) -> Jobs:
    """``jobs`` with the profile's runtime, Apptainer, and the suite's cpu SIF."""
    return replace(jobs, image=["--image", str(shared_sif)])


@pytest.mark.docker  # the SIF: made from the suite's cpu image
def test_mnist_in_the_sif_as_a_user_while_the_nodes_run_debian_13(in_sif):
    """The ranks say, from inside, that they run as the user on the image's Debian 12; the
    same nodes' own steps say Debian 13."""
    nodes = submit_text(in_sif.sb, "#!/bin/sh\nsrun -N2 sh -c '. /etc/os-release; echo "
                                 "\"$(hostname) $PRETTY_NAME\"'\n", ["--nodes=2"])
    assert in_sif.sb.slurm.wait(nodes, timeout=300, poll=0.5) == ("COMPLETED", 0)
    assert sorted(job_output(in_sif.sb, nodes).splitlines()) == [f"node1 {NODE_OS}",
                                                               f"node2 {NODE_OS}"]
    folder = in_sif.folder("mnist")
    done = in_sif.submit(folder, "mnist", [
        "sh", "-c", '. /etc/os-release; echo "rank $SLURM_PROCID: $(id -un) in $PRETTY_NAME"; '
        'exec python3 "$@"', "rank", in_sif.program("examples", "train_mnist.py"), *MNIST,
        "--iterations", "40", "--out", str(folder / "result")], user=True)
    assert done.state == "COMPLETED", done.log[-3000:]
    said = sorted(re.findall(r"^rank (\d): (.*)$", done.log, re.MULTILINE))
    assert said == [(str(r), f"{load_pins().user} in {IMAGE_OS}") for r in range(4)], done.log
    digests = DIGEST.findall(done.log)
    assert sorted(r for r, _ in digests) == ["0", "1", "2", "3"], done.log[-3000:]
    assert len({d for _, d in digests}) == 1, done.log[-3000:]


def doctor(jobs: Jobs, mpi: str) -> None:
    """``chainermn-rt doctor --site sandbox-debian13 --nodes 2`` as root: every check that
    applies passes, the ranks' MPI is ``mpi``."""
    folder = jobs.folder("doctor")
    started = time.monotonic()
    proc = jobs.cli(folder, "doctor", "--site", SITE, "--nodes", "2", "--json",
                    "--wait-timeout", "600", *jobs.image)
    print(f"\nMEASURED doctor ({' '.join(jobs.image) or 'the SIF'}): "
          f"{time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert {c["status"] for c in checks.values()} <= {"PASS", "n/a"}, proc.stdout
    for name in ("reports", "launcher-mpi", "versions", "cpu-sharing", "allreduce-cpu"):
        assert checks[name]["status"] == "PASS", checks[name]
    assert checks["versions"]["reason"].endswith(f"; {mpi}"), checks["versions"]


@pytest.mark.docker  # the SIF: made from the suite's cpu image
def test_the_doctor_passes_in_the_sif(in_sif):
    doctor(in_sif, "Open MPI v4.1.4")


def test_the_doctor_passes_on_bare_metal_with_open_mpi_5(jobs):
    """The ranks run the checkout's venv on the nodes: its mpi4py, built against the host's
    Open MPI 4.1.4, on the nodes' Open MPI 5.0.7 (both keep libmpi.so.40)."""
    doctor(jobs, "Open MPI v5.0.7")


def test_ranks_that_open_mpi_5_starts_alone_are_found_as_one_rank_worlds(jobs):
    """``srun --mpi=none``: no PMIx server for the ranks, and the nodes' Open MPI 5 starts
    each one as a world of its own (open-mpi/ompi#13523) instead of failing in MPI_Init;
    the doctor names the worlds."""
    site = load_site(resolve_site(SITE))
    out = jobs.folder("doctor-alone")
    plan = doctor_job.doctor_plan(site, Request(nodes=2, runtime="none", command=("true",)),
                                  out)
    text = render(plan)
    assert text.count("--mpi=pmix") == 1
    script = out / doctor_job.SCRIPT
    script.write_text(text.replace("--mpi=pmix", "--mpi=none"))
    done = Cluster(site, jobs.sb.slurm).run(script, timeout=540)
    found = {c.name: c for c in doctor_job.collect(out, doctor_job.expected(site, plan),
                                                   done.state, done.job)}
    assert found["reports"].status == "PASS", (found["reports"], done.text[-3000:])
    assert found["launcher-mpi"].reason == (
        "4 ranks started as 4 one-rank worlds (MPI_COMM_WORLD size 1 each; expected one world "
        "of 4): the launcher's PMI did not reach the MPI library"), done.text[-3000:]
    assert found["allreduce-cpu"].reason.startswith("not run")
    ranks, _ = reports.load_reports(out)
    assert [(r["mpi"]["size"], r["mpi"]["world"]["rank"]) for r in ranks] == [
        (1, 0), (1, 1), (1, 2), (1, 3)]


@pytest.mark.docker  # the SIF: made from the suite's cpu image
def test_a_stalled_rank_ends_its_job_in_one_line(in_sif):
    """An unmodified ChainerMN script in the SIF, as root; rank 1 stops before iteration 4."""
    done = in_sif.submit(in_sif.folder("stall"), "stall", [
        "python3", in_sif.program("tests", "programs", "stall_rank.py"), "--how", "loop",
        "--plain"], "--env", "CHAINERMN_RT_STALL_TIMEOUT=5")
    assert done.state == "FAILED", done.log[-3000:]
    host = re.search(r"rank 1 on (node\d) stalls", done.log)
    assert host, done.log[-3000:]
    stall = [line for line in done.log.splitlines() if line.startswith("chainermn-rt: stall:")]
    assert len(stall) == 1 and re.fullmatch(
        rf"chainermn-rt: stall: ranks 0,2-3 wait in multi_node_mean_grad \(iteration 4\) for "
        rf"\d+ s; not arrived: rank 1 on {host.group(1)} \(after iteration 3, outside "
        rf"collectives for \d+ s\); aborting the job", stall[0]), done.log[-3000:]


@pytest.mark.docker  # the SIF: made from the suite's cpu image
def test_a_failing_rank_ends_its_job_in_one_line_as_a_user(in_sif):
    """An unmodified ChainerMN script in the SIF, as the user: rank 1 raises while the others
    wait in an allreduce; MPI_Abort ends every rank, squashfuse's mounts with them."""
    done = in_sif.submit(in_sif.folder("fail"), "fail", [
        "python3", in_sif.program("tests", "programs", "fail_rank.py")], "--time", "3",
        user=True)
    assert done.state == "FAILED", done.log[-3000:]
    host = re.search(r"rank 1 on (node\d): first allreduce 4", done.log)
    assert host, done.log[-3000:]
    said = [line for line in done.log.splitlines() if line.startswith("chainermn-rt: rank")]
    assert said == [f"chainermn-rt: rank 1 on {host.group(1)} failed: RuntimeError: rank 1 "
                    "fails on purpose; aborting the job"], done.log[-3000:]
    assert "second allreduce returned" not in done.log
    deadline = time.monotonic() + 60  # they go once their container's processes have gone
    while (left := subprocess.run(["pgrep", "-u", str(load_pins().uid), "-f", "squashfuse"],
                                  capture_output=True, text=True).stdout):
        assert time.monotonic() < deadline, f"squashfuse left running: {left}"
        time.sleep(0.5)


@pytest.mark.docker  # the SIF: made from the suite's cpu image
def test_qos_preemption_snapshots_requeues_and_resumes_bit_identically_as_a_user(in_sif):
    """As tests/test_resume_sandbox.py on the Debian 12 stack: a job under QOS low, slowed
    from iteration 41, is preempted by a job under QOS high once it has its snapshot of
    iteration 40; the batch shell on the node asks the ranks in the SIF for a snapshot and
    ends; Slurm 24.11 requeues the preempted job itself (the shell does not: Slurm would run
    it once more, slurm_rules.CHANGES), and the resumed run ends bit-identical to an
    uninterrupted one."""
    program = ["python3", in_sif.program("tests", "programs", "resumable_mnist.py"), *MNIST,
               "--iterations", "60", "--snapshot-every", "20"]
    reference = in_sif.folder("reference")
    done = in_sif.submit(reference, "resume", [*program, "--out", str(reference / "out")],
                       user=True)
    assert done.state == "COMPLETED", done.log[-3000:]
    uninterrupted = DIGEST.findall(done.log)
    assert len(uninterrupted) == 4 and "resuming from" not in done.log, done.log[-3000:]

    folder = in_sif.folder("preempted")
    started = time.monotonic()
    low = in_sif.submit(folder, "resume", [*program, "--out", str(folder / "out"),
                                         "--slow-from", "41"], "--qos", "low", user=True,
                      wait=False)
    snapshot = folder / "out" / "snapshots" / "iter_000000040"
    while not snapshot.exists():
        log = folder / f"resume-{low}.out"
        assert in_sif.sb.slurm.state(low) is None, log.read_text() if log.exists() else ""
        assert time.monotonic() - started < 600, f"{snapshot} did not appear"
        time.sleep(0.5)
    high = submit_text(in_sif.sb, "#!/bin/sh\nsrun true\n",
                       ["--qos=high", "--nodes=2", "--exclusive", "--job-name=high"])
    assert in_sif.sb.slurm.wait(high, timeout=600, poll=0.5) == ("COMPLETED", 0)
    state = in_sif.sb.slurm.wait(low, timeout=600, poll=0.5)
    log = (folder / f"resume-{low}.out").read_text(errors="replace")
    print(f"\nMEASURED preempted job {low}: {state.state} {time.monotonic() - started:.1f} s "
          "from submit to its end")
    assert tuple(state) == ("COMPLETED", 0), log[-3000:]
    for line in ("SIGUSR2: asking the ranks for a snapshot",
                 "written on the job's request (time limit or preemption)",
                 f"job {low} was preempted: Slurm requeues it (PreemptMode=REQUEUE)",
                 "chainermn-rt: resuming from"):
        assert line in log, f"{line!r} missing:\n{log[-3000:]}"
    assert DIGEST.findall(log) == uninterrupted, log[-6000:]
    runs = in_sif.sb.slurm.output(["sacct", "-n", "-P", "-X", "-D", "-j", f"{low},{high}", "-o",
                                 "JobID,State,QOS,Start"])
    assert [r.split("|")[:3] for r in sorted(runs.splitlines(), key=lambda r: r.split("|")[3])
            ] == [[low, "PREEMPTED", "low"], [high, "COMPLETED", "high"],
                  [low, "COMPLETED", "low"]], runs


@pytest.mark.docker  # the SIF: made from the suite's cpu image
def test_imagenet_on_made_up_jpegs_staged_to_node_local_scratch(in_sif):
    """README's commands: made-up JPEGs packed into shards (3 per rank), staged to each node's
    own scratch (bound into the SIF at the same path), ResNet-50 trained on them for an epoch,
    as root."""
    folder = in_sif.folder("imagenet")
    for argv in (["data", "synth", "jpegs/train", "--classes", "4", "--per-class", "12"],
                 ["data", "synth", "jpegs/val", "--classes", "4", "--per-class", "4",
                  "--first", "1000"],
                 ["data", "pack", "jpegs/train", "shards/train", "--shard-size", "4"],
                 ["data", "pack", "jpegs/val", "shards/val", "--shard-size", "4"]):
        proc = in_sif.cli(folder, *argv, timeout=300)
        assert proc.returncode == 0, proc.stderr
    shards, checks = folder / "shards", folder / "checks"
    checks.mkdir()
    done = in_sif.submit(folder, "imagenet", [
        "sh", "-c", 'python3 "$0" "$1" "$2" && shift 2 && exec python3 "$@"',
        in_sif.program("tests", "programs", "stage_check.py"), str(shards / "train"), str(checks),
        in_sif.program("examples", "train_imagenet.py"), "--n-class", "4", "--train",
        str(shards / "train"), "--val", str(shards / "val"), "--insize", "32", "--val-resize",
        "36", "--batchsize", "4", "--iterations", "3", "--log-every", "3", "--workers", "1",
        "--no-progress", "--out", str(folder / "result")], "--stage", str(shards),
        "--env", "OMP_NUM_THREADS=1")
    assert done.state == "COMPLETED", done.log[-3000:]
    digests = DIGEST.findall(done.log)
    assert sorted(r for r, _ in digests) == ["0", "1", "2", "3"], done.log[-3000:]
    assert len({d for _, d in digests}) == 1, done.log[-3000:]
    assert [e["validation/images"] for e in
            json.loads((folder / "result" / "log").read_text())] == [16]
    # each rank read a whole copy on its own node (tests/programs/stage_check.py)
    local = load_site(resolve_site(SITE)).partition(None).local_scratch
    reports = [json.loads(p.read_text()) for p in sorted(checks.glob("rank*.run0.json"))]
    assert sorted(r["host"] for r in reports) == ["node1", "node1", "node2", "node2"], reports
    for r in reports:
        assert r["local"] == f"{local}/{FOLDER_PREFIX}{done.job}/0/train" and r["shards_ok"], r
    assert len({(r["device"], r["inode"]) for r in reports}) == 2, reports
    for node in in_sif.sb.settings.node_names():  # and the copies are gone
        assert not list(scratch.node_folder(in_sif.sb.settings, node).glob(f"{FOLDER_PREFIX}*"))


@pytest.mark.docker  # the SIF: made from the suite's cpu image
def test_the_hybrid_model_at_2x8_ranks(jobs, shared_sif):
    """16 ranks of the SIF's Open MPI 4.1.4 with Debian 12's PMIx 4.2 client, started by Slurm
    24.11's PMIx 5 server, as the user (16 squashfuse mounts), 8 per node on nodes of 4
    configured CPUs (``--overcommit``); a Barrier over all of them. By hand, as a user would
    write it: the shared folder and the folders Slurm's PMIx plugin hands the ranks bound."""
    folder = jobs.folder("hybrid")
    program = jobs.program("tests", "programs", "report_mpi.py")
    env = " ".join(f"{k}={v}" for k, v in load_site(resolve_site(SITE)).environment.items())
    user = load_pins().user
    settings = jobs.sb.settings
    binds = " ".join(f"--bind {f}" for f in (jobs.tree.parent, *pmix_folders(settings.tmpfs)))
    job = submit_text(jobs.sb, f"#!/bin/sh\nexport {env}\nsrun --mpi=pmix --ntasks=16 "
                               f"--ntasks-per-node=8 --overcommit apptainer exec {binds} "
                               f"{shared_sif} python3 {program}\n",
                      ["--nodes=2", "--time=5", f"--uid={user}", f"--gid={user}",
                       f"--chdir={folder}"])
    state = jobs.sb.slurm.wait(job, timeout=600, poll=0.5)
    out = job_output(jobs.sb, job)
    assert tuple(state) == ("COMPLETED", 0), out[-3000:]
    ranks = sorted(json_objects(out), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == list(range(16)) and {r["size"] for r in ranks} == {16}
    assert sorted({(r["host"], sum(x["host"] == r["host"] for x in ranks)) for r in ranks}) \
        == [("node1", 8), ("node2", 8)]
    seen = {(r["mpi"], r["pmix_client"].split(" (")[0], r["pmix_server"], r["os"], r["uid"])
            for r in ranks}
    assert seen == {("Open MPI v4.1.4", "OpenPMIx 4.2.2rc2", "5.0.7a1", IMAGE_OS,
                     load_pins().uid)}, seen


GLIBC = ("libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2")  # the image's own, never bound


@pytest.mark.docker  # the SIF: made from the suite's cpu image
def test_the_bind_model_fails_on_the_images_older_glibc(debian13_root, cpu_sif):
    """The bind model: the nodes' Open MPI 5.0.7 (libmpi.so.40 and every library it needs but
    glibc's) bound into the cpu SIF, whose mpi4py wheel finds it as libmpi.so.40 on
    LD_LIBRARY_PATH (bare metal Open MPI 5 under mpi4py works: the doctor's test above). The
    image's glibc 2.36 is older than the one Debian 13 built them against, and the loader
    refuses them: what docs/sandbox.md says, error included."""
    libmpi = "/usr/lib/x86_64-linux-gnu/libmpi.so.40"
    ldd = run_in_root(debian13_root, ["ldd", libmpi], capture_output=True, text=True,
                      timeout=60)
    needed = [line.split(" => ")[1].split(" (")[0] for line in ldd.stdout.splitlines()
              if " => /" in line]
    binds = [f"{path}:/opt/host-mpi/{Path(path).name}" for path in [libmpi, *needed]
             if Path(path).name not in GLIBC]
    assert len(binds) > 10, ldd.stdout  # libopen-pal, PMIx 5, hwloc, libevent, UCX ...
    proc = run_in_root(debian13_root, [
        "apptainer", "exec", *(f"--bind={b}" for b in binds),
        "--env", "LD_LIBRARY_PATH=/opt/host-mpi", str(cpu_sif), "python3", "-c",
        "from mpi4py import MPI; print(MPI.Get_library_version())"],
        binds=[cpu_sif.parent], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # mpi4py tries every libmpi name, then says what each failed with
    assert "RuntimeError: cannot load MPI library\n" in proc.stderr, proc.stderr
    assert ("\n/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found "
            "(required by /opt/host-mpi/libmpi.so.40)") in proc.stderr, proc.stderr

