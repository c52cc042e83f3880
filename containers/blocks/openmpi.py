"""Open MPI: Debian's binary packages (cpu), Debian's source package built CUDA-aware (gpu),
or a pinned upstream release (gpu-upstream); and a container's run-time defaults.

The CUDA-aware builds use UCX, an external PMIx (for ``srun --mpi=pmix``) and Slurm
support, and go to /opt/openmpi. Open MPI finds libcuda at run time (dlopen): the
host driver's.

Example::

    >>> b = debian("4.1.4-3")
    >>> "--with-cuda=/usr/local/cuda --with-ucx=/opt/ucx" in b.build[-1].commands[-4]
    True
    >>> dict(b.defaults)["OMPI_MCA_pml"]
    'ucx'
    >>> binary().runtime_packages
    ('openmpi-bin',)
"""

from __future__ import annotations

from containers.blocks import debian_source, pmix, source, ucx
from containers.recipe import Block, Copy

PREFIX = "/opt/openmpi"
# mpirun's launcher wants an ssh client even for ranks on its own node (as Debian's
# openmpi-bin depends on one)
SSH = ("openssh-client",)
# Debian 12's libraries an Open MPI built against its libevent and hwloc loads
DEBIAN_RUNTIME_PACKAGES = ("libevent-2.1-7", "libevent-pthreads-2.1-7", "libhwloc15", "zlib1g",
                           *SSH)
# Our patches of Debian's source, by upstream version. 4.1.4: MPI_Init's modex fence no longer
# progresses the BTLs (a segfault at start-up; issue 25, bench/RESULTS.md).
FIXES = {"4.1.4": ("openmpi-4.1.4-modex-fence.patch",)}
# Containers usually lack CAP_SYS_PTRACE, which shared memory's CMA copy needs.
NO_CMA = (("OMPI_MCA_btl_vader_single_copy_mechanism", "none"),)
# Defaults a site expects of a CUDA-aware build; each yields to a value set at run time.
UCX_DEFAULTS = (("OMPI_MCA_pml", "ucx"),
                ("OMPI_MCA_osc", "ucx"),
                ("OMPI_MCA_btl", "^openib,uct,smcuda"),
                *NO_CMA,
                ("UCX_MEMTYPE_CACHE", "n"),
                ("PMIX_MCA_gds", "hash"))


def _configure(cuda: str, pmix_prefix: str, events: str) -> str:
    # no ROMIO: MPI-IO stays (Open MPI's own ompio), and it is a large part of the compile
    return (f"./configure --prefix={PREFIX} --with-cuda={cuda} --with-ucx={ucx.PREFIX}"
            f" --with-pmix={pmix_prefix} {events} --with-slurm"
            " --enable-mca-no-build=btl-uct --without-verbs --disable-io-romio"
            " --disable-man-pages")


def _block(step, packages=(), runtime_packages=(), copies=()) -> Block:
    return Block("openmpi", build=(*copies, step),
                 runtime=(Copy(PREFIX, PREFIX, from_stage="build"),),
                 build_packages=packages, runtime_packages=runtime_packages,
                 path=(f"{PREFIX}/bin",), library_dirs=(f"{PREFIX}/lib",), defaults=UCX_DEFAULTS)


def binary() -> Block:
    """Debian's Open MPI (cpu flavour): the run-time packages; nothing is built against it
    (mpi4py is a wheel)."""
    return Block("openmpi", runtime_packages=("openmpi-bin",), defaults=NO_CMA)


def fixes(version: str) -> tuple[str, ...]:
    """Our patches of Debian's source package ``version`` (containers/patches/)."""
    return FIXES.get(debian_source.upstream(version), ())


def debian(version: str, cuda: str = "/usr/local/cuda") -> Block:
    """Debian 12's source package, configured CUDA-aware against Debian's PMIx, libevent, hwloc;
    with our fixes of that version (``FIXES``)."""
    copies = tuple(Copy(f"{debian_source.PATCHES}/{name}", f"{debian_source.PATCH_DIR}/{name}")
                   for name in fixes(version))
    patches = tuple(c.dest for c in copies)
    step = debian_source.configure_make(
        "openmpi", version,
        # Debian's patches touch configure.ac and m4 files: regenerate, as Debian's build does
        ("./autogen.pl --force",
         _configure(cuda, pmix.DEBIAN_PREFIX, "--with-libevent=external --with-hwloc=external")
         + " --disable-mpi-fortran --disable-oshmem --disable-mpi-java"),
        comment=(f"Open MPI {version} (Debian 12's source): CUDA-aware, UCX, Debian's PMIx "
                 "for srun --mpi=pmix, Slurm" + (", our fixes" if patches else "")),
        patches=patches)
    return _block(step, debian_source.BUILD_PACKAGES + ucx.AUTOTOOLS + ("flex",),
                  runtime_packages=DEBIAN_RUNTIME_PACKAGES, copies=copies)


def upstream(pin: dict, cuda: str = "/usr/local/cuda") -> Block:
    step = source.configure_make(
        "openmpi", pin, _configure(cuda, pmix.PREFIX, "--with-libevent=/usr --with-hwloc=/usr"),
        comment=f"Open MPI {pin['version']}: CUDA-aware, UCX, PMIx for srun --mpi=pmix")
    return _block(step, source.BUILD_PACKAGES, runtime_packages=SSH)

