"""The committed recipes: generated from one source of truth, in step with each other, clean."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from containers import generate
from containers.base import mirror_from_apt
from containers.flavors import FLAVORS, recipe
from containers.recipe import (
    CA_BUNDLE,
    CA_PRELUDE,
    HOST_CA_ARG,
    MIRROR_ARG,
    Copy,
    Recipe,
    Run,
    Stage,
)
from containers.versions import load, python_pins

from conftest import PYTHON, REPO

HADOLINT = Path(PYTHON).parent / "hadolint"


def test_committed_recipes_match_the_generator():
    proc = subprocess.run([PYTHON, "-m", "containers.generate", "--check"], cwd=REPO,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_check_names_a_drifted_file(tmp_path, monkeypatch):
    monkeypatch.setattr(generate, "HERE", tmp_path / "containers")
    assert generate.main([]) == 0  # writes a fresh set under tmp_path
    dockerfile = tmp_path / "containers" / "cpu" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("4.1.2", "4.1.1"))
    assert generate.main(["--check"]) == 1
    assert generate.main(["--check", "gpu"]) == 0


def _docker_stages(text: str) -> dict[str, dict]:
    """A small reader of our Dockerfiles: per stage base, copies, env, labels, RUN commands."""
    text = re.sub(r"\s*\\\n\s*", " ", text)
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.MULTILINE))
    stages, cur = {}, None
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "FROM":
            base, name = re.fullmatch(r"\$\{(\w+)\} AS (\S+)", rest).groups()
            cur = stages[name] = {"base": args[base], "files": [], "from": {}, "env": [],
                                  "labels": [], "run": [], "user": None}
        elif word == "COPY":
            frm = re.match(r"--from=(\S+) (.*)", rest)
            if frm:
                cur["from"].setdefault(frm.group(1), []).append(frm.group(2))
            else:
                cur["files"].append(rest)
        elif word in ("ENV", "LABEL"):
            pairs = re.findall(r'(\S+?)="((?:[^"\\]|\\.)*)"', rest)
            cur["env" if word == "ENV" else "labels"] += pairs
        elif word == "RUN":
            rest = re.sub(r"^(--mount=\S+ )+", "", rest)
            cur["run"] += [c for c in rest.split(" && ") if c != CA_PRELUDE]
        elif word == "USER":
            cur["user"] = rest
    return stages


def _pair(line: str, sep: str) -> tuple[str, str]:
    key, value = line.split(sep, 1)
    value = value.strip().strip('"')
    default = re.fullmatch(rf"\$\{{{re.escape(key)}:-(.*)\}}", value)
    return key, default.group(1) if default else value


CA_FILES_LINE = f"{{{{ {HOST_CA_ARG} }}}} {CA_BUNDLE}"


def _for_spython(definition: Path, tmp_path: Path) -> Path:
    """The definition as spython reads it: spython knows only ``Bootstrap: docker`` (and takes
    a comment naming a bootstrap for a header), so comments go and the debootstrap header
    becomes the Debian image it stands for."""
    d = generate.debootstrap()
    text = "\n".join(line for line in definition.read_text().splitlines()
                     if not line.startswith("#"))
    text = text.replace(f"Bootstrap: debootstrap\nOSVersion: {d.suite}\nMirrorURL: "
                        f"{{{{ {MIRROR_ARG} }}}}\n", f"Bootstrap: docker\nFrom: {d.image}\n")
    (tmp_path / "spython.def").write_text(text)
    return tmp_path / "spython.def"


@pytest.mark.parametrize("flavor", FLAVORS, ids=lambda f: f"{f}-flavour")
def test_singularity_definition_describes_the_dockerfile(flavor, tmp_path):
    from spython.main.parse.parsers import SingularityParser

    folder = REPO / "containers" / flavor
    docker = _docker_stages((folder / "Dockerfile").read_text())
    sing = SingularityParser(str(_for_spython(folder / "chainermn-rt.def", tmp_path))).recipe
    assert list(sing) == list(docker) == ["build", "runtime"]
    for name, d in docker.items():
        s = sing[name]
        assert s.fromHeader == d["base"]
        # the build host's CA bundle: copied into the stages that download, never the image
        downloads = any(CA_PRELUDE in line for line in s.install)
        assert s.files == ([CA_FILES_LINE] if downloads else []) + d["files"]
        assert not (downloads and name == "runtime")
        assert s.layer_files == d["from"]
        assert [_pair(e, "=") for e in s.environ] == d["env"]
        assert [tuple(label.split(" ", 1)) for label in s.labels] == d["labels"]
        post = [c for c in s.install if c not in ("set -eu", CA_PRELUDE)
                and not c.startswith(("#", "export "))]
        assert post == d["run"]
    assert docker["runtime"]["user"] == f"{load()['image']['uid']}:{load()['image']['uid']}"


@pytest.mark.parametrize("flavor", FLAVORS, ids=lambda f: f"{f}-flavour")
def test_debian_definitions_bootstrap_from_the_archive_not_a_registry(flavor):
    """Apptainer builds the Debian flavours from Debian's mirror (the MIRROR build argument,
    default versions.toml's) and PyPI alone: no stage names a registry's image."""
    text = (REPO / "containers" / flavor / "chainermn-rt.def").read_text()
    d = generate.debootstrap()
    headers = re.findall(r"^Bootstrap: .*\n(?:\w+: .*\n)*", text, flags=re.MULTILINE)
    assert len(headers) == 2
    if flavor == "gpu-upstream":  # NVIDIA's CUDA images: a registry
        assert all(h.startswith("Bootstrap: docker\nFrom: nvidia/cuda:") for h in headers)
        assert "MIRROR" not in text
        return
    assert headers == [f"Bootstrap: debootstrap\nOSVersion: {d.suite}\nMirrorURL: "
                       f"{{{{ {MIRROR_ARG} }}}}\nStage: {name}\n" for name in ("build", "runtime")]
    # no default: the builder's mirror, never one of ours
    assert not re.search(rf"^\s+{MIRROR_ARG}=", text, flags=re.MULTILINE)
    assert "Bootstrap: docker" not in text and d.image not in text


@pytest.mark.parametrize("flavor", FLAVORS, ids=lambda f: f"{f}-flavour")
def test_hadolint_clean(flavor):
    dockerfile = REPO / "containers" / flavor / "Dockerfile"
    proc = subprocess.run([str(HADOLINT), "--failure-threshold", "info", str(dockerfile)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = dockerfile.read_text()
    for ignored in re.findall(r"# hadolint ignore=(\S+)", text):
        for rule in ignored.split(","):
            reason = re.search(rf"^# {rule}: \S", text, flags=re.MULTILINE)
            assert reason, f"{rule} ignored without a reason"


def test_hadolint_catches_a_broken_recipe(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text((REPO / "containers/cpu/Dockerfile").read_text()
                   .replace("--no-install-recommends ", ""))
    proc = subprocess.run([str(HADOLINT), str(bad)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "DL3015" in proc.stdout


def test_python_pins_are_not_repeated_in_versions_toml():
    text = (REPO / "containers/versions.toml").read_text().lower()
    for name in python_pins(("gpu",)):
        assert not re.search(rf"^\s*\[?{re.escape(name)}\]?\s*=?", text, flags=re.MULTILINE), name


def test_every_source_tarball_is_pinned_by_sha256():
    sources = {k: v for k, v in load().items() if isinstance(v, dict) and "url" in v}
    assert set(sources) == {"gdrcopy", "ucx", "pmix", "openmpi", "enroot", "pyxis"}
    for name, pin in sources.items():
        # the images' downloads as they are; the sandbox's enroot and pyxis: their tar's
        digest = pin["tar_sha256"] if name in ("enroot", "pyxis") else pin["sha256"]
        assert re.fullmatch(r"[0-9a-f]{64}", digest), name
        assert pin["version"] in pin["url"], name


def test_versions_file_lists_the_stack():
    cpu = tomllib.loads((REPO / "containers/cpu/VERSIONS").read_text())
    gpu = tomllib.loads((REPO / "containers/gpu/VERSIONS").read_text())
    upstream = tomllib.loads((REPO / "containers/gpu-upstream/VERSIONS").read_text())
    assert cpu["flavor"] == "cpu" and cpu["system"]["openmpi"] == "4.1.4"
    assert load()["debian"]["openmpi"].startswith(cpu["system"]["openmpi"] + "-")
    assert cpu["python"] == python_pins()
    assert "cupy-cuda12x" not in cpu["python"]
    for image in (gpu, upstream):
        assert image["python"] == python_pins(("gpu",))
        assert image["python"]["cupy-cuda12x"].startswith("13.")
        assert image["python"]["nvidia-cudnn-cu12"].startswith("8.9.")
        assert image["system"]["openmpi"].startswith(("4.1.", "5.0."))
    # the gpu image's CUDA is its runtime wheel's; the same 12.x as the upstream CUDA image
    assert gpu["system"]["cuda"] == python_pins(("gpu",))["nvidia-cuda-runtime-cu12"]
    assert gpu["system"]["cuda"].split(".")[:2] == upstream["system"]["cuda"].split(".")[:2]
    assert gpu["system"]["ucx"] == "1.13.1" and gpu["system"]["pmix"] == cpu["system"]["pmix"]
    assert "gdrcopy" not in gpu["system"] and "gdrcopy" in upstream["system"]


def _stages(flavor: str) -> dict[str, str]:
    text = (REPO / "containers" / flavor / "Dockerfile").read_text()
    build, runtime = text.split(" AS build\n", 1)[1].split(" AS runtime\n", 1)
    return {"build": build, "runtime": runtime}


def test_gpu_recipe_builds_from_debian_sources_and_pypi_wheels():
    stages = _stages("gpu")
    for needle in ("apt-get source --download-only ucx=1.13.1-1",
                   "dpkg-source -x ucx_1.13.1-1.dsc",
                   "apt-get source --download-only openmpi=4.1.4-3",
                   "./autogen.sh", "--with-cuda=/usr/local/cuda --with-verbs --with-rdmacm",
                   "--with-ucx=/opt/ucx", "/pmix2 --with-libevent=external", "--with-slurm",
                   "libpmix-dev", "libibverbs-dev", "librdmacm-dev",
                   "nvidia-cuda-runtime-cu12==", "nvidia-nvml-dev-cu12==",
                   "-Wl,-soname,libcuda.so.1", "-Wl,-soname,libnvidia-ml.so.1",
                   "pip install --only-binary=mpi4py mpi4py==", "cupy-cuda12x==",
                   "nvidia-nccl-cu12==", "nvidia-cudnn-cu12==", "'/opt/chainermn_rt/src[gpu]'"):
        assert needle in stages["build"], needle
    assert "ARG BUILD_BASE=debian:bookworm-slim" in (REPO / "containers/gpu/Dockerfile").read_text()
    assert "curl" not in stages["build"] and "http" not in stages["build"]  # apt and pip only
    runtime = stages["runtime"]
    for needle in ("libpmix2", "libibverbs1", "librdmacm1", "ibverbs-providers", "ldconfig",
                   "COPY --from=build /opt/ucx /opt/ucx", 'OMPI_MCA_pml="ucx"',
                   "libfabric1=1.17.0-3", "libfabric-bin=1.17.0-3"):
        assert needle in runtime, needle
    # no compilers, stubs, sources or -dev packages reach the runtime stage
    for needle in ("build-essential", "-dev", "stubs", "/usr/local/cuda", "/tmp/src", "gcc"):
        assert needle not in runtime, needle


def test_gpu_dali_is_the_gpu_recipe_and_dalis_step():
    """The opt-in gpu-dali image: exactly the gpu image's text, with DALI's step before
    chainermn_rt's sources, the dali extra installed and listed, and its own name."""
    gpu = (REPO / "containers/gpu/Dockerfile").read_text()
    dali = {k: v for k, v in python_pins(("dali",)).items() if k not in python_pins()}
    assert dali["nvidia-dali-cuda120"] == "2.4.0" and "numpy" not in dali
    step = ("# NVIDIA DALI and what it needs (pyproject's dali extra)\n"
            "RUN --mount=type=cache,target=/root/.cache/pip --mount=type=secret,id=ca-bundle,"
            f"target=/run/secrets/ca-bundle {CA_PRELUDE} && \\\n"
            f"    pip install {' '.join(f'{k}=={dali[k]}' for k in sorted(dali))}\n")
    sources = "COPY pyproject.toml /opt/chainermn_rt/src/pyproject.toml\n"
    cudnn = '      io.chainermn-rt.nvidia-cudnn-cu12="8.9.7.29" \\\n'
    want = (gpu.replace(sources, step + sources)
            .replace("/opt/chainermn_rt/src[gpu]'", "/opt/chainermn_rt/src[gpu,dali]'")
            .replace("containers/gpu/VERSIONS", "containers/gpu-dali/VERSIONS")
            .replace('title="chainermn-rt-gpu"', 'title="chainermn-rt-gpu-dali"')
            .replace(cudnn, cudnn + '      io.chainermn-rt.nvidia-dali-cuda120="2.4.0" \\\n'))
    assert want.count(step) == want.count("src[gpu,dali]'") == 1
    assert (REPO / "containers/gpu-dali/Dockerfile").read_text() == want
    versions = tomllib.loads((REPO / "containers/gpu-dali/VERSIONS").read_text())
    assert versions["flavor"] == "gpu-dali" and versions["python"] == python_pins(("gpu", "dali"))
    assert versions["system"] == tomllib.loads(
        (REPO / "containers/gpu/VERSIONS").read_text())["system"]


def test_gpu_upstream_recipe_has_the_whole_registry_stack():
    text = (REPO / "containers/gpu-upstream/Dockerfile").read_text()
    for needle in ("nvidia/cuda:12.", "libibverbs-dev", "librdmacm-dev",
                   "--with-cuda=/usr/local/cuda",
                   "--with-ucx=/opt/ucx", "--with-pmix=/opt/pmix", "--with-gdrcopy=/opt/gdrcopy",
                   "--with-verbs", "pip install --only-binary=mpi4py mpi4py==",
                   "'/opt/chainermn_rt/src[gpu]'",
                   'OMPI_MCA_pml="ucx"', "sha256sum -c"):
        assert needle in text, needle
    runtime = _stages("gpu-upstream")["runtime"]
    assert "build-essential" not in runtime and "-dev" not in runtime


@pytest.mark.parametrize("flavor", FLAVORS, ids=lambda f: f"{f}-flavour")
def test_mpi4py_is_the_wheel_and_no_recipe_chooses_its_mpi(flavor):
    """Both MPI families' back-ends, the job's variables choosing (Apptainer would let an
    image's MPI4PY_MPIABI win over the job's)."""
    folder = REPO / "containers" / flavor
    for name in ("Dockerfile", "chainermn-rt.def"):
        text = (folder / name).read_text()
        assert "MPI4PY_" not in text and "--no-binary" not in text, name
        assert f"pip install --only-binary=mpi4py mpi4py=={python_pins()['mpi4py']}" in text


@pytest.mark.parametrize("flavor", ["cpu", "gpu", "gpu-dali"], ids=lambda f: f"{f}-flavour")
def test_libfabric_is_in_the_debian_runtime_stages(flavor):
    version = load()["debian"]["libfabric"]
    runtime = _stages(flavor)["runtime"]
    assert f"libfabric1={version} " in runtime and f"libfabric-bin={version} " in runtime
    assert "libfabric" not in _stages(flavor)["build"]
    versions = tomllib.loads((REPO / "containers" / flavor / "VERSIONS").read_text())
    assert versions["system"]["libfabric"] == version.split("-")[0]


def test_pip_downloads_are_cached_outside_the_layers():
    for flavor in FLAVORS:
        text = (REPO / "containers" / flavor / "Dockerfile").read_text()
        installs = [line for line in re.sub(r"\s*\\\n\s*", " ", text).splitlines()
                    if line.startswith("RUN ") and "pip install" in line]
        cached = [line for line in installs if "--mount=type=cache,target=/root/.cache/pip" in line]
        # every pip install keeps its downloads in the cache mount (mpi4py's wheel too)
        assert len(cached) == len(installs) >= 3, flavor
        assert all("--no-cache-dir" not in line for line in cached), flavor
    assert 'PIP_NO_CACHE_DIR="1"' in _stages("cpu")["runtime"]
    assert "PIP_NO_CACHE_DIR" not in _stages("cpu")["build"]


def test_a_copy_that_singularity_would_reorder_is_refused():
    stage = Stage("build", "b:1", [Run(("make -C /src",)), Copy("x", "/src")])
    with pytest.raises(ValueError, match="COPY to /src follows a RUN"):
        Recipe("bad", [stage]).check()


@pytest.mark.parametrize("flavor", FLAVORS, ids=lambda f: f"{f}-flavour")
def test_dockerignore_keeps_only_what_the_recipe_copies(flavor):
    keep = [line[1:] for line in (REPO / f"containers/{flavor}/Dockerfile.dockerignore")
            .read_text().splitlines() if line.startswith("!")]
    copied = [c.src for s in recipe(flavor).stages for c in s.steps
              if isinstance(c, Copy) and c.from_stage is None]
    assert sorted(keep) == sorted(copied)


def test_mirror_is_read_from_apt(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.invalid/debian/\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://sec.invalid/debian-security\n"
        "Suites: bookworm-security\n")
    assert mirror_from_apt(tmp_path) == "http://mirror.invalid/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("# deb http://no.invalid bookworm main\n"
                                           "deb [signed-by=/k.gpg] http://one.invalid/d bookworm"
                                           " main\n")
    assert mirror_from_apt(tmp_path) == "http://one.invalid/d"
    (tmp_path / "sources.list").write_text("")
    with pytest.raises(RuntimeError, match="no 'deb' source for bookworm"):
        mirror_from_apt(tmp_path)


def test_no_mirror_host_is_written_in_the_repository():
    for path in (REPO / "containers").rglob("*"):
        if path.is_file() and path.suffix in ("", ".py", ".toml", ".def"):
            assert "deb.debian.org" not in path.read_text(errors="replace"), path
