"""Which MPI the built cpu image's mpi4py loads: its own Open MPI (the hybrid model) with no
variable set, or a site's MPICH bound in (the bind model) when the job's variables say so; and
the libfabric a site's OFI provider plugs into.

The site's MPICH here is Debian 12's (``libmpich12`` on this machine: `make setup`), bound in as
a site would: a folder holding a ``libmpi.so.12`` link (a site provides it) and the library.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fixtures_docker import docker_run

pytestmark = pytest.mark.docker
LIBMPICH = Path("/usr/lib/x86_64-linux-gnu/libmpich.so.12")  # Debian 12's libmpich12
SITE = "/site/mpich"  # where the site's folder appears inside
WHICH = ("from mpi4py import MPI; import os; print(os.path.basename(MPI.__file__).split('.')[1]);"
         " print(MPI.Get_library_version().splitlines()[0])")


def _mpich() -> Path:
    if not LIBMPICH.exists():
        pytest.fail(f"{LIBMPICH} missing (libmpich12: run `make setup`)", pytrace=False)
    return LIBMPICH


def _site_binds(folder: Path) -> tuple[str, ...]:
    """The site's folder at SITE, Debian's MPICH library at its own path (the link's target)."""
    folder.chmod(0o755)
    return ("-v", f"{folder}:{SITE}:ro", "-v", f"{_mpich().resolve()}:{LIBMPICH}:ro")


def _run(engine, image, env: dict[str, str], binds=(), check=True, script=WHICH):
    extra = [*binds, *(a for k, v in env.items() for a in ("-e", f"{k}={v}"))]
    return docker_run(engine, image, "python", "-c", script, extra=tuple(extra), check=check)


def test_with_no_variable_mpi4py_loads_the_images_open_mpi(engine, cpu_image):
    """The hybrid model, unchanged: the wheel's openmpi back-end on Debian's libmpi.so.40."""
    script = (WHICH + "; print(*sorted(n for n in os.listdir(os.path.dirname(MPI.__file__))"
              " if n.startswith('MPI.') and n.endswith('.so')));"
              " print(*sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libmpi' in l}))")
    lines = docker_run(engine, cpu_image, "python", "-c", script).stdout.splitlines()
    assert lines[0] == "openmpi" and lines[1].startswith("Open MPI v4.1.4"), lines
    assert [n.split(".")[1] for n in lines[2].split()] == ["mpich", "openmpi"]  # both back-ends
    assert lines[3] == "/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4", lines


def test_fi_info_lists_the_tcp_provider(engine, cpu_image):
    out = docker_run(engine, cpu_image, "fi_info", "-p", "tcp").stdout
    assert "provider: tcp" in out, out


def test_a_bound_mpich_loads_when_the_job_says_mpich(engine, cpu_image, tmp_path):
    """The bind model with Debian 12's MPICH: ``MPI4PY_MPIABI=mpich`` and the site's folder on
    ``LD_LIBRARY_PATH``. Nothing else is needed: the image holds every library
    libmpich.so.12 needs (ldd inside)."""
    (tmp_path / "libmpi.so.12").symlink_to(_mpich())
    binds = _site_binds(tmp_path)
    ldd = docker_run(engine, cpu_image, "ldd", f"{SITE}/libmpi.so.12", extra=binds).stdout
    assert "not found" not in ldd, ldd
    out = _run(engine, cpu_image, {"MPI4PY_MPIABI": "mpich", "LD_LIBRARY_PATH": SITE}, binds,
               script=WHICH + "; print(MPI.COMM_WORLD.allreduce(MPI.COMM_WORLD.Get_size()))"
               ).stdout.splitlines()
    assert out[0] == "mpich" and out[1].startswith("MPICH Version:"), out
    assert out[2] == "1", out  # MPI_Init as a singleton, a collective on it
    # MPI4PY_LIBMPI is not read once MPI4PY_MPIABI is set: the back-end's libmpi.so.12 is then
    # the linker's to find, and Debian's library is libmpich.so.12 by soname
    proc = _run(engine, cpu_image, {"MPI4PY_MPIABI": "mpich",
                                    "MPI4PY_LIBMPI": f"{SITE}/libmpi.so.12"}, binds, check=False)
    assert proc.returncode == 1
    assert "libmpi.so.12: cannot open shared object file" in proc.stderr, proc.stderr


def test_mpi4py_libmpi_alone_loads_a_library_whose_soname_is_libmpi_so_12(engine, cpu_image,
                                                                          tmp_path):
    """``MPI4PY_LIBMPI`` alone names the library (as upstream MPICH's, soname libmpi.so.12): a
    stand-in of that soname that links Debian's MPICH."""
    (tmp_path / "stub.c").write_text("int site_mpi_stand_in;\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libmpi.so.12"),
                    "-Wl,-soname,libmpi.so.12", "-Wl,--no-as-needed", str(tmp_path / "stub.c"),
                    str(_mpich())], check=True, capture_output=True)
    out = _run(engine, cpu_image, {"MPI4PY_LIBMPI": f"{SITE}/libmpi.so.12"},
               _site_binds(tmp_path)).stdout.splitlines()
    assert out[0] == "mpich" and out[1].startswith("MPICH Version:"), out
