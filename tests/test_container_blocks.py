"""Each building block of containers/blocks/, compared with the exact Docker text it generates."""
# ruff: noqa: E501 - golden lines are exactly as long as the generated ones

from __future__ import annotations

import subprocess
import textwrap

import pytest

from containers import compose
from containers.blocks import (
    apt,
    bundle,
    cuda,
    cupy,
    dali,
    debian_source,
    gdrcopy,
    libfabric,
    libjpeg_turbo,
    metadata,
    mpi4py,
    openmpi,
    pmix,
    python_venv,
    source,
    ucx,
    user,
)
from containers.recipe import (
    CA_PRELUDE,
    Block,
    Copy,
    Debootstrap,
    Recipe,
    Run,
    Stage,
    to_docker,
    to_singularity,
)

from conftest import REPO

PIN = {"version": "9.9", "url": "https://example.org/x-9.9.tar.bz2", "sha256": "ab" * 32}
SECRET = "--mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle "
CACHE = "--mount=type=cache,target=/root/.cache/pip "


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
    assert docker(*gdrcopy.block(PIN).build) == (
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


UCX_UPSTREAM = ("./contrib/configure-release --prefix=/opt/ucx --with-cuda=/usr/local/cuda"
                " --with-verbs --with-rdmacm --with-gdrcopy=/opt/gdrcopy --enable-mt"
                " --without-java --without-go --disable-doxygen-doc"
                " LDFLAGS=-L/usr/local/cuda/lib64/stubs")


def test_ucx_upstream():
    block = ucx.upstream(PIN)
    assert docker(*block.build) == _autotools(
        "ucx", "UCX 9.9 with CUDA, verbs, rdmacm and gdrcopy", UCX_UPSTREAM)
    assert block.path == ("/opt/ucx/bin",) and block.library_dirs == ("/opt/ucx/lib",)


def _debian_source(package, version, comment, *configure):
    return (f"# {comment}\n"
            "# DL3003: configure and make run in the unpacked tree of this one step\n"
            "# hadolint ignore=DL3003\n"
            "RUN if [ -f /etc/apt/sources.list.d/debian.sources ]; then sed -i 's/^Types: deb$/"
            "Types: deb deb-src/' /etc/apt/sources.list.d/debian.sources; fi && \\\n"
            "    if [ -f /etc/apt/sources.list ]; then sed -n 's/^deb \\(.*\\)/deb-src \\1/p' "
            "/etc/apt/sources.list > /etc/apt/sources.list.d/deb-src.list; fi && \\\n"
            "    apt-get update && \\\n    mkdir -p /tmp/src && \\\n    cd /tmp/src && \\\n"
            f"    apt-get source --download-only {package}={version} && \\\n"
            f"    dpkg-source -x {package}_{version}.dsc /tmp/src/{package} && \\\n"
            "    rm -rf /var/lib/apt/lists/* && \\\n"
            f"    cd /tmp/src/{package} && \\\n"
            + "".join(f"    {c} && \\\n" for c in configure)
            + '    make -j"$(nproc)" install && \\\n    cd / && \\\n    rm -rf /tmp/src\n')


def test_ucx_debian():
    block = ucx.debian("9.9-1")
    assert docker(*block.build) == _debian_source(
        "ucx", "9.9-1", "UCX 9.9-1 (Debian 12's source) with CUDA, verbs and rdmacm",
        "./autogen.sh",
        "./contrib/configure-release --prefix=/opt/ucx --with-cuda=/usr/local/cuda --with-verbs"
        " --with-rdmacm --without-gdrcopy --enable-mt --without-java --without-go"
        " --disable-doxygen-doc LDFLAGS=-L/usr/local/cuda/lib64/stubs")
    assert {"dpkg-dev", "autoconf", "automake", "libtool", "libnuma-dev"} <= set(block.build_packages)
    assert block.runtime_packages == ("libnuma1",)
    assert debian_source.upstream("9.9-1") == "9.9"


def test_pmix():
    assert docker(*pmix.upstream(PIN).build) == _autotools(
        "pmix", "PMIx 9.9",
        "./configure --prefix=/opt/pmix --with-libevent=/usr --with-hwloc=/usr --disable-sphinx")
    debian = pmix.debian()
    assert debian.build == () and debian.runtime_packages == ("libpmix2",)
    assert "libpmix-dev" in debian.build_packages


OPENMPI_DEFAULTS = textwrap.dedent("""\
    ENV OMPI_MCA_pml="ucx" \\
        OMPI_MCA_osc="ucx" \\
        OMPI_MCA_btl="^openib,uct,smcuda" \\
        OMPI_MCA_btl_vader_single_copy_mechanism="none" \\
        UCX_MEMTYPE_CACHE="n" \\
        PMIX_MCA_gds="hash"
    """)


def test_openmpi_upstream():
    block = openmpi.upstream(PIN)
    assert docker(*block.build) == _autotools(
        "openmpi", "Open MPI 9.9: CUDA-aware, UCX, PMIx for srun --mpi=pmix",
        "./configure --prefix=/opt/openmpi --with-cuda=/usr/local/cuda --with-ucx=/opt/ucx"
        " --with-pmix=/opt/pmix --with-libevent=/usr --with-hwloc=/usr --with-slurm"
        " --enable-mca-no-build=btl-uct --without-verbs --disable-io-romio"
        " --disable-man-pages")
    assert docker(compose.Env(block.defaults, defaults=True)) == OPENMPI_DEFAULTS
    two = to_docker(Recipe("t", [Stage("build", "b:1"), Stage("runtime", "r:1",
                                                              list(block.runtime))]))
    assert two.endswith("AS runtime\nCOPY --from=build /opt/openmpi /opt/openmpi\n")


def test_openmpi_debian_source():
    block = openmpi.debian("9.9-1")
    assert docker(*block.build) == _debian_source(
        "openmpi", "9.9-1",
        "Open MPI 9.9-1 (Debian 12's source): CUDA-aware, UCX, Debian's PMIx for srun "
        "--mpi=pmix, Slurm",
        "./autogen.pl --force",
        "./configure --prefix=/opt/openmpi --with-cuda=/usr/local/cuda --with-ucx=/opt/ucx"
        ' --with-pmix=/usr/lib/"$(dpkg-architecture -qDEB_HOST_MULTIARCH)"/pmix2'
        " --with-libevent=external --with-hwloc=external --with-slurm"
        " --enable-mca-no-build=btl-uct --without-verbs --disable-io-romio --disable-man-pages"
        " --disable-mpi-fortran --disable-oshmem --disable-mpi-java")
    assert docker(compose.Env(block.defaults, defaults=True)) == OPENMPI_DEFAULTS
    assert block.path == ("/opt/openmpi/bin",) and block.library_dirs == ("/opt/openmpi/lib",)
    assert "libhwloc15" in block.runtime_packages


def test_openmpi_debian_4_1_4_gets_the_modex_fence_fix():
    block = openmpi.debian("4.1.4-3")
    copy, run = block.build
    assert copy == Copy("containers/patches/openmpi-4.1.4-modex-fence.patch",
                        "/usr/local/src/patches/openmpi-4.1.4-modex-fence.patch")
    commands = run.commands
    # on top of Debian's patches (dpkg-source -x), before autogen regenerates the build
    at = commands.index(f"patch -p1 -i {copy.dest}")
    assert commands[at - 1] == "cd /tmp/src/openmpi" and commands[at + 1] == "./autogen.pl --force"
    patch = (REPO / copy.src).read_text()
    assert "+++ b/ompi/runtime/ompi_mpi_init.c\n" in patch and "\nDescription: " in "\n" + patch
    assert openmpi.fixes("9.9-1") == ()


def test_openmpi_defaults_yield_to_the_caller_in_singularity():
    stage = compose.runtime_stage("base:1", [openmpi.upstream(PIN)])
    text = to_singularity(Recipe("t", [Stage("build", "b:1"), stage]))
    environment = text.split("%environment\n", 1)[1]
    assert '    export OMPI_MCA_pml="${OMPI_MCA_pml:-ucx}"\n' in environment
    assert '    export OMPI_MCA_pml="ucx"\n' in text.split("%environment")[0]  # build time


def test_singularity_gets_the_ca_bundle_in_downloading_stages_and_debian_from_its_archive():
    download = Run(("pip install x",), network=True)
    recipe = Recipe("t", [Stage("build", "debian:12", [download]),
                          Stage("runtime", "other:1", [Copy("/a", "/a", "build")])])
    text = to_singularity(recipe, Debootstrap("debian:12", "bookworm"))
    build, runtime = text.split("\nBootstrap: ")[1:]
    assert build.startswith("debootstrap\nOSVersion: bookworm\nMirrorURL: {{ MIRROR }}\n"
                            "Stage: build\n\n%arguments\n    HOST_CA=/etc/ssl/certs/ca-certificates.crt\n"
                            "\n%files\n    {{ HOST_CA }} /run/secrets/ca-bundle\n")
    assert f"    {CA_PRELUDE}\n    pip install x\n" in build
    assert runtime.startswith("docker\nFrom: other:1\nStage: runtime\n\n%files from build\n")
    assert "HOST_CA" not in runtime and "%arguments" not in runtime
    # a download in the last stage would leave the bundle in the image: refused
    recipe.stages[1].steps.append(download)
    with pytest.raises(ValueError, match="t: a step of the last stage downloads"):
        to_singularity(recipe)


def test_openmpi_binary():
    block = openmpi.binary()
    assert block.build == block.build_packages == () and block.runtime_packages == ("openmpi-bin",)
    assert docker(compose.Env(block.defaults, defaults=True)) == (
        'ENV OMPI_MCA_btl_vader_single_copy_mechanism="none"\n')


def test_cuda_prefix_and_stubs():
    pins = {"nvidia-cuda-runtime-cu12": "1.2", "nvidia-nvml-dev-cu12": "1.3",
            "nvidia-cuda-nvcc-cu12": "1.4"}
    text = docker(*cuda.wheels(pins).build)
    assert text.startswith(
        "# CUDA headers and runtime from NVIDIA's wheels as the build's CUDA prefix;\n"
        "# libcuda/libnvidia-ml link stubs (build stage only) from the headers\n"
        f"RUN {CACHE}{SECRET}{CA_PRELUDE} && \\\n"
        "    pip install --no-deps --target /tmp/cuda-wheels nvidia-cuda-runtime-cu12==1.2"
        " nvidia-nvml-dev-cu12==1.3 nvidia-cuda-nvcc-cu12==1.4 && \\\n"
        "    mkdir -p /usr/local/cuda/include /usr/local/cuda/lib64/stubs /tmp/stubs && \\\n")
    assert ("    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o /usr/local/cuda/lib64/stubs/libcuda.so"
            " /tmp/stubs/cuda.c && \\\n") in text
    assert text.endswith("    rm -rf /tmp/cuda-wheels /tmp/stubs\n")
    assert cuda.wheels(pins).runtime == ()  # the stubs and the prefix stay in the build stage


def test_cuda_stubs_are_generated_from_a_header(tmp_path):
    """The stub commands, run on a small header: every function and #define'd name is there."""
    include = tmp_path / "include"
    include.mkdir()
    (include / "nvml.h").write_text(
        "#define nvmlInit nvmlInit_v2\n#define nvmlDevice_t struct nvmlDevice_st *\n"
        "int nvmlInit_v2(void);\nint nvmlShutdown(void);\n")
    (tmp_path / "lib64" / "stubs").mkdir(parents=True)
    (tmp_path / "stubs").mkdir()
    commands = [c.replace("/usr/local/cuda", str(tmp_path)).replace("/tmp/stubs",
                                                                     str(tmp_path / "stubs"))
                for c in cuda._stub("libnvidia-ml", "nvml.h", "nvml")]
    subprocess.run(" && ".join(commands), shell=True, check=True)
    stub = tmp_path / "lib64" / "stubs" / "libnvidia-ml.so"
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(stub)], capture_output=True,
                             text=True, check=True).stdout.split()
    assert {"nvmlInit", "nvmlInit_v2", "nvmlShutdown"} <= set(symbols)
    assert "nvmlDevice_t" not in symbols
    soname = subprocess.run(["readelf", "-d", str(stub)], capture_output=True, text=True,
                            check=True).stdout
    assert "[libnvidia-ml.so.1]" in soname


def test_cupy():
    block = cupy.block({"cupy-cuda12x": "13.6.0", "nvidia-nccl-cu12": "2.1"}, "/v")
    assert docker(*block.build) == (
        "# CuPy and the CUDA, cuDNN and NCCL wheels (pyproject's gpu extra)\n"
        f"RUN {CACHE}{SECRET}{CA_PRELUDE} && \\\n"
        "    pip install cupy-cuda12x==13.6.0 nvidia-nccl-cu12==2.1 && \\\n"
        "    rm -f /v/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.alt.so.*"
        " /v/lib/python3*/site-packages/nvidia/cusolver/lib/libcusolverMg.so.*"
        " /v/lib/python3*/site-packages/nvidia/nccl/lib/libnccl_device.*\n")
    assert block.library_dirs == ("/v/lib/python3*/site-packages/nvidia/*/lib",)


def test_dali():
    """DALI's wheels in a step of their own: a change to chainermn_rt does not download them."""
    block = dali.block({"optree": "0.2", "nvidia-dali-cuda120": "9.9"})
    assert docker(*block.build) == (
        "# NVIDIA DALI and what it needs (pyproject's dali extra)\n"
        f"RUN {CACHE}{SECRET}{CA_PRELUDE} && \\\n"
        "    pip install nvidia-dali-cuda120==9.9 optree==0.2\n")
    assert block.runtime == block.library_dirs == block.runtime_packages == ()


def test_compose_registers_library_dirs_and_keeps_build_only_things_out():
    a = Block("a", build=(Run(("make a",)),), build_packages=("gcc", "liba-dev"),
              runtime_packages=("liba1",), path=("/opt/a/bin",), library_dirs=("/opt/a/lib",),
              env=(("A", "1"),), defaults=(("A_MODE", "fast"),))
    b = Block("b", build=(Run(("make b",)),), build_packages=("gcc",), path=("/opt/b/bin",),
              library_dirs=("/opt/b/lib/*",))
    build = docker(*compose.build_stage("x:1", [a, b]).steps)
    assert "apt-get install -y --no-install-recommends gcc liba-dev" in build
    assert build.index("make a") < build.index("make b")
    runtime = docker(*compose.runtime_stage("x:1", [a, b]).steps)
    assert "install -y --no-install-recommends liba1 &&" in runtime
    assert "gcc" not in runtime and "make" not in runtime
    assert ("RUN printf '%s\\n' /opt/a/lib /opt/b/lib/* > /etc/ld.so.conf.d/chainermn-rt.conf"
            " && \\\n    ldconfig\n") in runtime
    assert ('ENV PATH="/opt/a/bin:/opt/b/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:'
            '/sbin:/bin" \\\n    A="1"\nENV A_MODE="fast"\n') in runtime
    # and again for a login shell (enroot's), after Debian's /etc/profile set its own
    assert ("RUN printf '%s\\n' PATH=/opt/a/bin:/opt/b/bin:/usr/local/sbin:/usr/local/bin:"
            "/usr/sbin:/usr/bin:/sbin:/bin 'export PATH' > /etc/profile.d/chainermn-rt-path.sh"
            "\n") in runtime


def test_libjpeg_turbo():
    """The decoder's headers in the build stage, its library in the runtime stage, both pinned."""
    apt = ("# DL3008: the suite's security updates replace exact versions; the stable suite and versions.toml fix what matters\n"
           "# hadolint ignore=DL3008\n"
           "RUN apt-get update && \\\n"
           "    apt-get install -y --no-install-recommends {} && \\\n"
           "    apt-get clean && \\\n"
           "    rm -rf /var/lib/apt/lists/*\n"
           'ENV PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n')
    debian = libjpeg_turbo.debian("1:2.1.5-2")
    assert docker(*compose.build_stage("b:1", [debian]).steps) == apt.format(
        "libjpeg62-turbo-dev=1:2.1.5-2 libjpeg62-turbo=1:2.1.5-2")
    assert docker(*compose.runtime_stage("r:1", [debian]).steps) == apt.format(
        "libjpeg62-turbo=1:2.1.5-2")
    ubuntu = libjpeg_turbo.ubuntu("2.1.5-2ubuntu2")
    assert docker(*compose.runtime_stage("r:1", [ubuntu]).steps) == apt.format(
        "libjpeg-turbo8=2.1.5-2ubuntu2")
    assert ubuntu.build_packages == ("libjpeg-turbo8-dev=2.1.5-2ubuntu2",
                                     "libjpeg-turbo8=2.1.5-2ubuntu2")
    assert debian.build == debian.runtime == ()  # packages only: nothing built, nothing copied


def test_mpi4py():
    """PyPI's wheel (both MPI families' back-ends), never a build; no MPI4PY_* variable set."""
    block = mpi4py.block("4.1.2")
    assert docker(*block.build) == (
        "# mpi4py's wheel: MPICH's and Open MPI's back-ends, one chosen at import\n"
        f"RUN {CACHE}{SECRET}{CA_PRELUDE} && \\\n"
        "    pip install --only-binary=mpi4py mpi4py==4.1.2\n")
    assert block.env == block.defaults == block.build_packages == block.runtime == ()


def test_libfabric():
    """Debian's libfabric and its tools at the pinned version, in the runtime stage only."""
    block = libfabric.debian("1.17.0-3")
    assert docker(*compose.runtime_stage("r:1", [block]).steps) == (
        "# DL3008: the suite's security updates replace exact versions; the stable suite and versions.toml fix what matters\n"
        "# hadolint ignore=DL3008\n"
        "RUN apt-get update && \\\n"
        "    apt-get install -y --no-install-recommends libfabric-bin=1.17.0-3 libfabric1=1.17.0-3 && \\\n"
        "    apt-get clean && \\\n"
        "    rm -rf /var/lib/apt/lists/*\n"
        'ENV PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n')
    assert compose.build_stage("b:1", [block]).steps == [compose.environment([block])]
    assert block.env == block.defaults == block.library_dirs == ()  # FI_* are the job's


def test_chainermn_rt():
    assert docker(*bundle.block("/s", ("gpu",)).build) == (
        "COPY pyproject.toml /s/pyproject.toml\n"
        "COPY README.md /s/README.md\n"
        "COPY chainermn_rt /s/chainermn_rt\n"
        "COPY slurm /s/slurm\n"
        "# the patched chainer wheel, then chainermn_rt with pyproject's pins\n"
        f"RUN {CACHE}{SECRET}{CA_PRELUDE} && \\\n"
        "    PYTHONPATH=/s python -m chainermn_rt.compat.build_chainer --out /tmp/wheels && \\\n"
        "    pip install --find-links /tmp/wheels '/s[gpu]'\n")


def test_python_venv():
    block = python_venv.block("/p", "26.3")
    assert docker(*block.build, compose.environment([block])) == (
        f"RUN {CACHE}{SECRET}{CA_PRELUDE} && \\\n"
        "    python3 -m venv /p/venv && \\\n"
        "    /p/venv/bin/pip install pip==26.3\n"
        'ENV PATH="/p/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \\\n'
        '    VIRTUAL_ENV="/p/venv" \\\n'
        '    PIP_DISABLE_PIP_VERSION_CHECK="1"\n')
    assert block.defaults == (("PIP_NO_CACHE_DIR", "1"),)  # the image's pip keeps no cache


def test_user():
    assert docker(*user.block("rt", 1000).runtime) == (
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
