# chainermn-rt: every target works from a fresh Debian 12 machine as root.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
RT      := $(VENV)/bin/chainermn-rt
WHEELS  := build/wheels
FLAVOR  ?= cpu
# Debian packages the bundle uses on the build/login host (libmpich12: the site MPI the image
# tests bind in; it installs no `mpi` alternative, Open MPI stays the host's mpicc).
DEBIAN_PACKAGES := python3-venv python3-dev build-essential git \
	openmpi-bin libopenmpi-dev munge slurmctld slurmd slurm-client slurmdbd mariadb-server \
	iproute2 numactl hwloc-nox shellcheck lmod tcl8.6 \
	docker.io charliecloud debootstrap debian-archive-keyring xz-utils ca-certificates \
	libjpeg62-turbo-dev libmpich12 libfabric-bin \
	makeself libbsd-dev libslurm-dev squashfs-tools jq parallel squashfuse fuse-overlayfs
# the sandbox's unprivileged user on the Debian 12 stack (the debian13 root has its own)
SANDBOX_USER := chainermn

.PHONY: help setup apt user pyxis venv host-mpich test test-fast bench lint demo sandbox-up sandbox-down \
	recipes image image-doctor base sif sqfs offline-wheels install-wheels install reframe-venv clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

setup: apt user venv pyxis host-mpich  ## install Debian packages, the .venv, enroot and pyxis (SOURCES=DIR: their release tars), build/mpich (idempotent)

apt:  ## install the Debian packages (as root; skipped when all are present)
	@missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

user:  ## the sandbox's unprivileged user for jobs on the Debian 12 stack (as root; once)
	@id -u $(SANDBOX_USER) >/dev/null 2>&1 || \
	  useradd --user-group --create-home --shell /bin/bash $(SANDBOX_USER)

# the stacks whose nodes get enroot and pyxis (debian13: built inside the Debian 13 root,
# which this builds the first time)
PYXIS_STACKS ?= debian12 debian13

pyxis: venv  ## enroot and pyxis for the sandbox's nodes, pinned in containers/versions.toml (SOURCES=DIR, else downloaded; PYXIS_STACKS; once)
	for stack in $(PYXIS_STACKS); do \
	  $(RT) sandbox pyxis --stack $$stack $(if $(SOURCES),--sources "$(SOURCES)") || exit; \
	done

venv: $(VENV)/.installed  ## the virtual environment with chainermn-rt, the patched chainer and test tools

$(VENV)/.installed: pyproject.toml chainermn_rt/compat/chainer_fixes.py chainermn_rt/data/_jpeg.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip==26.3
	$(PY) -m chainermn_rt.compat.build_chainer --out $(WHEELS)
	$(PY) -m pip install -q --find-links $(WHEELS) -e '.[test,plot,dali]' $(WHEELS)/chainer-*.whl
	touch $@

HOST_MPICH := build/mpich
host-mpich: $(HOST_MPICH)/.installed  ## MPICH's wheel in build/mpich: a site's MPICH for the bind model's tests

$(HOST_MPICH)/.installed: pyproject.toml | $(VENV)/.installed
	rm -rf $(HOST_MPICH)
	$(PY) -m pip install -q --no-deps --prefix $(HOST_MPICH) $$($(PY) -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["host-mpich"])')
	touch $@

# make test runs two pytest processes side by side (their output one after the other): the
# first, the tests on the Debian 12 sandbox and Docker's (the images build in the background
# as it starts); the second, the tests that need neither (CPU-bound: they fill the time the
# first spends waiting on Slurm, MPI and the image builds) and the Debian 13 root's that need
# no Docker image (own root and sandbox). On 2 cores the suite takes minutes less.
BESIDE := (debian13 and not docker) or not (slurm or docker or debian13)
PYTEST := $(VENV)/bin/pytest -ra --durations=25

test: setup  ## run the whole test suite (real MPI, Slurm 22.05 and 24.11, Docker, Charliecloud, Apptainer)
	mkdir -p build/test-logs
	$(PYTEST) -p no:cacheprovider -m '$(BESIDE)' > build/test-logs/beside.log 2>&1 & \
	second=$$!; first=0; \
	$(PYTEST) -m 'not ($(BESIDE))' || first=$$?; \
	wait $$second && other=0 || other=$$?; \
	echo "=== the second pytest (-m '$(BESIDE)'), exit status $$other:"; \
	cat build/test-logs/beside.log; \
	[ $$first -eq 0 ] && [ $$other -eq 0 ]

test-fast: venv  ## tests that need neither the sandbox nor Docker
	$(VENV)/bin/pytest -ra -m 'not slurm and not docker'

bench: venv  ## measure the CPU communicator, where its time goes, and weak scaling (2 ranks)
	$(PY) -m bench.allreduce
	$(PY) -m bench.exchange_floor
	$(PY) -m bench.weak_scaling

demo: setup  ## the main command: Slurm sandbox up, ChainerMN MNIST on 2 nodes x 2 ranks, results
	$(PY) examples/sandbox_demo.py

sandbox-up: setup  ## start the local Slurm sandbox (2 nodes x 4 fake GPUs; NODES=1-32; SITE=sandbox-dgx: DGX-shaped, 8 GPUs; SITE=sandbox-pyxis: pyxis and enroot on the nodes; STACK=debian13: Slurm 24.11, PMIx 5, Open MPI 5, Apptainer); see docs/sandbox.md
	$(RT) sandbox up $(if $(SITE),--site $(SITE)) $(if $(NODES),--nodes $(NODES)) $(if $(STACK),--stack $(STACK))

sandbox-down: venv  ## stop the sandbox: every process it started, its namespaces and links
	$(RT) sandbox down $(if $(SITE),--site $(SITE))

lint: venv  ## ruff, shellcheck and hadolint
	$(VENV)/bin/ruff check chainermn_rt tests examples bench containers
	shellcheck .ci/run
	$(VENV)/bin/hadolint containers/cpu/Dockerfile containers/gpu/Dockerfile \
	  containers/gpu-upstream/Dockerfile containers/gpu-dali/Dockerfile

recipes:  ## regenerate containers/{cpu,gpu}/ from containers/versions.toml, blocks and pyproject
	$(PYTHON) -m containers.generate

base:  ## Debian base image by debootstrap from the host's apt mirror (no registry needed)
	$(PYTHON) -m containers.base

BUILD_IMAGE = $(PYTHON) -m containers.build image --flavor $(FLAVOR) \
	  $(if $(ENGINE),--engine $(ENGINE)) $(if $(BASE),--base $(BASE))
# Written by every image build: the image's tag and id. make sif builds the image when this
# is missing or older than the recipe, and leaves an existing one alone.
IMAGE_ID = build/images/chainermn-rt-$(FLAVOR).image-id

image:  ## build FLAVOR=cpu|gpu|gpu-upstream|gpu-dali (ENGINE=docker|podman|buildah; BASE=image for both stages)
	$(BUILD_IMAGE)

$(IMAGE_ID): pyproject.toml $(wildcard containers/$(FLAVOR)/Dockerfile)
	$(BUILD_IMAGE)

image-doctor:  ## run `chainermn-rt doctor --image` inside the built FLAVOR image (exit 1 on any FAIL)
	$(PYTHON) -m containers.build doctor --flavor $(FLAVOR)

sif: $(if $(FROM_DEF),,$(IMAGE_ID))  ## build/images/chainermn-rt-FLAVOR.sif from the image, built first when missing (FROM_DEF=1: from the .def alone); the host's apptainer, else the Debian 13 root's
	$(PYTHON) -m containers.build sif --flavor $(FLAVOR) $(if $(FROM_DEF),--from-definition)

sqfs:  ## SquashFS of the built FLAVOR image for Charliecloud and enroot/pyxis, in build/images/
	$(PYTHON) -m containers.build sqfs --flavor $(FLAVOR)

install-wheels: venv  ## wheels of the host's chainermn-rt for `make install` (for $(PYTHON)'s version)
	$(PY) -m containers.offline_wheels --host $(PYTHON) --out build/install-wheels

install: install-wheels  ## make install SITE=FILE PREFIX=DIR [IMAGE=PATH]: the bundle and its module files (docs/install.md)
	$(RT) install --site "$(SITE)" --prefix "$(PREFIX)" $(if $(IMAGE),--image "$(IMAGE)") \
		--wheels build/install-wheels --python $(PYTHON)

reframe-venv: venv  ## ReFrame 4.10.4 for the checks in chainermn_rt/reframe (build/reframe-venv; docs/reframe.md)
	$(PYTHON) -m venv build/reframe-venv
	build/reframe-venv/bin/pip install -q --no-deps $$($(PY) -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["reframe"])')
	build/reframe-venv/bin/pip install -q --no-deps .

offline-wheels: venv  ## what tests/gpu_check.py's offline GPU machine lacks, in build/offline-wheels (docs/benchmarks.md)
	$(PY) -m containers.offline_wheels --out build/offline-wheels

clean:  ## remove build outputs (not the venv)
	rm -rf build dist *.egg-info
