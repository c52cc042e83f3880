"""The GPU checks in one run, for a machine lent for minutes, offline, with its own Python.

That machine (docs/benchmarks.md, "The GPU check") has Python 3.12 in a virtual environment
of its own with CuPy 14 (CUDA 13, no cuDNN), NVIDIA's NCCL wheel, PyTorch (cuDNN 9), NumPy and
mpi4py, but no MPI library and no network. On the copy of this checkout there, with
``build/offline-wheels`` (``make offline-wheels``) carried along::

    PYTHONUNBUFFERED=1 python3 tests/gpu_check.py --out "$OUT"

It needs only the standard library until its first step has installed the offline wheels
(chainer, chainermn_rt, Open MPI's PyPI wheel, mpi4py, the test tools) into that Python's own
environment, or under a prefix in the work folder when that environment is read-only. The
steps, in order, each under a time limit and all within ``--budget`` seconds:

==============  ============================================================================
install         the offline wheels; the environment's ``bin/`` (``mpirun``) first on PATH
stack           versions: Python, NumPy, MPI, CuPy, CUDA, NCCL, the GPU, PyTorch and cuDNN
setup           ``chainermn_rt.setup()`` on one rank picks ``pure_nccl`` on GPU 0
doctor          ``chainermn-rt doctor``: its MPI, NCCL, CuPy and cuDNN checks pass
nccl-net        the network NCCL chooses on GPU 0 and its plugin lines (``n/a`` on the CPU)
mpi             ``mpirun -np 2`` of the rank programs the GPU tests use, on the CPU
gpu-tests       the GPU-marked tests: exactly ``GPU_TESTS`` pass (a skip is a failure)
chainer-step    ResNet-50 steps in Chainer (CuPy 14 without cuDNN), images/s after warm-up
torch-step      the same steps, model and data in PyTorch eager with TF32 off (cuDNN 9)
bench-train     ``chainermn-rt bench train`` (ResNet-50, ``pure_nccl``) on one rank
fix-set         tests/test_chainer_fixes.py on this stack: every test passes
example         examples/train_imagenet.py on synthetic images for a few iterations
dali            bench/dali_gpu.py: the DALI loader on GPU 0 (batches CuPy arrays over DALI's
                memory, labels and the exact validation split, pixels against libjpeg-turbo's)
                and its rate; ``n/a`` where DALI (the gpu-dali image's; its 424 MB wheel cannot
                travel with the offline wheels), Pillow or the JPEG decoder do not import
==============  ============================================================================

``--out`` receives three files: ``gpu-check.log`` (every command and its output),
``summary.txt`` (one line a step) and ``rates.json`` (versions and figures). The work folder
(wheels' prefix, test reports, the example's output) is a temporary folder outside it.

``--device cpu`` rehearses the same steps on a machine without a GPU (tests/test_gpu_check.py
runs it in a Python 3.12 environment made like that machine's): the GPU-marked tests must
then all skip, ``setup()`` picks ``chunked``, the benchmarks train small models on NumPy, and
PyTorch's step is ``n/a`` where PyTorch is not installed.

Exit status: 0 when every step passed, 1 when one did not, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GPU_TESTS = 4  # tests marked gpu; tests/test_gpu_check.py holds this to the suite's count
BUDGET_S = 330  # the whole run, leaving a lent machine's 15 minutes room for a rerun
LOG, SUMMARY, RATES = "gpu-check.log", "summary.txt", "rates.json"
OK, FAIL, NA, NOT_RUN = "ok", "FAIL", "n/a", "not run"


class StepFailed(Exception):
    """A step's check did not hold: the message says what was seen."""


class NotApplicable(Exception):
    """The step does not apply on this machine (PyTorch absent in a rehearsal)."""


@dataclass
class Run:
    """What every step shares: the settings, the environment its commands get, the log."""

    device: str
    wheels: Path
    out: Path
    work: Path
    batch: int
    iterations: int
    warmup: int
    log: object
    install: str = "auto"
    env: dict[str, str] = field(default_factory=dict)
    rates: dict = field(default_factory=dict)
    deadline: float = 0.0

    @property
    def gpu(self) -> bool:
        return self.device == "gpu"

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def call(self, argv: list[str], timeout: float, env: dict[str, str] | None = None,
             check: bool = True) -> subprocess.CompletedProcess:
        """Run ``argv`` in the checkout with the run's environment (plus ``env``); its output
        goes to the log. The whole process group is killed when ``timeout`` (cut to the
        budget) passes. ``check``: a non-zero exit status fails the step."""
        timeout = max(1.0, min(timeout, self.deadline - time.monotonic()))
        self.say(f"$ {shlex.join(argv)}")
        proc = subprocess.Popen(argv, cwd=REPO, env={**self.env, **(env or {})}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            self.say(output.rstrip())
            raise StepFailed(f"no end after {timeout:.0f} s: {shlex.join(argv)[:120]}") from None
        self.say(output.rstrip())
        result = subprocess.CompletedProcess(argv, proc.returncode, output, "")
        if check and proc.returncode != 0:
            raise StepFailed(f"exit status {proc.returncode}: {shlex.join(argv)[:120]}")
        return result

    def python(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return self.call([sys.executable, *args], **kwargs)

    def mpirun(self, ranks: int, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return self.call(["mpirun", "-np", str(ranks), "--oversubscribe", sys.executable,
                          *args], **kwargs)


def last_json(text: str) -> dict:
    """The last line of ``text`` that is a JSON object."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith(("{", "[")):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise StepFailed("no JSON line in the output")


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise StepFailed(what)


# -- the steps --------------------------------------------------------------------------

def install(run: Run, timeout: float) -> str:
    wheels = sorted(run.wheels.glob("*.whl"))
    argv = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
            "--no-cache-dir", "--force-reinstall", "--disable-pip-version-check", "-q"]
    paths = sysconfig.get_paths()
    writable = os.access(paths["purelib"], os.W_OK) and os.access(paths["scripts"], os.W_OK)
    if run.install == "env" or (run.install == "auto" and writable):
        where, bin_dir = f"this environment ({sys.prefix})", Path(paths["scripts"])
    else:  # a read-only environment: a prefix whose lib/ holds Open MPI's libmpi
        prefix = run.work / "prefix"
        argv += ["--prefix", str(prefix)]
        where, bin_dir = f"the prefix {prefix}", prefix / "bin"
        site = sysconfig.get_path("purelib", vars={"base": str(prefix),
                                                   "platbase": str(prefix)})
        run.env["PYTHONPATH"] = os.pathsep.join(filter(None, [site,
                                                               run.env.get("PYTHONPATH")]))
        run.env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [
            str(prefix / "lib"), run.env.get("LD_LIBRARY_PATH")]))
    run.call(argv + [str(w) for w in wheels], timeout)
    run.env["PATH"] = os.pathsep.join([str(bin_dir), run.env.get("PATH", "")])
    found = run.call(["mpirun", "--version"], 20).stdout.splitlines()
    return f"{len(wheels)} wheels into {where}; {found[0] if found else 'mpirun'}"


STACK = r"""
import json, platform, sys
gpu = sys.argv[1] == "gpu"
info = {"python": platform.python_version(), "machine": platform.machine()}
import numpy, chainer, chainermn_rt
from importlib.metadata import version
info.update(numpy=numpy.__version__, chainer=chainer.__version__,
            chainermn_rt=version("chainermn-rt"))
import mpi4py
from mpi4py import MPI
info.update(mpi4py=mpi4py.__version__,
            mpi=MPI.Get_library_version().replace("\0", "").strip().split(",")[0])
try:
    import cupy
except ImportError as err:
    if gpu:
        raise
    info["cupy"] = f"not importable ({err})"
else:
    import cupy.cuda.nccl as nccl  # CuPy does not import it by itself
    rt = cupy.cuda.runtime
    info.update(cupy=cupy.__version__, cuda_runtime=rt.runtimeGetVersion(),
                nccl=nccl.get_version() if nccl.available else None)
    count = rt.getDeviceCount() if gpu else 0
    names = [rt.getDeviceProperties(i)["name"] for i in range(count)]
    info["gpus"] = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    if count:
        info["cuda_driver"] = rt.driverGetVersion()
    info["cudnn_in_cupy"] = int(cupy.__version__.split(".")[0]) < 14
    if gpu and not (count and nccl.available):
        sys.exit(f"CuPy {cupy.__version__}: {count} GPUs, NCCL available {nccl.available}")
try:
    import torch
except ImportError:
    info["torch"] = None
else:
    info.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
                torch_cudnn=torch.backends.cudnn.version())
print(json.dumps(info))
"""


def stack(run: Run, timeout: float) -> str:
    info = last_json(run.python("-c", STACK, run.device, timeout=timeout).stdout)
    run.rates["machine"] = {**info, "date": time.strftime("%Y-%m-%d"),
                            "host": platform.node()}
    gpus = ", ".join(info.get("gpus") or []) or "no GPU"
    return (f"Python {info['python']}, NumPy {info['numpy']}, {info['mpi']}, "
            f"CuPy {info.get('cupy')}, NCCL {info.get('nccl')}, {gpus}, "
            f"torch {info.get('torch')}")


def _setup_rows(proc: subprocess.CompletedProcess) -> list[dict]:
    rows = last_json(proc.stdout)
    expect(isinstance(rows, list) and rows, "setup_rank.py printed no rows")
    return rows


def setup_one_rank(run: Run, timeout: float) -> str:
    (row,) = _setup_rows(run.python("tests/programs/setup_rank.py", timeout=timeout))
    want = ("PureNcclCommunicator", "@cupy:0") if run.gpu else ("ChunkedCommunicator", "@numpy")
    expect((row["communicator"], row["device"]) == want, f"setup() gave {row}; want {want}")
    expect(row["abort_hook"] and row["start_method"] == "forkserver", f"setup() gave {row}")
    return f"{row['communicator']} on {row['device']}"


def mpi_two_ranks(run: Run, timeout: float) -> str:
    cpu = {"CUDA_VISIBLE_DEVICES": ""}  # two ranks would share GPU 0, which NCCL refuses
    each = timeout / 3
    rows = _setup_rows(run.mpirun(2, "tests/programs/setup_rank.py", timeout=each, env=cpu))
    expect([(r["rank"], r["size"], r["communicator"]) for r in rows]
           == [(0, 2, "ChunkedCommunicator"), (1, 2, "ChunkedCommunicator")],
           f"mpirun -np 2 setup_rank.py gave {rows}")
    result = run.work / "allreduce.json"
    run.mpirun(2, "-m", "chainermn_rt", "bench", "allreduce", "--max-bytes", "64K",
               "--repeat", "2", "--communicators", "mpi,naive,chunked", "--output",
               str(result), timeout=each, env=cpu)
    found = json.loads(result.read_text())["results"]
    expect(found and not any(r["wrong"] for r in found), "bench allreduce: wrong elements")
    probe = run.work / "probe"
    probe.mkdir()
    run.mpirun(2, "-m", "chainermn_rt.doctor.probe", "--out", str(probe),
               timeout=each, env=cpu)
    reports = json.loads((probe / "ranks.json").read_text())
    expect(len(reports) == 2 and all(r["allreduce_cpu"]["ok"] for r in reports),
           "the doctor's probe: its allreduce is wrong")
    return f"setup_rank.py, bench allreduce ({len(found)} results), the doctor's probe"


def _pytest(run: Run, name: str, args: list[str], timeout: float) -> dict[str, int]:
    """Run pytest without this machine's own plugins; the counts of its JUnit report."""
    report = run.work / f"{name}.xml"
    env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "CHAINERMN_RT_WHEELS": str(run.wheels)}
    if run.gpu:
        env["CHAINERMN_RT_REQUIRE_GPU"] = "1"
    run.python("-m", "pytest", "-ra", "-p", "no:cacheprovider", f"--junitxml={report}",
               *args, timeout=timeout, env=env, check=False)
    expect(report.is_file(), "pytest wrote no report")
    suite = ElementTree.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def gpu_tests(run: Run, timeout: float) -> str:
    # only the files holding GPU tests: others import what this machine may lack (the decoder)
    files = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py")
                   if "pytest.mark.gpu" in p.read_text())
    counts = _pytest(run, "gpu-tests", ["-m", "gpu", *files], timeout)
    want = {"tests": GPU_TESTS, "passed": GPU_TESTS if run.gpu else 0,
            "skipped": 0 if run.gpu else GPU_TESTS, "failures": 0, "errors": 0}
    expect(counts == want, f"pytest -m gpu: {counts}; want {want}")
    return f"{counts['passed']} passed, {counts['skipped']} skipped of {counts['tests']}"


def fix_set(run: Run, timeout: float) -> str:
    counts = _pytest(run, "fix-set", ["tests/test_chainer_fixes.py"], timeout)
    gpu_only = 0 if run.gpu else 1  # test_batched_kernels_compile_with_this_cupy
    expect(counts["failures"] == counts["errors"] == 0 and counts["skipped"] == gpu_only
           and counts["passed"] > 0, f"tests/test_chainer_fixes.py: {counts}")
    return f"{counts['passed']} passed, {counts['skipped']} skipped"


def _step_args(run: Run) -> list[str]:
    if run.gpu:
        return ["--batch", str(run.batch), "--iterations", str(run.iterations),
                "--warmup", str(run.warmup)]
    return ["--device", "cpu", "--insize", "32", "--batch", "2", "--iterations", "1",
            "--warmup", "1", "--n-class", "10"]


def chainer_step(run: Run, timeout: float) -> str:
    found = last_json(run.python("bench/resnet50_gpu.py", "--framework", "chainer",
                                 *_step_args(run), timeout=timeout).stdout)
    run.rates["chainer"] = found
    return f"{found['images_per_s']} images/s at batch {found['batch']} ({found['what']})"


def torch_step(run: Run, timeout: float) -> str:
    if run.python("-c", "import torch", timeout=60, check=False).returncode != 0:
        if run.gpu:
            raise StepFailed("PyTorch does not import")
        raise NotApplicable("PyTorch is not installed here")
    found = last_json(run.python("bench/resnet50_gpu.py", "--framework", "torch",
                                 *_step_args(run), timeout=timeout).stdout)
    run.rates["torch"] = found
    return f"{found['images_per_s']} images/s at batch {found['batch']} ({found['what']})"


def bench_train(run: Run, timeout: float) -> str:
    result = run.work / "train.json"
    size = ["--model", "resnet50", "--batchsize", str(run.batch), "--iterations",
            str(max(1, run.iterations // 2)), "--warmup", str(run.warmup)] if run.gpu else \
        ["--model", "mlp", "--batchsize", "8", "--iterations", "3", "--warmup", "1"]
    run.mpirun(1, "-m", "chainermn_rt", "bench", "train", *size, "--output", str(result),
               timeout=timeout)
    found = json.loads(result.read_text())
    want = ("gpu", "pure_nccl") if run.gpu else ("cpu", "chunked")
    expect((found["device"], found["communicator"]) == want,
           f"bench train ran on {found['device']} with {found['communicator']}; want {want}")
    run.rates["bench_train"] = found
    return (f"{found['images_per_s']:.1f} images/s, {found['communicator']}, averaging "
            f"{found['averaging_share']:.1%} of the step")


def doctor(run: Run, timeout: float) -> str:
    proc = run.python("-m", "chainermn_rt", "doctor", "--json", timeout=timeout, check=False)
    checks = {c["name"]: c for c in last_json_block(proc.stdout)}
    # The rest (CUDA-aware MPI, UCX, PMIx, pins) describes the image, not this machine.
    wanted = ("mpi", "mpi4py", "imports") + (("nccl", "cupy", "cudnn") if run.gpu else ())
    bad = [f"{n}: {checks[n]['status']} {checks[n]['reason']}" if n in checks else f"{n}: absent"
           for n in wanted if checks.get(n, {}).get("status") != "PASS"]
    expect(not bad, "; ".join(bad))
    run.rates["doctor"] = {n: f"{c['status']} {c['reason']}" for n, c in checks.items()}
    return "; ".join(f"{n} {checks[n]['reason']}" for n in wanted if n in checks)[:300]


def last_json_block(text: str):
    """The JSON document that ends ``text`` (``doctor --json`` prints one indented)."""
    start = text.rfind("\n[")
    try:
        return json.loads(text[start + 1 if start >= 0 else 0:])
    except json.JSONDecodeError:
        raise StepFailed("doctor --json printed no JSON list") from None


def example(run: Run, timeout: float) -> str:
    size = ["--batchsize", "32", "--iterations", "8", "--log-every", "4", "--n-synthetic",
            "256"] if run.gpu else \
        ["--insize", "32", "--batchsize", "4", "--iterations", "2", "--log-every", "2",
         "--n-synthetic", "16", "--n-class", "10"]
    proc = run.python("examples/train_imagenet.py", "--synthetic", "--no-progress", "--out",
                      str(run.work / "example"), *size, timeout=timeout)
    line = [x for x in proc.stdout.splitlines() if x.startswith("throughput:")]
    expect(bool(line) and "parameters sha256" in proc.stdout, "no throughput line")
    want = "PureNcclCommunicator" if run.gpu else "ChunkedCommunicator"
    expect(want in proc.stdout, f"the example did not use {want}")
    run.rates["example"] = line[-1]
    return line[-1] + " (synthetic images made on the CPU: a check, not a rate)"


DALI_NEEDS = "import nvidia.dali, PIL; from chainermn_rt.data import jpeg"


def dali_loader(run: Run, timeout: float) -> str:
    probe = run.python("-c", DALI_NEEDS, timeout=60, check=False)
    if probe.returncode != 0:
        lines = probe.stdout.strip().splitlines()
        raise NotApplicable(f"{lines[-1] if lines else 'it does not import'} (DALI: the gpu-dali "
                            "image, or pip install 'chainermn-rt[dali]')")
    size = ["--images", "512", "--batch", "64", "--threads", "4"] if run.gpu else \
        ["--images", "64", "--batch", "8", "--threads", "1"]
    found = last_json(run.python("bench/dali_gpu.py", "--device", run.device, *size,
                                 timeout=timeout).stdout)
    run.rates["dali"] = found
    return (f"{found['images_per_s']} images/s ({found['device']}, batch {found['batch']}, "
            f"{found['threads']} threads), {found['zero_copy_batches']} batches without a copy, "
            f"{found['validation_images']} validation images once")


def nccl_net(run: Run, timeout: float) -> str:
    if not run.gpu:
        raise NotApplicable("no GPU: NCCL chooses its network when a communicator starts")
    found = last_json(run.python("tests/programs/nccl_net.py", timeout=timeout).stdout)
    run.rates["nccl_net"] = found
    expect(found["network"], f"NCCL logged no network: {found}")
    plugin = "; ".join(found["plugin_lines"]) or "no plugin lines"
    return f"NCCL {found['nccl']} chose {', '.join(found['network'])} ({plugin})"


@dataclass(frozen=True)
class Step:
    name: str
    timeout: float  # seconds, cut to what is left of the budget
    run: Callable[[Run, float], str]


STEPS = (
    Step("install", 60, install),
    Step("stack", 30, stack),
    Step("setup", 30, setup_one_rank),
    Step("doctor", 30, doctor),
    Step("nccl-net", 30, nccl_net),
    Step("mpi", 60, mpi_two_ranks),
    Step("gpu-tests", 120, gpu_tests),
    Step("chainer-step", 90, chainer_step),
    Step("torch-step", 60, torch_step),
    Step("bench-train", 60, bench_train),
    Step("fix-set", 90, fix_set),
    Step("example", 60, example),
    Step("dali", 90, dali_loader),
)


# -- the run ----------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """One line for a bad argument, exit 2 (as chainermn_rt.arguments.Parser, which is not
    installed yet when this starts)."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message.removeprefix('argument ')}\n")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text}; allowed: 1 or more")
    return int(text)


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"{text!r}; allowed: {', '.join(choices)}")
        return text
    return parse


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "gpu-check",
                        help="log, summary and rates (default: build/gpu-check)")
    parser.add_argument("--wheels", type=Path, default=REPO / "build" / "offline-wheels",
                        help="make offline-wheels' folder (default: build/offline-wheels)")
    parser.add_argument("--device", type=_one_of("gpu", "cpu"), default="gpu",
                        help="gpu (default) or cpu: rehearse on a machine without a GPU")
    parser.add_argument("--steps", help="comma-separated names to run (default: all; install "
                                        "always runs first)")
    parser.add_argument("--budget", type=_positive, default=BUDGET_S,
                        help="seconds for the whole run (default: %(default)s)")
    parser.add_argument("--batch", type=_positive, default=64, help="images per step")
    parser.add_argument("--iterations", type=_positive, default=50, help="timed steps")
    parser.add_argument("--warmup", type=_positive, default=10,
                        help="untimed steps first (CuPy compiles its kernels, cuDNN tunes)")
    parser.add_argument("--install", type=_one_of("auto", "env", "prefix"), default="auto",
                        help="into this Python's environment, or a prefix in the work folder "
                             "(auto: the environment when it is writable)")
    parser.add_argument("--dry-run", action="store_true", help="list the steps; run nothing")
    args = parser.parse_args(argv)
    names = [s.name for s in STEPS]
    chosen = names if args.steps is None else ["install"] + [
        n.strip() for n in args.steps.split(",") if n.strip() != "install"]
    unknown = [n for n in chosen if n not in names]
    if unknown:
        parser.error(f"--steps: {unknown[0]!r}; allowed: {', '.join(names)}")
    args.steps = [s for s in STEPS if s.name in chosen]
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out: {args.out} is not a folder; allowed: a folder (made if missing)")
    if not args.dry_run and not list(args.wheels.glob("chainermn_rt-*.whl")):
        parser.error(f"--wheels: {args.wheels} holds no chainermn_rt wheel; allowed: the folder "
                     "`make offline-wheels` fills (carry build/offline-wheels)")
    return args


def summary_line(result: dict) -> str:
    return (f"{result['status']:<8} {result['step']:<13} {result['seconds']:5.0f} s  "
            f"{result['detail']}")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.dry_run:
        for step in args.steps:
            print(f"{step.name:<13} {step.timeout:4.0f} s  {step.run.__name__}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work, \
            open(args.out / LOG, "w", encoding="utf-8") as log:
        run = Run(args.device, args.wheels.resolve(), args.out, Path(work), args.batch,
                  args.iterations, args.warmup, log, args.install,
                  deadline=started + args.budget)
        run.env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONNOUSERSITE": "1",
                   "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        if run.gpu:  # GPU 0, whether or not this machine has /dev/nvidia0 (devices.py counts)
            run.env.setdefault("CUDA_VISIBLE_DEVICES", "0")
        results, failed = [], set()
        for step in args.steps:
            begun = time.monotonic()
            run.say(f"== {step.name}")
            if begun >= run.deadline:
                status, detail = NOT_RUN, f"the {args.budget} s budget is spent"
            elif "install" in failed:
                status, detail = NOT_RUN, "install failed"
            else:
                try:
                    status, detail = OK, step.run(run, step.timeout)
                except NotApplicable as why:
                    status, detail = NA, str(why)
                except (StepFailed, OSError, KeyError, ValueError, TypeError) as err:
                    status, detail = FAIL, f"{type(err).__name__}: {err}"
            if status in (FAIL, NOT_RUN):
                failed.add(step.name)
            results.append({"step": step.name, "status": status,
                            "seconds": round(time.monotonic() - begun, 1), "detail": detail})
            run.say(summary_line(results[-1]))
        total = round(time.monotonic() - started, 1)
        text = "".join(summary_line(r) + "\n" for r in results) + \
            summary_line({"step": "all", "status": "", "seconds": total,
                          "detail": f"device {args.device}, budget {args.budget} s"}) + "\n"
        (args.out / SUMMARY).write_text(text)
        run.rates["steps"] = results
        (args.out / RATES).write_text(json.dumps(run.rates, indent=1) + "\n")
        run.say("== summary\n" + text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
