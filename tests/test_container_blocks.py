"""Each building block of containers/blocks/, compared with the exact Docker text it generates."""
# ruff: noqa: E501 - golden lines are exactly as long as the generated ones

from __future__ import annotations

import sys
import textwrap

from conftest import REPO

sys.path.insert(0, str(REPO))

from containers.blocks import (
    apt,
    chainermn_rt,
    cupy,
    gdrcopy,
    metadata,
    mpi4py,
    openmpi,
    openmpi_debian,
    pmix,
    python_venv,
    source,
    ucx,
    user,
)
from containers.recipe import CA_PRELUDE, Recipe, Stage, to_docker, to_singularity

PIN = {"version": "9.9", "url": "https://example.org/x-9.9.tar.bz2", "sha256": "ab" * 32}
SECRET = "--mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle "


def docker(*steps) -> str:
    """The Dockerfile text of ``steps`` alone (after the FROM line)."""
    return to_docker(Recipe("t", [Stage("build", "base:1", list(steps))])).split("AS build\n", 1)[1]


def fetched(name: str) -> str:
    return (f"    mkdir -p /tmp/src/{name} && \\\n"
            f"    curl -fsSL -o /tmp/src/{name}.tar.bz2 https://example.org/x-9.9.tar.bz2 && \\\n"
            f"    printf '%s  %s\\n' {'ab' * 32} /tmp/src/{name}.tar.bz2 > /tmp/src/{name}.sha256 && \\\n"
            f"    sha256sum -c /tmp/src/{name}.sha256 && \\\n"
            f"    tar -xf /tmp/src/{name}.tar.bz2 -C /tmp/src/{name} --strip-components=1 && \\\n")


def test_apt():
    assert docker(apt.install(["python3", "curl", "python3"], comment="tools")) == textwrap.dedent("""\
        # tools
        # DL3008: the suite's security updates replace exact versions; the stable suite and versions.toml fix what matters
        # hadolint ignore=DL3008
        RUN apt-get update && \\
            apt-get install -y --no-install-recommends curl python3 && \\
            apt-get clean && \\
            rm -rf /var/lib/apt/lists/*
        """)


def test_source():
    assert source.fetch("pmix", PIN)[3] == "sha256sum -c /tmp/src/pmix.sha256"
    assert source.cleanup("pmix") == "rm -rf /tmp/src/pmix /tmp/src/pmix.*"


def test_gdrcopy():
    assert docker(gdrcopy.build(PIN)) == (
        "# gdrcopy 9.9 (library only)\n"
        f"RUN {SECRET}{CA_PRELUDE} && \\\n" + fetched("gdrcopy")
        + "    make -C /tmp/src/gdrcopy prefix=/opt/gdrcopy CUDA=/usr/local/cuda lib lib_install && \\\n"
        "    rm -rf /tmp/src/gdrcopy /tmp/src/gdrcopy.*\n")


def _autotools(name, comment, configure):
    return (f"# {comment}\n"
            "# DL3003: configure and make run in the unpacked tree of this one step\n"
            "# hadolint ignore=DL3003\n"
            f"RUN {SECRET}{CA_PRELUDE} && \\\n" + fetched(name)
            + f"    cd /tmp/src/{name} && \\\n    {configure} && \\\n"
            '    make -j"$(nproc)" install && \\\n    cd / && \\\n'
            f"    rm -rf /tmp/src/{name} /tmp/src/{name}.*\n")


def test_ucx():
    assert docker(ucx.build(PIN)) == _autotools(
        "ucx", "UCX 9.9 with CUDA, verbs, rdmacm and gdrcopy",
        "./contrib/configure-release --prefix=/opt/ucx --with-cuda=/usr/local/cuda --with-verbs"
        " --with-rdmacm --with-gdrcopy=/opt/gdrcopy --enable-mt --without-java"
        " --disable-doxygen-doc --disable-logging LDFLAGS=-L/usr/local/cuda/lib64/stubs")


def test_pmix():
    assert docker(pmix.build(PIN)) == _autotools(
        "pmix", "PMIx 9.9",
        "./configure --prefix=/opt/pmix --with-libevent=/usr --with-hwloc=/usr --disable-sphinx")


def test_openmpi():
    assert docker(openmpi.build(PIN)) == _autotools(
        "openmpi", "Open MPI 9.9: CUDA-aware, UCX, PMIx for srun --mpi=pmix",
        "./configure --prefix=/opt/openmpi --with-cuda=/usr/local/cuda --with-ucx=/opt/ucx"
        " --with-pmix=/opt/pmix --with-libevent=/usr --with-hwloc=/usr --with-slurm"
        " --enable-mca-no-build=btl-uct --without-verbs --disable-man-pages")
    assert docker(openmpi.env()) == textwrap.dedent("""\
        ENV OMPI_MCA_pml="ucx" \\
            OMPI_MCA_osc="ucx" \\
            OMPI_MCA_btl="^openib,uct,smcuda" \\
            OMPI_MCA_btl_vader_single_copy_mechanism="none" \\
            UCX_MEMTYPE_CACHE="n" \\
            PMIX_MCA_gds="hash"
        """)
    two = to_docker(Recipe("t", [Stage("build", "b:1"), Stage("runtime", "r:1", openmpi.runtime())]))
    assert two.endswith("AS runtime\nCOPY --from=build /opt/openmpi /opt/openmpi\n")


def test_openmpi_defaults_yield_to_the_caller_in_singularity():
    text = to_singularity(Recipe("t", [Stage("build", "base:1", [openmpi.env()])]))
    environment = text.split("%environment\n", 1)[1]
    assert '    export OMPI_MCA_pml="${OMPI_MCA_pml:-ucx}"\n' in environment
    assert '    export OMPI_MCA_pml="ucx"\n' in text.split("%environment")[0]  # build time


def test_openmpi_debian():
    assert docker(openmpi_debian.env()) == 'ENV OMPI_MCA_btl_vader_single_copy_mechanism="none"\n'


def test_mpi4py():
    assert docker(mpi4py.build("4.1.2", "/usr/bin/mpicc")) == (
        "# mpi4py from source, linked to this image's MPI\n"
        f"RUN {SECRET}{CA_PRELUDE} && \\\n"
        "    MPICC=/usr/bin/mpicc pip install --no-cache-dir --no-binary=mpi4py mpi4py==4.1.2\n")


def test_chainermn_rt():
    assert docker(*chainermn_rt.sources("/s"), chainermn_rt.install("/s", ("gpu",))) == (
        "COPY pyproject.toml /s/pyproject.toml\n"
        "COPY README.md /s/README.md\n"
        "COPY chainermn_rt /s/chainermn_rt\n"
        "COPY slurm /s/slurm\n"
        "# the patched chainer wheel, then chainermn_rt with pyproject's pins\n"
        f"RUN {SECRET}{CA_PRELUDE} && \\\n"
        "    PYTHONPATH=/s python -m chainermn_rt.compat.build_chainer --out /tmp/wheels && \\\n"
        "    pip install --no-cache-dir --find-links /tmp/wheels '/s[gpu]'\n")


def test_python_venv():
    assert docker(*python_venv.build("/p", "26.3"), python_venv.env("/p", "/opt/mpi/bin")) == (
        f"RUN {SECRET}{CA_PRELUDE} && \\\n"
        "    python3 -m venv /p/venv && \\\n"
        "    /p/venv/bin/pip install --no-cache-dir pip==26.3\n"
        'ENV PATH="/p/venv/bin:/opt/mpi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \\\n'
        '    VIRTUAL_ENV="/p/venv" \\\n'
        '    PIP_NO_CACHE_DIR="1" \\\n'
        '    PIP_DISABLE_PIP_VERSION_CHECK="1"\n')


def test_cupy():
    assert docker(cupy.env("/v", "3.12", "/opt/openmpi/lib")) == (
        'ENV LD_LIBRARY_PATH="/v/lib/python3.12/site-packages/nvidia/cudnn/lib:'
        '/v/lib/python3.12/site-packages/nvidia/nccl/lib:/opt/openmpi/lib"\n')


def test_user():
    assert docker(*user.runtime("rt", 1000)) == (
        "RUN useradd --create-home --uid 1000 --shell /bin/bash rt\n"
        "USER 1000:1000\n"
        "WORKDIR /home/rt\n")


def test_metadata():
    assert docker(metadata.labels("cpu", "0.1.0", {"openmpi": "4.1.4"}, {"numpy": "2.4.6"}),
                  metadata.copy_versions("cpu")) == textwrap.dedent("""\
        LABEL org.opencontainers.image.title="chainermn-rt-cpu" \\
              org.opencontainers.image.description="ChainerMN (Chainer 7.8.1) data-parallel training with chainermn_rt" \\
              org.opencontainers.image.version="0.1.0" \\
              org.opencontainers.image.licenses="MIT" \\
              io.chainermn-rt.numpy="2.4.6" \\
              io.chainermn-rt.openmpi="4.1.4"
        COPY containers/cpu/VERSIONS /opt/chainermn_rt/VERSIONS
        """)
