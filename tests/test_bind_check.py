"""The host libraries a job binds (chainermn_rt.bind_check), on real files: Debian 12's Open MPI
4.1 (this host's), the Debian 13 root's Open MPI 5 (needs GLIBC_2.38), an NCCL net plugin built
here; at render (a Charliecloud image folder shows its libc) and in the rank step (this
process's glibc stands for the image's)."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chainermn_rt.bind_check import at_render, in_rank, running_glibc
from chainermn_rt.errors import UserError
from chainermn_rt.interconnect import MpiModel, NcclNet
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.site import load_site

from conftest import REPO, require_commands

MULTIARCH = f"{platform.machine()}-linux-gnu"
HOST_LIB = Path(f"/usr/lib/{MULTIARCH}")
OPEN_MPI_4 = HOST_LIB / "libmpi.so.40"  # Debian 12's (libopenmpi3), which make setup installs


def _open_mpi_5(root, folder: Path) -> Path:
    """The Debian 13 root's Open MPI 5 and the libraries it needs from its distribution (not
    glibc's), copied into ``folder`` as a site would lay out its MPI."""
    lib = root.rootfs / f"usr/lib/{MULTIARCH}"
    folder.mkdir()
    for name in ("libmpi.so.40", "libopen-pal.so.80", "libpmix.so.2", "libhwloc.so.15",
                 "libevent_core-2.1.so.7", "libevent_pthreads-2.1.so.7"):
        if (lib / name).exists():
            shutil.copy2(lib / name, folder / name)
    return folder / "libmpi.so.40"


def test_the_hosts_open_mpi_4_passes_for_its_family_and_fails_for_the_other():
    bound = MpiModel("bind", "openmpi", str(OPEN_MPI_4), (str(HOST_LIB),))
    at_render(bound, NcclNet(), image_glibc=(2, 36))
    with pytest.raises(UserError) as err:
        at_render(MpiModel("bind", "mpich", str(OPEN_MPI_4), (str(HOST_LIB),)), NcclNet(), None)
    assert str(err.value) == (
        f"mpi.library: {OPEN_MPI_4} has the openmpi family's libmpi.so.40; allowed with family "
        "= \"mpich\": a library whose soname is libmpi.so.12")


@pytest.mark.debian13
def test_open_mpi_5_of_debian_13_is_refused_at_render_for_a_debian_12_image(debian13_root,
                                                                           tmp_path):
    """3c of issue 42, before anything starts: a Charliecloud image folder whose libc is Debian
    12's (this host's), the root's Open MPI 5 bound: one line, exit 2 at render."""
    library = _open_mpi_5(debian13_root, tmp_path / "ompi5")
    image = tmp_path / "image"
    (image / f"lib/{MULTIARCH}").mkdir(parents=True)
    shutil.copy2(f"/lib/{MULTIARCH}/libc.so.6", image / f"lib/{MULTIARCH}/libc.so.6")
    profile = tmp_path / "p.toml"
    profile.write_text((REPO / "slurm/sites/cpu-cluster.toml").read_text()
                       + f'\n[mpi]\nmodel = "bind"\nfamily = "openmpi"\nlibrary = "{library}"\n'
                       f'paths = ["{library.parent}"]\n')
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "render", "--site", str(profile),
                           "--nodes", "1", "--launcher", "srun", "--runtime", "charliecloud",
                           "--image", str(image),
                           "--", "python3", "x.py"], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"chainermn-rt render: error: mpi.library: {library} needs GLIBC_2.38; the image has "
        "glibc 2.36; allowed: host libraries built for glibc 2.36 or older, or an image of a "
        "newer distribution (the loader would refuse them on every rank)\n")


@pytest.mark.debian13
def test_the_rank_step_refuses_it_for_every_rank_alike(debian13_root, tmp_path):
    library = _open_mpi_5(debian13_root, tmp_path / "ompi5")
    assert running_glibc() == (2, 36)  # Debian 12: what the cpu image has too
    with pytest.raises(UserError) as err:
        in_rank({"MPI4PY_MPIABI": "openmpi", "MPI4PY_LIBMPI": str(library)},
                (str(library.parent),))
    assert err.value.everywhere
    assert str(err.value).startswith(f"MPI4PY_LIBMPI: {library} needs GLIBC_2.38; the image "
                                     "has glibc 2.36;")


def test_a_library_the_container_lacks_is_one_line():
    with pytest.raises(UserError, match=r"^MPI4PY_LIBMPI: /nowhere/libmpi.so.12 is not in the "
                                        r"container; allowed: a library in a folder the job "
                                        r"binds \(mpi.paths\)$"):
        in_rank({"MPI4PY_MPIABI": "mpich", "MPI4PY_LIBMPI": "/nowhere/libmpi.so.12"}, ())


@pytest.fixture
def plugin(tmp_path) -> Path:
    """A shared object exporting ncclNet_v8, as aws-ofi-nccl's does (built here)."""
    require_commands("gcc")
    source = tmp_path / "plugin.c"
    source.write_text("int ncclNet_v8 = 8;\nint ncclCollNet_v8 = 8;\n")
    out = tmp_path / "plugins" / "libnccl-net.so"
    out.parent.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(source)], check=True)
    return out


def test_an_nccl_plugin_must_export_ncclnet(plugin):
    at_render(MpiModel(), NcclNet(str(plugin), "AWS Libfabric"), image_glibc=(2, 36))
    libc = f"/lib/{MULTIARCH}/libc.so.6"
    with pytest.raises(UserError) as err:
        at_render(MpiModel(), NcclNet(libc, "AWS Libfabric"), None)
    assert str(err.value) == (f"nccl.net_plugin: {libc} exports no ncclNet_v* symbol; allowed: "
                              "an NCCL net plugin (aws-ofi-nccl's libnccl-net.so)")
    with pytest.raises(UserError, match=r"^nccl.net_plugin: /etc/os-release: not an ELF file; "
                                        r"allowed: a shared library$"):
        at_render(MpiModel(), NcclNet("/etc/os-release", "x"), None)


def test_the_plan_checks_what_it_sees_before_rendering(plugin, tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text((REPO / "slurm/sites/cpu-cluster.toml").read_text()
                       + '\n[nccl]\nnet_plugin = "/etc/os-release"\n')
    with pytest.raises(UserError, match=r"^nccl.net_plugin: /etc/os-release: not an ELF file"):
        make_plan(load_site(profile), Request(nodes=1, command=("x",)))


def test_debians_mpich_passes_behind_the_link_a_site_makes(tmp_path):
    mpich = HOST_LIB / "libmpich.so.12"  # libmpich12, which make setup installs
    folder = tmp_path / "mpich"
    folder.mkdir()
    (folder / "libmpi.so.12").symlink_to(mpich)
    at_render(MpiModel("bind", "mpich", str(folder / "libmpi.so.12"), (str(folder),)),
              NcclNet(), image_glibc=(2, 36))
    with pytest.raises(UserError, match=r"has soname libmpich.so.12; allowed with family = "
                                        r"\"mpich\": a library whose soname is libmpi.so.12$"):
        at_render(MpiModel("bind", "mpich", str(mpich), (str(HOST_LIB),)), NcclNet(), None)


def test_the_mpi_5_standard_abi_is_refused_naming_what_is_missing():
    """MPICH's wheel ships libmpi_abi.so.1 beside libmpi.so.12 (make setup: build/mpich)."""
    abi = REPO / "build" / "mpich" / "lib" / "libmpi_abi.so.1"
    assert abi.is_file(), f"{abi} is missing: make setup installs MPICH's wheel"
    with pytest.raises(UserError) as err:
        at_render(MpiModel("bind", "mpich", str(abi), (str(abi.parent),)), NcclNet(), None)
    assert str(err.value) == (
        f"mpi.library: {abi} is the MPI 5.0 standard ABI's libmpi_abi.so.1, which the images' "
        "mpi4py 4.1.2 cannot load (its back-ends: mpich, openmpi); allowed: the library "
        "behind libmpi.so.12")
