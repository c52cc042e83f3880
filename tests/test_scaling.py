"""The scaling study's pure parts and its CLI without Slurm."""

from __future__ import annotations

import json
import subprocess

import pytest

from chainermn_rt import scaling
from chainermn_rt.errors import UserError

from conftest import PYTHON


@pytest.mark.parametrize("max_nodes, per_node, names", [
    (1, 1, ["1node"]),
    (1, 4, ["1gpu", "1node"]),
    (6, 8, ["1gpu", "1node", "2nodes", "4nodes", "6nodes"]),
    (16, 1, ["1node", "2nodes", "4nodes", "8nodes", "16nodes"]),
])
def test_points_double_up_to_the_largest(max_nodes, per_node, names):
    found = scaling.points(max_nodes, per_node)
    assert [p.name for p in found] == names
    assert found[0].ranks == 1 and found[-1].nodes == max_nodes


def test_table_follows_the_papers_two_definitions():
    p = {x.name: x for x in scaling.points(4, 8)}
    rows = scaling.table([scaling.Result(p["4nodes"], 2400.0), scaling.Result(p["1gpu"], 100.0),
                          scaling.Result(p["1node"], 720.0), scaling.Result(p["2nodes"], 1296.0)])
    assert [r["gpus"] for r in rows] == [1, 8, 16, 32]
    by = {r["point"]: r for r in rows}
    assert by["4nodes"]["speedup"] == 2400.0 / 100.0
    assert by["4nodes"]["efficiency_vs_1gpu"] == 2400.0 / 100.0 / 32
    assert by["4nodes"]["efficiency_vs_1node"] == 2400.0 / (4 * 720.0)
    assert by["2nodes"]["efficiency_vs_1node"] == 1296.0 / (2 * 720.0)
    assert by["1gpu"]["efficiency_vs_1node"] is None  # one GPU is not a whole node
    text = scaling.markdown(rows)
    assert "| 32 | 4 | 2400.0 | 24.00 | 75.0% | 83.3% |" in text
    assert "| 1 | 1 | 100.0 | 1.00 | 100.0% | - |" in text


def test_without_the_reference_points_no_efficiency_is_made_up():
    p = {x.name: x for x in scaling.points(2, 4)}
    [row] = scaling.table([scaling.Result(p["2nodes"], 500.0)])
    assert (row["speedup"], row["efficiency_vs_1gpu"], row["efficiency_vs_1node"]) == \
        (None, None, None)


def test_plot_is_a_png(tmp_path):
    rows = scaling.table([scaling.Result(p, 100.0 * p.ranks * 0.9 ** i)
                          for i, p in enumerate(scaling.points(4, 2))])
    scaling.plot(rows, tmp_path / "s.png", "test")
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["s.png"]  # no temporary file left


def test_a_folder_of_something_else_is_refused(tmp_path):
    (tmp_path / "scaling.json").write_text("[1, 2]")
    with pytest.raises(UserError, match=r"^--out: .*scaling.json is not a scaling study's record"):
        scaling.load_state(tmp_path)


def test_results_that_are_not_numbers_count_as_missing(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"images_per_s": "fast"}))
    (tmp_path / "b.json").write_text("{")
    assert scaling.read_result(tmp_path / "a.json") is None
    assert scaling.read_result(tmp_path / "b.json") is None
    assert scaling.read_result(tmp_path / "c.json") is None


def cli(*args, **kwargs):
    return subprocess.run([PYTHON, "-m", "chainermn_rt", "scaling", *args], check=False,
                          capture_output=True, text=True, timeout=120, **kwargs)


def test_dry_run_renders_every_point_and_submits_nothing(tmp_path):
    out = tmp_path / "study"
    proc = cli("--site", "sandbox", "--max-nodes", "2", "--gpus-per-node", "2", "--model", "mlp",
               "--out", str(out), "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["1gpu.sh", "1node.sh", "2nodes.sh"]
    two = (out / "2nodes.sh").read_text()
    assert "#SBATCH --nodes=2" in two and "#SBATCH --ntasks-per-node=2" in two
    assert f"bench train --model mlp --batchsize 32 --iterations 100 --warmup 10 --output " \
           f"{out}/2nodes.json" in two
    assert "#SBATCH --ntasks-per-node=1" in (out / "1gpu.sh").read_text()


@pytest.mark.parametrize("args, message", [
    (["--max-nodes", "3"], "--max-nodes: 3; allowed: 1-2 (the nodes of partition 'gpu')"),
    (["--max-nodes", "0"], "--max-nodes: 0; allowed: 1 or more"),
    (["--max-nodes", "2", "--iterations", "0"], "--iterations: 0; allowed: 1 or more"),
    (["--max-nodes", "2", "--gpus-per-node", "9"], "--gpus-per-node: 9 on partition 'gpu'"),
])
def test_bad_requests_are_one_line_and_write_nothing(tmp_path, args, message):
    proc = cli("--site", "sandbox", "--out", str(tmp_path / "study"), "--dry-run", *args)
    assert proc.returncode == 2, proc
    assert proc.stderr.startswith(f"chainermn-rt scaling: error: {message}")
    assert len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "study").exists() or not list((tmp_path / "study").iterdir())
