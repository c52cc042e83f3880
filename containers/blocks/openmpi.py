"""Open MPI built with CUDA, UCX and the external PMIx (gpu flavour), and its run-time defaults.

Example::

    >>> step = build({"version": "4.1.8", "url": "https://x/o.tar.bz2", "sha256": "ab"})
    >>> "--with-cuda=/usr/local/cuda --with-ucx=/opt/ucx --with-pmix=/opt/pmix" in step.commands[6]
    True
    >>> dict(env().values)["OMPI_MCA_pml"]
    'ucx'
"""

from __future__ import annotations

from containers.blocks import gdrcopy, pmix, source, ucx
from containers.recipe import Copy, Env, Run

PREFIX = "/opt/openmpi"
MPICC = f"{PREFIX}/bin/mpicc"


def build(pin: dict, cuda: str = "/usr/local/cuda") -> Run:
    return source.configure_make(
        "openmpi", pin,
        (f"./configure --prefix={PREFIX} --with-cuda={cuda} --with-ucx={ucx.PREFIX}"
         f" --with-pmix={pmix.PREFIX} --with-libevent=/usr --with-hwloc=/usr --with-slurm"
         " --enable-mca-no-build=btl-uct --without-verbs --disable-man-pages"),
        comment=f"Open MPI {pin['version']}: CUDA-aware, UCX, PMIx for srun --mpi=pmix")


def library_path() -> str:
    """Where the gpu flavour's own libraries live (gdrcopy, UCX, PMIx, Open MPI)."""
    return ":".join(f"{p}/lib" for p in (PREFIX, ucx.PREFIX, pmix.PREFIX, gdrcopy.PREFIX))


def env() -> Env:
    """Defaults a site expects; each yields to a value set at run time."""
    return Env((("OMPI_MCA_pml", "ucx"),
                ("OMPI_MCA_osc", "ucx"),
                ("OMPI_MCA_btl", "^openib,uct,smcuda"),
                ("OMPI_MCA_btl_vader_single_copy_mechanism", "none"),
                ("UCX_MEMTYPE_CACHE", "n"),
                ("PMIX_MCA_gds", "hash")), defaults=True)


def runtime() -> list:
    return [Copy(PREFIX, PREFIX, from_stage="build")]
