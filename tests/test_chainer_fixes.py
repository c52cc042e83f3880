"""The modern-stack fixes of chainer 7.8.1 (chainermn_rt/compat).

Each behaviour test below fails on the pristine 7.8.1 release with this venv's stack
(Python 3.11, numpy 2.4, setuptools >= 82); the sdist tests check the fix set itself
against the pristine sdist that ``make venv`` keeps under build/wheels/sdist.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from chainermn_rt.compat import build_chainer, patched_build
from chainermn_rt.compat import chainer_fixes as fixes

from conftest import PYTHON, REPO, json_objects, run_mpi

# `make venv`'s wheels and pristine sdist; tests/gpu_check.py points it at the offline set
WHEELS = Path(os.environ.get("CHAINERMN_RT_WHEELS") or REPO / "build" / "wheels")


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs)


@pytest.fixture
def pristine(tmp_path: Path) -> Path:
    """A fresh copy of the unpacked, unpatched chainer 7.8.1 sdist."""
    sdist = build_chainer.sdist_path(WHEELS)
    if not sdist.is_file():
        pytest.fail(f"{sdist} is missing: run `make venv`", pytrace=False)
    return build_chainer.unpack(sdist, tmp_path)


# --- the fix set against the pristine sdist --------------------------------------------

def test_every_fix_applies_exactly_once_to_the_pristine_sdist(pristine: Path):
    before = {fix.path: (pristine / fix.path).read_text() for fix in fixes.FIXES}
    for fix in fixes.FIXES:
        assert before[fix.path].count(fix.old) == 1, f"{fix.name}: old text not unique"
        assert fix.reason, f"{fix.name}: no reason"
    assert len({fix.name for fix in fixes.FIXES}) == len(fixes.FIXES)

    assert fixes.apply_all(pristine) == [fix.name for fix in fixes.FIXES]
    for fix in fixes.FIXES:
        assert fix.new == "" or fix.new in (pristine / fix.path).read_text(), fix.name
    marker: dict = {}
    exec((pristine / fixes.MARKER_MODULE).read_text(), marker)  # noqa: S102 - our own output
    assert marker["APPLIED"] == tuple(fix.name for fix in fixes.FIXES)
    assert marker["BUILD"] == fixes.wheel_version()


def test_fixes_refuse_an_already_patched_tree(pristine: Path):
    fixes.apply_all(pristine)
    with pytest.raises(fixes.FixError, match="setup-no-pkg-resources: the old text occurs 0"):
        fixes.apply_all(pristine)


def test_fixes_refuse_a_different_tree_and_write_nothing(pristine: Path):
    iterator = pristine / "chainer/iterators/multiprocess_iterator.py"
    iterator.write_text(iterator.read_text().replace("thread.setDaemon(True)", "pass"))
    setup_py = (pristine / "setup.py").read_text()
    with pytest.raises(fixes.FixError, match="multiprocess-iterator-daemon"):
        fixes.apply_all(pristine)
    assert (pristine / "setup.py").read_text() == setup_py  # the earlier fixes were not written
    assert not (pristine / fixes.MARKER_MODULE).exists()


def test_patched_setup_py_needs_no_pkg_resources(pristine: Path, tmp_path: Path):
    # This venv has setuptools >= 82: no pkg_resources, as in pip's build environments.
    assert importlib.util.find_spec("pkg_resources") is None, "needs setuptools >= 82 here"
    egg_base = tmp_path / "egg"
    egg_base.mkdir()
    argv = [PYTHON, "setup.py", "-q", "egg_info", "--egg-base", str(egg_base)]
    stock = _run(argv, cwd=pristine)
    assert stock.returncode != 0 and "pkg_resources" in stock.stderr
    fixes.apply_all(pristine)
    patched = _run(argv, cwd=pristine)
    assert patched.returncode == 0, patched.stderr
    assert "tests_require" not in patched.stderr  # "Unknown distribution option" since 72
    pkg_info = (egg_base / "chainer.egg-info" / "PKG-INFO").read_text()
    assert f"Version: {fixes.wheel_version()}\n" in pkg_info


# --- the installed build ----------------------------------------------------------------

def test_the_installed_chainer_is_the_current_patched_build():
    assert importlib.metadata.version("chainer") == fixes.wheel_version(), \
        "stale chainer build: run `make venv`"
    assert patched_build() == fixes.wheel_version()
    import chainer._chainermn_rt_fixes as marker

    assert marker.APPLIED == tuple(fix.name for fix in fixes.FIXES)
    assert build_chainer.is_current(WHEELS / build_chainer.wheel_name())
    # chainer.testing parses requirements with packaging now.
    assert "packaging" in importlib.metadata.requires("chainer")


def test_pyproject_pins_the_release_the_fixes_are_written_for():
    pins = re.findall(r'"chainer==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert pins == [fixes.CHAINER_VERSION]


def test_is_current_rejects_a_wheel_with_other_fixes(tmp_path: Path):
    wheel = tmp_path / build_chainer.wheel_name()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(fixes.MARKER_MODULE, fixes.marker_source(fixes.FIXES[:-1]))
    assert not build_chainer.is_current(wheel)
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(fixes.MARKER_MODULE, fixes.marker_source(fixes.FIXES))
    assert build_chainer.is_current(wheel)


def test_build_reuses_a_current_wheel_without_downloading(tmp_path: Path):
    current = WHEELS / build_chainer.wheel_name()
    (tmp_path / current.name).write_bytes(current.read_bytes())
    assert build_chainer.main(["--out", str(tmp_path)]) == 0
    assert not (tmp_path / "sdist").exists()


def test_builder_needs_only_the_standard_library():
    # -S: no site-packages, as in a fresh image before anything is installed.
    proc = _run([sys.executable, "-S", "-m", "chainermn_rt.compat.build_chainer", "--help"],
                cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "--out" in proc.stdout


# --- behaviour that fails on pristine chainer 7.8.1 -------------------------------------

def test_import_is_warning_free():
    """setuptools >= 74/82 (numpy.distutils, pkg_resources) and their DeprecationWarnings."""
    code = ("import chainer, chainermn, chainer.testing, chainer.gradient_check, "
            "chainermn.communicators._memory_utility")
    proc = _run([PYTHON, "-W", "error", "-c", code])
    assert proc.returncode == 0, proc.stderr


def test_macos_blas_check_survives_broken_numpy_distutils():
    """On macOS chainer's import-time check called numpy.distutils, which setuptools >= 74
    breaks: it must now give up quietly (run here by pretending to be macOS)."""
    code = ("import sys, chainer._environment_check as check\n"
            "sys.platform = 'darwin'\n"
            "check._check_osx_numpy_backend()\n")
    proc = _run([PYTHON, "-W", "error", "-c", code])
    assert proc.returncode == 0, proc.stderr


def test_as_strided_without_np_sctypes():
    import chainer
    import chainer.functions as F

    x = chainer.Variable(np.arange(6, dtype=np.float32))
    y = F.as_strided(x, (2, 2), (1, 1))  # overlapping windows [0, 1], [1, 2]
    np.testing.assert_array_equal(y.array, [[0, 1], [1, 2]])
    F.sum(y).backward()
    np.testing.assert_array_equal(x.grad, [1, 2, 1, 0, 0, 0])


def test_resize_images_without_numpy_float():
    import chainer.functions as F

    x = np.array([[[[0, 2], [4, 6]]]], dtype=np.float32)
    y = F.resize_images(x, (3, 3))  # bilinear, corners aligned: midpoints in between
    np.testing.assert_allclose(y.array[0, 0], [[0, 1, 2], [2, 3, 4], [4, 5, 6]])
    y = F.resize_images(x, (4, 4), mode="nearest")
    np.testing.assert_array_equal(y.array[0, 0, :, 0], [0, 0, 4, 4])


def test_categorical_log_prob_with_tuple_meshgrid():
    import chainer
    import chainer.distributions as D

    p = np.array([[0.2, 0.8], [0.5, 0.5], [0.9, 0.1]], dtype=np.float32)
    x = np.array([1, 0, 0], dtype=np.int32)
    dist = D.Categorical(p)
    expected = np.log([0.8, 0.5, 0.9])
    np.testing.assert_allclose(dist.log_prob(x).array, expected, rtol=1e-6)
    np.testing.assert_allclose(dist.log_prob(chainer.Variable(x)).array, expected, rtol=1e-6)


def test_multiprocess_iterator_without_set_daemon():
    import chainer

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        iterator = chainer.iterators.MultiprocessIterator(list(range(6)), 2, repeat=False,
                                                          shuffle=False, n_processes=1)
        try:
            assert [iterator.next() for _ in range(3)] == [[0, 1], [2, 3], [4, 5]]
        finally:
            iterator.finalize()


def test_no_cudnn_advice_on_cupy_14(monkeypatch):
    """check_cuda_available() on a CUDA setup without cuDNN: the advice to reinstall CuPy
    only where CuPy can bind cuDNN (CuPy 13 and before). Module state is set as a GPU machine
    would have it (no CuPy here)."""
    import chainer.backends.cuda as cuda

    monkeypatch.setattr(cuda, "available", True)
    monkeypatch.setattr(cuda, "cudnn_enabled", False)
    monkeypatch.setattr(cuda, "_cudnn_disabled_by_user", False, raising=False)
    for major, advice in ((14, 0), (13, 1)):
        monkeypatch.setattr(cuda, "_cupy_major", major, raising=False)
        monkeypatch.delattr(cuda.check_cuda_available, "_already_warned", raising=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cuda.check_cuda_available()
        assert sum("reinstall CuPy" in str(w.message) for w in caught) == advice, major


def test_testing_requirements_without_pkg_resources():
    from chainer import testing
    from chainer.testing import doctest_helper

    def case():
        pass

    assert not getattr(testing.with_requires("numpy>=1.10")(case), "__unittest_skip__", False)
    assert testing.with_requires("numpy<1")(case).__unittest_skip__
    assert testing.without_requires("numpy>=1.10")(case).__unittest_skip__
    assert testing.with_requires("no-such-distribution")(case).__unittest_skip__
    assert doctest_helper.skipif_requires_satisfied("numpy>=1") is True


# chainermn.communicators._memory_utility imports mpi4py.MPI, i.e. initialises MPI: that
# happens in a child process, since a singleton MPI leaves PMIx variables in the C
# environment that break every later mpirun started from the pytest process.
UNPACK_PARAMS = """
import chainer, numpy as np
from chainermn.communicators import _memory_utility

class HostBuffer:
    \"\"\"Stands in for DeviceMemory (CuPy only): the same to_device() on host bytes.\"\"\"

    def __init__(self, values):
        self.bytes = values.view(np.uint8)

    def to_device(self, dst, size, offset=0, stream=None):
        dst.view(np.uint8).reshape(-1)[:size] = self.bytes[offset:offset + size]

param = chainer.Parameter(np.zeros(3, dtype=np.float32))
param.grad = np.zeros(3, dtype=np.float32)
sent = np.array([1.5, -2.0, 3.25], dtype=np.float16)
_memory_utility.unpack_params([param], "grad", HostBuffer(sent), np.float16, False)
np.testing.assert_array_equal(param.grad, sent.astype(np.float32))
print("unpack ok")
"""


def test_unpack_params_converts_dtype_without_copy_false():
    """numpy 2's copy=False refuses the float32 -> float16 conversion ChainerMN asks for."""
    proc = _run([PYTHON, "-W", "error", "-c", UNPACK_PARAMS])
    assert proc.returncode == 0 and "unpack ok" in proc.stdout, proc.stderr


def _memory_utility_source() -> str:
    spec = importlib.util.find_spec("chainermn.communicators._memory_utility")
    return Path(spec.origin).read_text()


def test_batched_kernels_include_cuda_fp16():
    """CuPy 14's NVRTC no longer defines ``half`` through carray.cuh alone."""
    source = _memory_utility_source()
    for kernel in ("cupy_batched_pack_params(", "cupy_batched_unpack_params("):
        assert ("#include <cupy/carray.cuh>\n#include <cuda_fp16.h>\n#define NCCL_FLOAT16  6\n"
                "#define NCCL_FLOAT32  7\n#define NCCL_FLOAT64  8\n    extern \"C\" __global__\n"
                f"    void {kernel}") in source, kernel


@pytest.mark.gpu
def test_batched_kernels_compile_with_this_cupy():
    code = ("from chainermn.communicators import _memory_utility as m\n"
            "m._cupy_batched_pack_params().compile()\n"
            "m._cupy_batched_unpack_params().compile()\n")
    proc = _run([PYTHON, "-c", code])
    assert proc.returncode == 0, proc.stderr


@pytest.mark.mpi
def test_multi_node_iterator_on_non_root_ranks(tmp_path: Path):
    """numpy >= 2.4: int() of the broadcast shape-(1,) size array raised on rank 1."""
    proc = run_mpi(2, ["-W", "error", "tests/mpi/chainermn_api.py", "naive", str(tmp_path),
                       "multi_node_iterators"], timeout=120)
    assert set(re.findall(r"ok (\w+) rank=(\d)", proc.stdout)) == {
        ("multi_node_iterators", "0"), ("multi_node_iterators", "1")}


def _aggregator_ranks(check: str, tmp_path: Path) -> list[dict]:
    """Run tests/programs/aggregator_rank.py CHECK on 2 ranks: each rank's result, by rank."""
    proc = run_mpi(2, ["-W", "error", "tests/programs/aggregator_rank.py", check,
                       str(tmp_path)], timeout=120)
    results = sorted((obj for obj in json_objects(proc.stdout) if obj.get("check") == check),
                     key=lambda obj: obj["rank"])
    assert [obj["rank"] for obj in results] == [0, 1], proc.stdout
    return results


@pytest.mark.mpi
def test_observation_aggregator_averages_numpy_observations_over_ranks(tmp_path: Path):
    """Without ChainerX, Variable.to_device('native') raised on every Variable observation
    (main/loss on NumPy). Rank r reports (r + 1) * i in iteration i: the mean is 1.5 * i."""
    for result in _aggregator_ranks("aggregator", tmp_path):
        assert result["iteration"] == 4
        # main/loss, a Variable, aggregated every iteration.
        np.testing.assert_allclose(result["loss_mean"], [1.5, 3.0, 4.5, 6.0])
        # main/x, a bare NumPy array, every 2nd iteration over both iterations since the last.
        assert result["x_mean"][0::2] == [None, None], result
        np.testing.assert_allclose(result["x_mean"][1::2], [2.25, 5.25])


@pytest.mark.mpi
def test_multi_node_early_stopping_trigger_on_cpu(tmp_path: Path):
    """The mean loss over ranks (10 + i: rank 0's improves, rank 1's worsens) is best at
    iteration 1: with patience 2 both ranks stop after iteration 3, long before max_trigger."""
    for result in _aggregator_ranks("early_stopping", tmp_path):
        assert result["iteration"] == 3, result
        assert result["loss_aggregated"] == pytest.approx(13.0)


# --- communicators registered by other packages ----------------------------------------

PLUGIN = '''
class Communicator:
    """A communicator class as another package would register it."""

    def __init__(self, mpi_comm):
        self.mpi_comm = mpi_comm
        self.config = {}

    def set_config(self, name, value=True, **kwargs):
        self.config[name] = value
'''

PLUGIN_USER = '''
import chainermn

comm = chainermn.create_communicator("plugged", mpi_comm="the-mpi-comm")
assert type(comm).__module__ == "rt_test_plugin", type(comm)
assert comm.mpi_comm == "the-mpi-comm" and comm.config == {"batched_copy": True}, vars(comm)
try:
    chainermn.create_communicator("no-such-communicator", mpi_comm="the-mpi-comm")
except ValueError as err:
    assert "no-such-communicator" in str(err) and "plugged" in str(err), err
else:
    raise AssertionError("an unknown name must raise ValueError")
print("plugin ok")
'''


def test_create_communicator_finds_entry_points(tmp_path: Path):
    (tmp_path / "rt_test_plugin.py").write_text(PLUGIN)
    dist_info = tmp_path / "rt_test_plugin-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: rt-test-plugin\n"
                                        "Version: 1.0\n")
    (dist_info / "entry_points.txt").write_text(
        f"[{fixes.COMMUNICATOR_GROUP}]\nplugged = rt_test_plugin:Communicator\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    proc = _run([PYTHON, "-W", "error", "-c", PLUGIN_USER], env=dict(os.environ, PYTHONPATH=path))
    assert proc.returncode == 0, proc.stderr
    assert "plugin ok" in proc.stdout


def test_chainermn_rt_registers_its_communicators():
    names = {ep.name for ep in importlib.metadata.entry_points(group=fixes.COMMUNICATOR_GROUP)}
    assert "chunked" in names
