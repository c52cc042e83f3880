"""The modern-stack fixes for chainer 7.8.1, as data, and the code that applies them to its sdist.

Each :class:`Fix` replaces one exact piece of text in one file of the unpacked
``chainer-7.8.1`` source release. :func:`apply_all` refuses to run on anything
else: a fix whose old text is not found exactly once raises :class:`FixError`
before any file is written, so a different sdist can never pass silently.

Standard library only: ``build_chainer`` imports this before anything is installed.

Example::

    >>> from pathlib import Path
    >>> from chainermn_rt.compat import chainer_fixes
    >>> names = chainer_fixes.apply_all(Path("/tmp/chainer-7.8.1"))  # doctest: +SKIP
    >>> names[0]  # doctest: +SKIP
    'setup-no-pkg-resources'
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

# The chainer release these fixes are written for, and the sha256 of its sdist on PyPI.
CHAINER_VERSION = "7.8.1"
SDIST_SHA256 = "179f06176f8d7a42385bc7811956db04e68213cfe30f5081491b9e2b6ff70de8"
# Module written into the patched package: ``chainer._chainermn_rt_fixes.APPLIED``.
MARKER_MODULE = "chainer/_chainermn_rt_fixes.py"
# Entry-point group other packages use to register ChainerMN communicators by name.
COMMUNICATOR_GROUP = "chainermn.communicators"


@dataclass(frozen=True)
class Fix:
    """Replace ``old`` (found exactly once) by ``new`` in ``path`` of the sdist."""

    name: str
    path: str
    old: str
    new: str
    reason: str


class FixError(RuntimeError):
    """The source tree is not the chainer sdist these fixes were written for."""


def wheel_version() -> str:
    """The version of the patched wheel, e.g. ``'7.8.1+rt0123abcd'``."""
    return f"{CHAINER_VERSION}+{LOCAL_LABEL}"


_ENV_CHECK = "chainer/_environment_check.py"

_SOURCE_FIXES: tuple[Fix, ...] = (
    # --- building -------------------------------------------------------------------------
    Fix("setup-no-pkg-resources", "setup.py",
        "import os\nimport pkg_resources\nimport sys\n",
        "import os\nimport sys\nfrom importlib import metadata as _metadata\n",
        "setuptools>=82 ships no pkg_resources, which setup.py imports: the build fails"),
    Fix("setup-find-distribution", "setup.py",
        """        try:
            return pkg_resources.get_distribution(pkg)
        except pkg_resources.DistributionNotFound:
            pass""",
        """        try:
            return _metadata.distribution(pkg)
        except _metadata.PackageNotFoundError:
            pass""",
        "setuptools>=82: setup.py's check for old ChainerMN used pkg_resources.get_distribution"),
    Fix("setup-no-tests-require", "setup.py",
        "    tests_require=tests_require,\n",
        "",
        "setuptools>=72 dropped tests_require: 'Unknown distribution option' at build time"),
    Fix("setup-requires-packaging", "setup.py",
        "        'setuptools',\n        'typing_extensions',\n",
        "        'setuptools',\n        'packaging',\n        'typing_extensions',\n",
        "chainer.testing now parses requirements with packaging instead of pkg_resources"),
    # --- import time ----------------------------------------------------------------------
    Fix("env-check-no-import-time-deprecated", _ENV_CHECK,
        "import numpy.distutils.system_info\nimport pkg_resources\n",
        "from importlib import metadata as _metadata\n",
        "setuptools>=74 breaks numpy.distutils, >=82 drops pkg_resources; both warn "
        "DeprecationWarning at import before that"),
    Fix("env-check-osx-lazy", _ENV_CHECK,
        "    blas_opt_info = numpy.distutils.system_info.get_info('blas_opt')\n",
        "    try:  # best effort: numpy.distutils is deprecated, broken by setuptools>=74 and\n"
        "        # gone with Python 3.12; it is imported here (macOS only), never at import\n"
        "        with warnings.catch_warnings():\n"
        "            warnings.simplefilter('ignore')\n"
        "            import numpy.distutils.system_info\n"
        "            blas_opt_info = numpy.distutils.system_info.get_info('blas_opt')\n"
        "    except Exception:\n"
        "        return\n",
        "setuptools>=74 breaks numpy.distutils (get_info raises): the macOS BLAS check at "
        "import chainer crashed"),
    Fix("env-check-optional-deps", _ENV_CHECK,
        """            try:
                pkg_resources.require(requirement)
                found = True
            except pkg_resources.DistributionNotFound:
                continue
            except pkg_resources.VersionConflict:
                msg = '''
--------------------------------------------------------------------------------
{name} ({pkg}) version {version} may not be compatible with this version of Chainer.
Please consider installing the supported version by running:
  $ pip install '{requirement}'

See the following page for more details:
  {help}
--------------------------------------------------------------------------------
'''  # NOQA
                warnings.warn(msg.format(
                    name=name, pkg=pkg,
                    version=pkg_resources.get_distribution(pkg).version,
                    requirement=requirement, help=help))
                found = True
            except Exception:
""",
        """            # chainermn-rt: presence only. The version specifier names CuPy 7, while this
            # stack runs CuPy 13/14 on purpose; pkg_resources is gone in setuptools>=82.
            try:
                _metadata.distribution(pkg)
                found = True
            except _metadata.PackageNotFoundError:
                continue
            except Exception:
""",
        "setuptools>=82: the optional-dependency check called pkg_resources.require at import"),
    Fix("testing-helper-requirements", "chainer/testing/helper.py",
        "import pkg_resources\n",
        '''from importlib import metadata as _metadata


def _requirements_satisfied(*requirements):
    """True when every requirement (e.g. ``'numpy>=1.10'``) is installed."""
    # chainermn-rt: replaces pkg_resources.WorkingSet().require (gone in setuptools>=82)
    from packaging.requirements import Requirement

    for text in requirements:
        req = Requirement(text)
        try:
            version = _metadata.version(req.name)
        except _metadata.PackageNotFoundError:
            return False
        if not req.specifier.contains(version, prereleases=True):
            return False
    return True

''',
        "setuptools>=82: chainer.testing (imported by chainer.gradient_check) imports "
        "pkg_resources"),
    Fix("testing-helper-with-requires", "chainer/testing/helper.py",
        """    ws = pkg_resources.WorkingSet()
    try:
        ws.require(*requirements)
        skip = False
    except pkg_resources.ResolutionError:
        skip = True
""",
        "    skip = not _requirements_satisfied(*requirements)\n",
        "setuptools>=82: testing.with_requires used pkg_resources.WorkingSet"),
    Fix("testing-helper-without-requires", "chainer/testing/helper.py",
        """    ws = pkg_resources.WorkingSet()
    try:
        ws.require(*requirements)
        skip = True
    except pkg_resources.ResolutionError:
        skip = False
""",
        "    skip = _requirements_satisfied(*requirements)\n",
        "setuptools>=82: testing.without_requires used pkg_resources.WorkingSet"),
    Fix("doctest-helper-requirements", "chainer/testing/doctest_helper.py",
        """import pkg_resources
""",
        """from chainer.testing.helper import _requirements_satisfied
""",
        "setuptools>=82: chainer.testing.doctest_helper imports pkg_resources"),
    Fix("doctest-helper-skipif", "chainer/testing/doctest_helper.py",
        """    ws = pkg_resources.WorkingSet()
    try:
        ws.require(*requirements)
    except pkg_resources.ResolutionError:
        return False
""",
        """    if not _requirements_satisfied(*requirements):
        return False
""",
        "setuptools>=82: skipif_requires_satisfied used pkg_resources.WorkingSet"),
    Fix("as-strided-sctypes-int", "chainer/functions/array/as_strided.py",
        "index_dtype = {t().itemsize: t for t in np.sctypes['int']}\n",
        "index_dtype = {t().itemsize: t for t in (np.int8, np.int16, np.int32, np.int64)}\n",
        "numpy>=2.0 removed np.sctypes: AttributeError at import chainer"),
    Fix("as-strided-sctypes-float", "chainer/functions/array/as_strided.py",
        "        if gy.dtype not in np.sctypes['float']:\n",
        "        if gy.dtype not in (np.float16, np.float32, np.float64, np.longdouble):\n",
        "numpy>=2.0 removed np.sctypes: AttributeError in F.as_strided backward"),
    Fix("resize-images-numpy-float", "chainer/functions/array/resize_images.py",
        """        if align_corners:
            v = xp.linspace(0, H - 1, num=out_H, dtype=numpy.float)
            u = xp.linspace(0, W - 1, num=out_W, dtype=numpy.float)
        else:
            y_scale = H / out_H
            x_scale = W / out_W
            v = (xp.arange(out_H, dtype=numpy.float) + 0.5) * y_scale - 0.5
            v = xp.maximum(v, 0)
            u = (xp.arange(out_W, dtype=numpy.float) + 0.5) * x_scale - 0.5
            u = xp.maximum(u, 0)
        vw, v = xp.modf(v)
        uw, u = xp.modf(u)
    elif mode == 'nearest':
        y_scale = H / out_H
        x_scale = W / out_W
        v = xp.minimum(xp.floor(
            xp.arange(out_H, dtype=numpy.float) * y_scale), H - 1)
        u = xp.minimum(xp.floor(
            xp.arange(out_W, dtype=numpy.float) * x_scale), W - 1)
""",
        """        if align_corners:
            v = xp.linspace(0, H - 1, num=out_H, dtype=numpy.float64)
            u = xp.linspace(0, W - 1, num=out_W, dtype=numpy.float64)
        else:
            y_scale = H / out_H
            x_scale = W / out_W
            v = (xp.arange(out_H, dtype=numpy.float64) + 0.5) * y_scale - 0.5
            v = xp.maximum(v, 0)
            u = (xp.arange(out_W, dtype=numpy.float64) + 0.5) * x_scale - 0.5
            u = xp.maximum(u, 0)
        vw, v = xp.modf(v)
        uw, u = xp.modf(u)
    elif mode == 'nearest':
        y_scale = H / out_H
        x_scale = W / out_W
        v = xp.minimum(xp.floor(
            xp.arange(out_H, dtype=numpy.float64) * y_scale), H - 1)
        u = xp.minimum(xp.floor(
            xp.arange(out_W, dtype=numpy.float64) * x_scale), W - 1)
""",
        "numpy>=1.24 removed numpy.float: AttributeError in F.resize_images"),
    Fix("categorical-log-prob-index", "chainer/distributions/categorical.py",
        """        if isinstance(x, chainer.Variable):
            return self.log_p[mg + [x.data.astype(numpy.int32)]]
        else:
            return self.log_p[mg + [x.astype(numpy.int32)]]
""",
        """        if isinstance(x, chainer.Variable):
            return self.log_p[tuple(mg) + (x.data.astype(numpy.int32),)]
        else:
            return self.log_p[tuple(mg) + (x.astype(numpy.int32),)]
""",
        "numpy>=2.0 meshgrid returns a tuple (TypeError on tuple + list); a list index is one "
        "array index since numpy 1.23"),
    Fix("multiprocess-iterator-daemon", "chainer/iterators/multiprocess_iterator.py",
        "        thread.setDaemon(True)\n",
        "        thread.daemon = True\n",
        "Python>=3.10 deprecates Thread.setDaemon: DeprecationWarning in MultiprocessIterator"),
    Fix("cuda-no-cudnn-advice-on-cupy-14", "chainer/backends/cuda.py",
        """    if (not cudnn_enabled and
            not _cudnn_disabled_by_user and
""",
        """    # chainermn-rt: CuPy 14 has no cuDNN binding: reinstalling CuPy cannot enable it
    if (not cudnn_enabled and _cupy_major < 14 and
            not _cudnn_disabled_by_user and
""",
        "CuPy 14 dropped cuDNN: every GPU run warned 'cuDNN is not enabled. Please reinstall "
        "CuPy after you install cudnn', which cannot help"),
    # --- ChainerMN --------------------------------------------------------------------------
    Fix("multi-node-iterator-size", "chainermn/iterators/multi_node_iterator.py",
        "        self.dataset_size = int(_size)\n",
        "        self.dataset_size = int(_size.item())\n",
        "numpy>=2.4: int() of a shape-(1,) array raises TypeError on the non-root ranks"),
    Fix("observation-aggregator-no-chainerx", "chainermn/extensions/observation_aggregator.py",
        """            if isinstance(value, Variable):
                # use to native device as ChainerX array cannot
                # be converted to numpy directly, which is what `to_cpu()` does
                value.to_device("native")
""",
        """            if isinstance(value, Variable):
                # chainermn-rt: 'native' is a ChainerX device (RuntimeError without ChainerX):
                # only ChainerX arrays go there, as to_cpu() cannot convert them; NumPy and
                # CuPy arrays go to NumPy
                if isinstance(value.array, chx.ndarray):
                    value.to_device("native")
                else:
                    value.to_cpu()
""",
        "no ChainerX: Variable.to_device('native') raised RuntimeError for every Variable "
        "observation (main/loss), so ObservationAggregator and MultiNodeEarlyStoppingTrigger "
        "failed on CPU"),
    Fix("memory-utility-copy-false", "chainermn/communicators/_memory_utility.py",
        "            v = xp.array(v, copy=False, dtype=transfer_dtype)\n",
        "            v = xp.asarray(v, dtype=transfer_dtype)\n",
        "numpy 2 / CuPy 14 copy=False semantics: ValueError when a dtype conversion is needed"),
    Fix("memory-utility-half-pack", "chainermn/communicators/_memory_utility.py",
        "#include <cupy/carray.cuh>\n#define NCCL_FLOAT16  6\n#define NCCL_FLOAT32  7\n"
        "#define NCCL_FLOAT64  8\n    extern \"C\" __global__\n    void cupy_batched_pack_params(",
        "#include <cupy/carray.cuh>\n#include <cuda_fp16.h>\n#define NCCL_FLOAT16  6\n"
        "#define NCCL_FLOAT32  7\n#define NCCL_FLOAT64  8\n    extern \"C\" __global__\n"
        "    void cupy_batched_pack_params(",
        "CuPy 14: NVRTC 'identifier \"half\" is undefined' in the batched pack kernel "
        "(flat, pure_nccl)"),
    Fix("memory-utility-half-unpack", "chainermn/communicators/_memory_utility.py",
        "#include <cupy/carray.cuh>\n#define NCCL_FLOAT16  6\n#define NCCL_FLOAT32  7\n"
        "#define NCCL_FLOAT64  8\n    extern \"C\" __global__\n"
        "    void cupy_batched_unpack_params(",
        "#include <cupy/carray.cuh>\n#include <cuda_fp16.h>\n#define NCCL_FLOAT16  6\n"
        "#define NCCL_FLOAT32  7\n#define NCCL_FLOAT64  8\n    extern \"C\" __global__\n"
        "    void cupy_batched_unpack_params(",
        "CuPy 14: NVRTC 'identifier \"half\" is undefined' in the batched unpack kernel "
        "(flat, pure_nccl)"),
    Fix("communicator-entry-points", "chainermn/communicators/__init__.py",
        """    else:
        raise ValueError(
            'Unrecognized communicator: "{}"'.format(communicator_name))
""",
        """    else:
        comm = _communicator_from_entry_point(communicator_name, mpi_comm)
""",
        "lets other packages (chainermn-rt's CPU communicator) register communicators by name"),
    Fix("communicator-entry-points-helper", "chainermn/communicators/__init__.py",
        "def create_communicator(\n",
        f'''def _communicator_from_entry_point(communicator_name, mpi_comm):
    """Instantiate a communicator registered in the {COMMUNICATOR_GROUP!r} entry points."""
    # chainermn-rt: added; the stock names above keep priority.
    from importlib import metadata

    found = metadata.entry_points(group={COMMUNICATOR_GROUP!r})
    for entry_point in found:
        if entry_point.name == communicator_name:
            return entry_point.load()(mpi_comm=mpi_comm)
    raise ValueError(
        'Unrecognized communicator: "{{}}" (built in: naive, flat, '
        'non_cuda_aware, pure_nccl, dummy; registered: {{}})'.format(
            communicator_name,
            ', '.join(sorted(ep.name for ep in found)) or 'none'))


def create_communicator(
''',
        "entry-point lookup for unknown communicator names (group chainermn.communicators)"),
)




def _digest(fixes: tuple[Fix, ...]) -> str:
    text = "\0".join(part for fix in fixes for part in (fix.name, fix.path, fix.old, fix.new))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


# Local version label of the patched wheel: 7.8.1+rt<digest of the fixes> satisfies
# chainer==7.8.1, and changes whenever a fix does, so pip never keeps a stale build.
LOCAL_LABEL = "rt" + _digest(_SOURCE_FIXES)

FIXES: tuple[Fix, ...] = _SOURCE_FIXES + (
    Fix("setup-local-version", "setup.py",
        "    version=__version__,  # NOQA\n",
        f"    version=__version__ + '+{LOCAL_LABEL}',  # NOQA chainermn-rt patched build\n",
        "marks the patched wheel (chainer==7.8.1 still matches) so it is never mistaken for "
        "PyPI's"),
)


def marker_source(fixes: tuple[Fix, ...]) -> str:
    """Text of ``chainer/_chainermn_rt_fixes.py``: the build and the names of ``fixes``."""
    names = "".join(f"    {fix.name!r},\n" for fix in fixes)
    return ('"""Written by chainermn-rt: this chainer was built with its modern-stack fixes."""\n'
            f"BUILD = {wheel_version()!r}\nAPPLIED = (\n{names})\n")


def apply_all(root: Path, fixes: tuple[Fix, ...] = FIXES) -> list[str]:
    """Apply ``fixes`` to the unpacked sdist at ``root``; return their names in order.

    Every fix is checked against the text as it stands after the fixes before it;
    nothing is written unless all of them apply, and then the marker module is added.
    """
    root = Path(root)
    texts: dict[str, str] = {}
    for fix in fixes:
        if fix.path not in texts:
            source = root / fix.path
            if not source.is_file():
                raise FixError(f"{fix.name}: {fix.path} is missing under {root}: "
                               f"not the chainer {CHAINER_VERSION} sdist")
            texts[fix.path] = source.read_text(encoding="utf-8")
        count = texts[fix.path].count(fix.old)
        if count != 1:
            raise FixError(f"{fix.name}: the old text occurs {count} times in {fix.path} "
                           f"(expected exactly once): not the chainer {CHAINER_VERSION} sdist, "
                           "or already patched")
        texts[fix.path] = texts[fix.path].replace(fix.old, fix.new)
    marker = root / MARKER_MODULE
    if marker.exists():
        raise FixError(f"{MARKER_MODULE} already exists under {root}: already patched")
    for path, text in texts.items():
        (root / path).write_text(text, encoding="utf-8")
    marker.write_text(marker_source(fixes), encoding="utf-8")
    return [fix.name for fix in fixes]
