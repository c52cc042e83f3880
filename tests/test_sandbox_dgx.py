"""The paper's node count on the DGX-shaped sandbox (slurm/sites/sandbox-dgx.toml): 16 nodes
of 8 fake GPUs, one sandbox start shared by a 16-node doctor, a 16-node MNIST job and a
`scaling` series to 16 nodes, at one rank per node (what 2 cores start quickly; the full
16 x 8 doctor is in bench/RESULTS.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from hwloc_fixtures import dgx_h100

from bench.sandbox_costs import synthetic_reports
from chainermn_rt.doctor.cluster import Expected, run_checks
from chainermn_rt.sandbox.settings import STATE_VAR
from chainermn_rt.site import data_dir, load_site, resolve_site

from conftest import REPO

SITE = "sandbox-dgx"
# what cannot pass on fake GPUs, and why; every other check must pass
NOT_APPLICABLE = {"allreduce-gpu": "no rank has a CUDA GPU (CuPy)",
                  "bandwidth": "the site profile gives no [checks] allreduce_busbw_gbps",
                  "fabric": "the profile states no [fabric]",
                  "nccl-plugin": "the profile names no NCCL net plugin"}


def _cli(sb, cwd, *args) -> subprocess.CompletedProcess:
    """``chainermn-rt ARGS`` against ``sb`` (found through its state folder's variable)."""
    env = {**sb.env(), STATE_VAR: str(sb.state_dir)}
    return subprocess.run([sys.executable, "-m", "chainermn_rt", *args], env=env,
                          capture_output=True, text=True, cwd=cwd, timeout=900)


def test_the_shipped_dgx_hardware_is_the_one_site_init_is_tested_with():
    assert (data_dir() / "sites" / "dgx-h100.xml").read_text() == dgx_h100()
    site = load_site(resolve_site(SITE))
    assert site.sandbox.hwloc_xml == data_dir() / "sites" / "dgx-h100.xml"
    batch = site.partition(None)
    dgx = load_site(resolve_site("dgx-h100")).partition("batch")
    assert (batch.nodes, batch.topology.gpus, batch.cpus_per_node) == (32, 8, 112)
    # the DGX's GPU order and HCAs, on this host's two CPUs and one NUMA node (ranks bind)
    assert [s.hcas for s in batch.topology.slots] == [s.hcas for s in dgx.topology.slots]
    assert [(s.cpus, s.numa) for s in batch.topology.slots] == [("0", 0), ("1", 0)] * 4


@pytest.mark.slurm
def test_doctor_on_16_nodes(sandbox_dgx16, tmp_path):
    proc = _cli(sandbox_dgx16, tmp_path, "doctor", "--site", SITE, "--nodes", "16",
                "--gpus-per-node", "1", "--wait-timeout", "600", "--exclude-bad", "bad.txt",
                "--out", "doctor", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert {n: c["reason"] for n, c in checks.items() if c["status"] != "PASS"} == NOT_APPLICABLE
    nodes = ", ".join(f"node{i}" for i in range(1, 17))
    assert checks["reports"]["reason"] == f"16 of 16 ranks reported from 16 node(s): {nodes}"
    assert checks["processor-names"]["reason"] == "16 processor name(s), one per node"
    assert checks["allreduce-cpu"]["reason"] == \
        "MPI Allreduce of CPU buffers over 16 ranks: every element right"
    assert (tmp_path / "bad.txt").read_text() == ""
    # bench/sandbox_costs.py times the checks over reports made from a real rank's: they are
    # those of a healthy 16 x 8 job
    template = json.loads((tmp_path / "doctor" / "ranks.json").read_text())[0]
    made = run_checks(synthetic_reports(template, 16), True, Expected(ranks=128))
    assert {c.name: c.reason for c in made if c.status != "PASS"} == NOT_APPLICABLE
    assert made[0].reason == f"128 of 128 ranks reported from 16 node(s): {nodes}"


@pytest.mark.slurm
def test_mnist_on_16_nodes(sandbox_dgx16, tmp_path):
    """``submit --wait``: ChainerMN trains 4 iterations over 16 nodes; every rank ends with
    the same parameters."""
    proc = _cli(sandbox_dgx16, tmp_path, "submit", "--site", SITE, "--nodes", "16",
                "--gpus-per-node", "1", "--time", "10", "--wait", "--",
                sys.executable, str(REPO / "examples" / "train_mnist.py"), "--n-train", "1600",
                "--n-test", "320", "--unit", "100", "--batchsize", "20", "--iterations", "4",
                "--log-every", "2", "--no-progress", "--out", str(tmp_path / "result"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = re.search(r"^job (\d+): COMPLETED, exit code 0$", proc.stdout, re.MULTILINE)
    assert job, proc.stdout
    out = (tmp_path / f"chainermn-{job.group(1)}.out").read_text()
    assert "16 ranks, communicator" in out, out
    digests = re.findall(r"^rank (\d+) parameters sha256 (\w+)$", out, re.MULTILINE)
    assert [int(r) for r, _ in digests] == list(range(16)), out
    assert len({d for _, d in digests}) == 1, out
    assert re.search(r"^throughput: [\d.]+ images/s \(1280 images in [\d.]+ s, 16 ranks\)$",
                     out, re.MULTILINE), out
    log = json.loads((tmp_path / "result" / "log").read_text())
    assert [e["iteration"] for e in log] == [2, 4]


@pytest.mark.slurm
def test_scaling_series_to_16_nodes(sandbox_dgx16, tmp_path):
    """``scaling --max-nodes 16`` at one rank per node, the smallest benchmark: a chain of 5
    jobs (1, 2, 4, 8, 16 nodes); each point's result counts every rank of its job, on the
    nodes it asked for, and the table has one row per point. No figure is judged."""
    out = tmp_path / "study"
    proc = _cli(sandbox_dgx16, tmp_path, "scaling", "--site", SITE, "--max-nodes", "16",
                "--gpus-per-node", "1", "--time", "10", "--model", "mlp", "--batchsize", "8",
                "--iterations", "2", "--warmup", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = [1, 2, 4, 8, 16]
    names = ["1node"] + [f"{n}nodes" for n in counts[1:]]
    jobs = {n: p["job"] for n, p in json.loads((out / "scaling.json").read_text())[
        "points"].items()}
    assert sorted(jobs, key=names.index) == names and len(set(jobs.values())) == 5, jobs
    for name, nodes in zip(names, counts, strict=True):
        assert proc.stdout.count(f"{name}: submitted job {jobs[name]} ({nodes} node(s) x 1)") \
            == 1, proc.stdout
        result = json.loads((out / f"{name}.json").read_text())
        assert (result["ranks"], result["nodes"], result["iterations"]) == (nodes, nodes, 2)
        per_rank = result["images_per_s_per_rank"]
        assert len(per_rank) == nodes and all(v > 0 for v in per_rank), result
        assert result["images_per_s"] == pytest.approx(sum(per_rank))
    rows = json.loads((out / "table.json").read_text())
    assert [(r["point"], r["nodes"], r["gpus"]) for r in rows] == \
        [(name, n, n) for name, n in zip(names, counts, strict=True)]
    one = rows[0]["images_per_s"]
    for r in rows:  # one GPU is one node here: both efficiencies are the same
        assert r["speedup"] == pytest.approx(r["images_per_s"] / one)
        assert r["efficiency_vs_1gpu"] == pytest.approx(r["speedup"] / r["gpus"])
        assert r["efficiency_vs_1node"] == pytest.approx(r["efficiency_vs_1gpu"])
    table = (out / "scaling.md").read_text()
    assert [line.split("|")[1:3] for line in table.splitlines()[2:]] == \
        [[f" {n} ", f" {n} "] for n in counts], table
    assert table in proc.stdout
    assert (out / "scaling.png").read_bytes()[:4] == b"\x89PNG"
