"""Checks that the MPI / UCX / NCCL / mpi4py / chainer stack here is the one it should be.

Each check returns a :class:`~chainermn_rt.doctor.check.Check`: PASS, FAIL or n/a (does not
apply to this flavour, e.g. CUDA in the cpu image). ``image=True`` also compares with the
image's VERSIONS file (containers/versions.toml and pyproject.toml at build time).

Example::

    >>> checks = run_checks(image=False)          # doctest: +SKIP
    >>> print(format_line(checks[0]))             # doctest: +SKIP
    PASS  flavor         cpu (no CuPy importable here)
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata
import io
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import asdict
from pathlib import Path

from chainermn_rt.doctor.check import FAIL, NA, PASS, Check

VERSIONS_FILE = Path(os.environ.get("CHAINERMN_RT_VERSIONS", "/opt/chainermn_rt/VERSIONS"))
def _tool(argv: list[str]) -> tuple[int, str]:
    """(exit status, stdout+stderr) of a tool; 127 when it is not installed."""
    if shutil.which(argv[0]) is None:
        return 127, f"{argv[0]} not found on PATH"
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def _gpu(flavor: str) -> bool:
    """The gpu flavours (``gpu``, ``gpu-upstream``) carry CUDA, UCX, NCCL, CuPy and cuDNN."""
    return flavor.startswith("gpu")


def _base(version: str) -> str:
    return version.split("+", 1)[0]


def read_versions(path: Path = VERSIONS_FILE) -> dict | None:
    """The image's VERSIONS table; None when absent; ``{"error": why}`` when unreadable."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return None
    except (OSError, tomllib.TOMLDecodeError) as err:
        return {"error": f"{path}: {err}"}


def flavor_check(image: bool, versions: dict | None) -> Check:
    if image:
        if versions is None:
            return Check("flavor", FAIL, f"{VERSIONS_FILE} missing: not a chainermn-rt image")
        if "error" in versions:
            return Check("flavor", FAIL, versions["error"])
        return Check("flavor", PASS, f"{versions.get('flavor')} (from {VERSIONS_FILE})")
    try:
        importlib.import_module("cupy")
        return Check("flavor", PASS, "gpu (CuPy importable)")
    except ImportError:
        return Check("flavor", PASS, "cpu (no CuPy importable here)")


def ompi_params() -> tuple[Check, dict[str, str]]:
    rc, out = _tool(["ompi_info", "--parsable", "--all"])
    if rc != 0:
        return Check("mpi", FAIL, out.strip().splitlines()[-1] if out.strip() else f"rc {rc}"), {}
    params = {}
    for line in out.splitlines():
        key, _, value = line.rpartition(":")
        params[key] = value
    version = params.get("ompi:version:full", "?")
    return Check("mpi", PASS, f"Open MPI {version} ({shutil.which('ompi_info')})"), params


def cuda_mpi_check(flavor: str, params: dict[str, str]) -> Check:
    value = params.get("mca:mpi:base:param:mpi_built_with_cuda_support:value")
    if not _gpu(flavor):
        return Check("mpi-cuda", NA, f"cpu flavour (mpi_built_with_cuda_support={value})")
    if value == "true":
        return Check("mpi-cuda", PASS, "mpi_built_with_cuda_support=true")
    return Check("mpi-cuda", FAIL,
                 f"mpi_built_with_cuda_support={value}: Open MPI is not CUDA-aware")


def ucx_check(flavor: str) -> Check:
    if not _gpu(flavor):
        return Check("ucx", NA, "cpu flavour uses Debian's Open MPI shared memory / TCP")
    rc, out = _tool(["ucx_info", "-d"])
    if rc != 0:
        return Check("ucx", FAIL, out.strip()[-200:])
    transports = set(re.findall(r"Transport:\s*(\S+)", out))
    cuda = sorted(t for t in transports if t.startswith(("cuda", "gdr")))
    ib = sorted(t for t in transports if t.endswith(("verbs", "mlx5")) or t in ("rc", "ud", "dc"))
    if not cuda or not ib:  # no GPU driver or no HCA here: the build must carry the modules
        _, built = _tool(["ucx_info", "-b"])
        modules = re.search(r'uct_MODULES\s+"([^"]*)"', built)
        modules = set(modules.group(1).split(":")) if modules else set()
        if not cuda and "cuda" in modules:
            cuda = ["cuda (built; no GPU driver here)"]
        if not ib and "ib" in modules:
            ib = ["ib (built; no HCA here)"]
    if cuda and ib:
        return Check("ucx", PASS, f"transports cuda: {', '.join(cuda)}; ib: {', '.join(ib)}")
    return Check("ucx", FAIL, f"ucx_info -d lists {sorted(transports)}: needs cuda and ib")


def _wheel_library_dirs() -> list[Path]:
    """``nvidia/*/lib`` folders of NVIDIA's wheels on ``sys.path`` (``nvidia-nccl-cu13``,
    ``nvidia-cudnn-cu13`` ...): where CuPy and PyTorch find NCCL and cuDNN outside an image."""
    found = []
    for entry in sys.path:
        folder = Path(entry or ".") / "nvidia"
        if folder.is_dir():
            found += sorted(p for p in folder.glob("*/lib") if p.is_dir())
    return found


# cuDNN 9's libcudnn.so.9 forwards its functions to libcudnn_graph.so.9, loaded at the first
# call, and aborts the process when that does not load: call the function there instead.
_HOLDERS = {"libcudnn.so.9": "libcudnn_graph.so.9"}


def _library_version(sonames: tuple[str, ...], function: str, decode
                     ) -> tuple[str | None, str]:
    """(version, where) read by calling ``function`` of the first of ``sonames`` that loads,
    by the dynamic linker's search or from NVIDIA's wheels (no GPU or driver needed);
    (None, why) when none does."""
    errors = []
    for soname in sonames:
        for name in [soname] + [str(d / soname) for d in _wheel_library_dirs()
                                if (d / soname).is_file()]:
            try:
                lib = ctypes.CDLL(name)
                holder = _HOLDERS.get(soname)
                if holder:  # beside it, or by the same search
                    lib = ctypes.CDLL(str(Path(name).with_name(holder)) if "/" in name
                                      else holder)
            except OSError as err:
                errors.append(str(err))
                continue
            return decode(lib, getattr(lib, function)), name
    return None, "; ".join(errors[:2])


def _nccl_decode(_lib, get_version) -> str:
    code = ctypes.c_int()
    if get_version(ctypes.byref(code)) != 0:
        return "?"
    code = code.value
    if code >= 20900:  # NCCL_VERSION_CODE: X*10000 + Y*100 + Z since 2.9
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _cudnn_decode(_lib, get_version) -> str:
    get_version.restype = ctypes.c_size_t
    code = get_version()
    if code >= 90000:  # cuDNN 9: X*10000 + Y*100 + Z; cuDNN 8: X*1000 + Y*100 + Z
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _pmix_decode(lib, get_version) -> str:
    get_version.restype = ctypes.c_char_p
    text = get_version().decode(errors="replace")  # "OpenPMIx 4.2.2 (PMIx Standard: ...)"
    match = re.search(r"(\d+\.\d+\.\d+)", text)
    return match.group(1) if match else text


def _pinned(versions: dict | None, section: str, name: str) -> str | None:
    return ((versions or {}).get(section) or {}).get(name)


def _library_check(name: str, flavor: str, soname: str | tuple[str, ...], function: str,
                   decode, want: str | None) -> Check:
    """ok when ``soname`` (or the first of several) loads and its version matches ``want``
    (the first three numbers)."""
    if not _gpu(flavor):
        return Check(name, NA, f"{flavor} flavour has no {soname}")
    sonames = (soname,) if isinstance(soname, str) else soname
    have, where = _library_version(sonames, function, decode)
    if have is None:
        return Check(name, FAIL, f"{' or '.join(sonames)} does not load: {where}")
    if want is not None and have != ".".join(want.split(".")[:3]):
        return Check(name, FAIL, f"{where} is {have} (want {want})")
    return Check(name, PASS, f"{name.upper() if name == 'nccl' else 'cuDNN'} {have} "
                           f"(read from {where})")


def nccl_check(flavor: str, versions: dict | None = None) -> Check:
    return _library_check("nccl", flavor, "libnccl.so.2", "ncclGetVersion", _nccl_decode,
                          _pinned(versions, "python", "nvidia-nccl-cu12"))


def _cupy_major() -> int | None:
    try:
        import cupy

        return int(cupy.__version__.split(".")[0])
    except Exception:  # noqa: BLE001 - no CuPy (or a broken one): cupy_check says why
        return None


def cudnn_check(flavor: str, versions: dict | None = None) -> Check:
    """The image's pinned cuDNN, or the cuDNN 8 that CuPy 13 binds. CuPy 14 binds none, so
    Chainer convolves without it: then a cuDNN found here (PyTorch's) is only reported."""
    want = _pinned(versions, "python", "nvidia-cudnn-cu12")
    major = _cupy_major()
    if want is not None or major is None or major < 14:
        soname = f"libcudnn.so.{want.split('.')[0] if want else 8}"
        return _library_check("cudnn", flavor, soname, "cudnnGetVersion", _cudnn_decode, want)
    note = f"CuPy {major} has no cuDNN binding: Chainer convolves without cuDNN"
    if not _gpu(flavor):
        return Check("cudnn", NA, f"{flavor} flavour has no cuDNN")
    have, where = _library_version(("libcudnn.so.9", "libcudnn.so.8"), "cudnnGetVersion",
                                   _cudnn_decode)
    if have is None:  # say why when libcudnn.so.9 is there but what it forwards to is not
        broken = _HOLDERS["libcudnn.so.9"] in where
        return Check("cudnn", NA, f"{note}; {where}" if broken else note)
    return Check("cudnn", PASS, f"cuDNN {have} (read from {where}); {note}")


def cupy_check(flavor: str) -> Check:
    if not _gpu(flavor):
        return Check("cupy", NA, f"{flavor} flavour has no CuPy")
    try:
        import cupy
    except Exception as err:  # noqa: BLE001 - any failure to import is the finding
        return Check("cupy", FAIL, f"import cupy: {err}")
    runtime = _cuda_runtime()
    return Check("cupy", PASS, f"CuPy {cupy.__version__}, CUDA runtime {runtime} (no GPU needed)")


def pmix_check(params: dict[str, str], versions: dict | None = None) -> Check:
    """Open MPI uses an external PMIx (as Slurm's ``--mpi=pmix`` does), of VERSIONS' version."""
    external = sorted({key.split(":")[2] for key in params
                       if key.startswith("mca:pmix:ext")})
    if not external:
        return Check("pmix", FAIL, "Open MPI has no external PMIx component (ext*x)")
    have, where = _library_version(("libpmix.so.2",), "PMIx_Get_version", _pmix_decode)
    if have is None:
        return Check("pmix", FAIL, f"libpmix.so.2 does not load: {where}")
    want = _pinned(versions, "system", "pmix")
    if want is not None and have != want:
        return Check("pmix", FAIL, f"PMIx {have} (want {want}), Open MPI component "
                                   f"{', '.join(external)}")
    return Check("pmix", PASS, f"PMIx {have}, Open MPI component {', '.join(external)}")


def _mapped(pattern: str) -> str | None:
    """The first file mapped into this process whose path matches ``pattern``."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        if re.search(pattern, line.split()[-1]):
            return line.split()[-1]
    return None


def _loaded_libmpi() -> str | None:
    return _mapped(r"/libmpi\.so(\.|$)")


def _ompi_info_libmpi() -> str | None:
    """The libmpi.so that this machine's ompi_info is linked with (ldd)."""
    rc, out = _tool(["ldd", shutil.which("ompi_info") or "ompi_info"])
    match = re.search(r"libmpi\.so\S*\s+=>\s+(\S+)", out) if rc == 0 else None
    return match.group(1) if match else None


def mpi4py_check() -> Check:
    try:
        import mpi4py

        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = False
        from mpi4py import MPI
    except Exception as err:  # noqa: BLE001 - any failure to load is the finding
        return Check("mpi4py", FAIL, f"import mpi4py.MPI: {err}")
    lib = _loaded_libmpi()
    if lib is None:
        return Check("mpi4py", FAIL, "no libmpi.so mapped after importing mpi4py.MPI")
    reason = f"mpi4py {mpi4py.__version__} uses {lib} ({MPI.Get_library_version().splitlines()[0]})"
    ours = _ompi_info_libmpi()
    if ours is None or Path(lib).resolve() != Path(ours).resolve():
        return Check("mpi4py", FAIL, f"{reason}, not the libmpi of ompi_info ({ours})")
    if "Open MPI" not in MPI.Get_library_version():
        return Check("mpi4py", FAIL, f"{reason}: not Open MPI")
    return Check("mpi4py", PASS, reason)


def imports_check() -> Check:
    try:
        import chainer
        import chainermn  # noqa: F401

        import chainermn_rt  # noqa: F401
    except Exception as err:  # noqa: BLE001
        return Check("imports", FAIL, f"import chainer, chainermn, chainermn_rt: {err}")
    return Check("imports", PASS, f"chainer {chainer.__version__}, chainermn, chainermn_rt")


# The test picture of the image checks: four flat 32x32 quadrants (whole JPEG blocks and MCUs,
# so a JPEG keeps their colours within a few levels), top-left, top-right, bottom-left, -right.
QUADRANTS = ((200, 30, 90), (20, 180, 60), (40, 60, 220), (240, 220, 30))
TOLERANCE = 4  # levels a q95 JPEG of flat blocks may stray from their colour


def _quadrants():
    import numpy

    picture = numpy.empty((64, 64, 3), numpy.uint8)
    for i, colour in enumerate(QUADRANTS):
        y, x = divmod(i, 2)
        picture[32 * y:32 * y + 32, 32 * x:32 * x + 32] = colour
    return picture


def jpeg_check(versions: dict | None = None) -> Check:
    """chainermn_rt's JPEG decoder: the extension loads, its libjpeg-turbo is VERSIONS' one, and
    it decodes a JPEG made here (by Pillow) through a crop box, a resize and a flip to the
    colours the picture was made of."""
    try:
        import numpy

        jpeg = importlib.import_module("chainermn_rt.data.jpeg")
    except Exception as err:  # noqa: BLE001 - any failure to load is the finding
        return Check("jpeg", FAIL, f"import chainermn_rt.data.jpeg: {err}")
    have = jpeg.LIBJPEG_TURBO_VERSION
    library = _mapped(r"/libjpeg\.so\.\d") or "libjpeg.so"
    want = _pinned(versions, "system", "libjpeg-turbo")
    if want is not None and have != want:
        return Check("jpeg", FAIL, f"libjpeg-turbo {have} (want {want}), {library}")
    buffer = io.BytesIO()
    try:
        from PIL import Image

        Image.fromarray(_quadrants()).save(buffer, "JPEG", quality=95, subsampling=0)
    except Exception as err:  # noqa: BLE001 - any failure is the finding
        return Check("jpeg", FAIL, f"Pillow, making the test JPEG: {type(err).__name__}: {err}")
    try:  # the top half, 16x8, mirrored: top-right's colour on the left, top-left's on the right
        got = jpeg.decode(buffer.getvalue(), (16, 8), box=(0, 0, 64, 32), flip=True)
    except Exception as err:  # noqa: BLE001 - libjpeg's message is the finding
        return Check("jpeg", FAIL, f"decoding a 64x64 JPEG: {err}")
    want_pixels = numpy.empty((8, 16, 3), numpy.int16)
    want_pixels[:, :8], want_pixels[:, 8:] = QUADRANTS[1], QUADRANTS[0]
    away = numpy.r_[0:6, 10:16]  # columns clear of the blend across the middle
    error = int(numpy.abs(got[:, away].astype(numpy.int16) - want_pixels[:, away]).max())
    if error > TOLERANCE:
        return Check("jpeg", FAIL, f"a 64x64 JPEG's crop decoded {error} levels off its colours "
                                   f"(libjpeg-turbo {have}, {library})")
    return Check("jpeg", PASS, f"libjpeg-turbo {have} ({library}): a JPEG's crop decoded, "
                               f"resized and mirrored (largest error {error} of 255)")


def png_check() -> Check:
    """Pillow decodes a PNG (made here) to exactly the pixels it was made of."""
    try:
        import numpy
        import PIL
        from PIL import Image

        picture = _quadrants()
        picture[::3, ::5] = (7, 77, 177)  # not only flat blocks
        buffer = io.BytesIO()
        Image.fromarray(picture).save(buffer, "PNG")
        with Image.open(io.BytesIO(buffer.getvalue())) as image:
            got = numpy.asarray(image.convert("RGB"))
    except Exception as err:  # noqa: BLE001 - any failure is the finding
        return Check("png", FAIL, f"Pillow, a 64x64 PNG: {type(err).__name__}: {err}")
    if got.shape != picture.shape or not (got == picture).all():
        return Check("png", FAIL, f"Pillow {PIL.__version__} decoded a PNG to other pixels than "
                                  "it was made of")
    return Check("png", PASS, f"Pillow {PIL.__version__}: a 64x64 PNG decoded exactly")


def _expected_python() -> dict[str, str]:
    pins = {}
    for req in importlib.metadata.requires("chainermn-rt") or []:
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^;\s]+)\s*(;.*)?", req)
        if match and not match.group(3):
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


def _cuda_runtime() -> str | None:
    """``major.minor`` of the CUDA runtime CuPy loads (no GPU needed), or None."""
    try:
        import cupy

        number = cupy.cuda.runtime.runtimeGetVersion()
    except Exception:  # noqa: BLE001 - no CuPy or no runtime: reported as missing
        return None
    return f"{number // 1000}.{number % 1000 // 10}"


def versions_check(image: bool, versions: dict | None, params: dict[str, str]) -> Check:
    expected = dict(_expected_python())
    system = {}
    if image and versions:
        expected.update(versions.get("python", {}))
        system = versions.get("system", {})
    wrong = []
    for name, want in sorted(expected.items()):
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            wrong.append(f"{name} missing (want {want})")
            continue
        if _base(have) != want:
            wrong.append(f"{name} {have} (want {want})")
    if "openmpi" in system and params.get("ompi:version:full") != system["openmpi"]:
        wrong.append(f"openmpi {params.get('ompi:version:full')} (want {system['openmpi']})")
    if "ucx" in system:
        _, out = _tool(["ucx_info", "-v"])
        # "Library version: X" (UCX >= 1.14), "# Version X" (1.13)
        have = re.search(r"(?:Library version:|^# Version)\s*(\S+)", out, flags=re.MULTILINE)
        if not have or have.group(1) != system["ucx"]:
            wrong.append(f"ucx {have.group(1) if have else '?'} (want {system['ucx']})")
    if "cuda" in system:
        have = _cuda_runtime()
        if have is None or not system["cuda"].startswith(have + "."):
            wrong.append(f"CUDA runtime {have} (want {system['cuda']})")
    if wrong:
        return Check("versions", FAIL, "; ".join(wrong))
    what = "VERSIONS and pyproject pins" if image else "pyproject pins"
    return Check("versions", PASS, f"{len(expected) + len(system)} versions match the {what}")


def run_checks(image: bool) -> list[Check]:
    versions = read_versions() if image else None
    checks = [flavor_check(image, versions)]
    flavor = (versions or {}).get("flavor") or checks[0].reason.split()[0]
    mpi, params = ompi_params()
    checks += [mpi, cuda_mpi_check(flavor, params), ucx_check(flavor), pmix_check(params, versions),
               nccl_check(flavor, versions), cupy_check(flavor), cudnn_check(flavor, versions),
               mpi4py_check(), imports_check(), jpeg_check(versions), png_check(),
               versions_check(image, versions, params)]
    return checks


def as_json(checks: list[Check]) -> list[dict]:
    return [asdict(c) for c in checks]
