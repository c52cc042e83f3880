"""The profile's ``[mpi]``, ``[fabric]`` and ``[nccl]`` tables: the host's MPI bound into the
container (``bind``) or the image's own (``hybrid``), the fabric and NCCL plugin: what the Plan
renders for them, the srun plugin a family needs, and bad tables refused in one line naming
the key (exit 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.rank_contract import library_path
from chainermn_rt.render import render
from chainermn_rt.site import load_site

from conftest import REPO

QUAD = (REPO / "slurm/sites/quad-gpu.toml").read_text()  # apptainer, srun --mpi=pmix
BIND = ('\n[mpi]\nmodel = "bind"\nfamily = "mpich"\n'
        'library = "/opt/mpich/lib/libmpi.so.12"\npaths = ["/opt/mpich/lib", "/opt/fabric/lib"]\n')


def _site(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_text(text)
    return load_site(path)


def test_bind_renders_the_binds_and_the_variables_that_choose_the_library(tmp_path):
    site = _site(tmp_path, QUAD.replace('srun_mpi = "pmix"', 'srun_mpi = "pmi2"') + BIND)
    script = render(make_plan(site, Request(nodes=2, command=("python3", "train.py"))))
    assert ("export MPI4PY_MPIABI=mpich\nexport MPI4PY_LIBMPI=/opt/mpich/lib/libmpi.so.12\n"
            "export CHAINERMN_RT_HOST_LIBS=/opt/mpich/lib:/opt/fabric/lib\n") in script
    assert "srun --mpi=pmi2 " in script
    assert ("apptainer exec --nv --bind /scratch --bind /datasets:/datasets:ro "
            "--bind /opt/mpich/lib:/opt/mpich/lib --bind /opt/fabric/lib:/opt/fabric/lib "
            "/shared/images/chainermn-rt_gpu.sif") in script


def test_the_hybrid_model_renders_nothing_new(tmp_path):
    plain = make_plan(_site(tmp_path, QUAD), Request(nodes=1, command=("x",)))
    hybrid = make_plan(_site(tmp_path, QUAD + '\n[mpi]\nmodel = "hybrid"\n'),
                       Request(nodes=1, command=("x",)))
    assert render(plain) == render(hybrid)


@pytest.mark.parametrize("srun_mpi, family, allowed", [
    ("pmix", "mpich", "pmi2 | cray_shasta"), ("pmi2", "openmpi", "pmix")])
def test_a_plugin_that_would_start_one_rank_worlds_is_refused(tmp_path, srun_mpi, family,
                                                             allowed):
    site = _site(tmp_path, QUAD.replace('srun_mpi = "pmix"', f'srun_mpi = "{srun_mpi}"')
                 + BIND.replace('"mpich"', f'"{family}"'))
    with pytest.raises(UserError) as err:
        make_plan(site, Request(nodes=1, command=("x",)))
    assert str(err.value) == (
        f"srun_mpi: {srun_mpi} cannot start {family}'s ranks in one world (they would start as "
        f"one-rank worlds); allowed with mpi.family = \"{family}\": {allowed}")


def test_mpirun_cannot_start_the_hosts_mpi(tmp_path):
    site = _site(tmp_path, QUAD.replace('srun_mpi = "pmix"', 'srun_mpi = "pmi2"') + BIND)
    with pytest.raises(UserError, match=r"^--launcher: mpirun with mpi.model = \"bind\""):
        make_plan(site, Request(nodes=1, launcher="mpirun", command=("x",)))


@pytest.mark.parametrize("table, line", [
    ('model = "host"', "mpi.model: 'host' is not allowed; allowed: hybrid | bind"),
    ('family = "mpich"', 'mpi.family: only with model = "bind"; allowed: no family with the '
                         "hybrid model (the image's own MPI)"),
    ('model = "bind"\nfamily = "intel"', "mpi.family: 'intel' is not allowed; allowed: mpich | "
     "openmpi (the host library's ABI: mpich for Cray MPICH, MPICH, Intel MPI, MVAPICH)"),
    ('model = "bind"\nfamily = "mpich"', "mpi.library: missing; allowed: the host's libmpi the "
     "ranks load (libmpi.so.12 or a file behind that soname)"),
    ('model = "bind"\nfamily = "mpich"\nlibrary = "/a/libmpi.so.12"\npaths = ["/b"]',
     "mpi.library: /a/libmpi.so.12 is in none of mpi.paths; allowed: a library in one of the "
     "folders that are bound"),
    ('model = "bind"\nfamily = "mpich"\nlibrary = "/a/libmpi.so.12"\npaths = ["/a", "/b,c"]',
     "mpi.paths[1]: '/b,c' is not allowed; allowed: an absolute path without spaces, ',', ':' "
     "or '$'"),
    ('model = "bind"\nfamily = "mpich"\nlibrary = "/a/libmpi.so.12"\npaths = []',
     "mpi.paths: '[]' is not allowed; allowed: a list of the host folders the library and what "
     "it needs are in"),
    ("models = 1", "mpi.models: not a key of [mpi]; allowed: model, family, library, paths"),
])
def test_a_bad_mpi_table_is_one_line_naming_the_key(tmp_path, table, line):
    path = tmp_path / "p.toml"
    path.write_text(f"{QUAD}\n[mpi]\n{table}\n")
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "site", "check", str(path)],
                          capture_output=True, text=True)
    assert (proc.returncode, proc.stderr) == (2, f"chainermn-rt site: error: {path}: {line}\n")


def test_the_rank_step_puts_the_hosts_folders_first_and_keeps_the_images():
    assert library_path({}) is None
    assert library_path({"CHAINERMN_RT_HOST_LIBS": "/h/a:/h/b", "LD_LIBRARY_PATH":
                         "/usr/local/cuda/lib64:/h/b"}) == "/h/a:/h/b:/usr/local/cuda/lib64"


def test_the_fabric_and_nccl_plugin_render_their_variables_and_folders(tmp_path):
    site = _site(tmp_path, QUAD + '\n[fabric]\nkind = "ofi"\nprovider = "efa"\n'
                 'paths = ["/opt/amazon/efa/lib64"]\n\n[nccl]\n'
                 'net_plugin = "/opt/amazon/ofi-nccl/lib/libnccl-net.so"\n')
    script = render(make_plan(site, Request(nodes=1, command=("x",))))
    assert ("export FI_PROVIDER=efa\nexport NCCL_NET_PLUGIN=/opt/amazon/ofi-nccl/lib/"
            "libnccl-net.so\nexport NCCL_NET='AWS Libfabric'\nexport CHAINERMN_RT_HOST_LIBS="
            "/opt/amazon/efa/lib64:/opt/amazon/ofi-nccl/lib\n") in script
    assert ("--bind /opt/amazon/efa/lib64:/opt/amazon/efa/lib64 "
            "--bind /opt/amazon/ofi-nccl/lib:/opt/amazon/ofi-nccl/lib") in script


@pytest.mark.parametrize("table, line", [
    ('[fabric]\nkind = "slingshot"', "fabric.kind: 'slingshot' is not allowed; allowed: ofi | "
     "ucx"),
    ('[fabric]\nkind = "ofi"', "fabric.provider: 'None' is not allowed; allowed: libfabric's "
     "provider name (cxi, efa, verbs, tcp)"),
    ('[fabric]\nkind = "ucx"\nprovider = "cxi"', 'fabric.provider: only with kind = "ofi"; '
     "allowed: no provider with UCX"),
    ('[nccl]\nnet = "x"', "nccl.net_plugin: missing; allowed: the host's plugin library "
     "(libnccl-net.so or libnccl-net-NAME.so)"),
    ('[nccl]\nnet_plugin = "/p/libnccl-net.so"\nnet = "a;b"', "nccl.net: 'a;b' is not allowed; "
     "allowed: the plugin's transport name (NCCL_NET), e.g. \"AWS Libfabric\""),
])
def test_a_bad_fabric_or_nccl_table_is_one_line_naming_the_key(tmp_path, table, line):
    path = tmp_path / "p.toml"
    path.write_text(f"{QUAD}\n{table}\n")
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "site", "check", str(path)],
                          capture_output=True, text=True)
    assert (proc.returncode, proc.stderr) == (2, f"chainermn-rt site: error: {path}: {line}\n")
