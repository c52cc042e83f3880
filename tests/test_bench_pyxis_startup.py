"""bench/pyxis_startup.py's own parts, without a sandbox: the steps of one job, pyxis's log
lines read per step, the figures and ratios, the refusals of bad input."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

from bench import pyxis_startup as ps

from conftest import PYTHON, REPO


def test_every_configuration_once_a_round_rotated_and_the_named_ones_made_in_round_0():
    plan = ps.steps(2, 3, Path("/i/c.sqsh"), Path("/i/c.sif"), "img:1")
    assert [(n, r) for n, r, _ in plan[:5]] == [("bare", 0), ("sif", 0), ("sqsh", 0),
                                                 ("named", 0), ("dockerd", 0)]
    assert [n for n, r, _ in plan if r == 1] == ["sif", "sqsh", "named", "dockerd", "bare"]
    argv = {(n, r): a for n, r, a in plan}
    assert "--container-image=dockerd://img:1" in argv["dockerd", 0]
    assert not any(a.startswith("--container-image") for a in argv["dockerd", 1])
    assert "--container-name=bench" in argv["named", 2]
    assert argv["sif", 0][4:7] == ["apptainer", "exec", "/i/c.sif"]
    assert [n for n, _, _ in ps.steps(1, 2, Path("/s"), Path("/f"), None)].count("dockerd") == 0


def test_the_debian12_stack_has_no_sif_and_ready_on_debian13_no_bare_metal():
    ready = ps.PROGRAMS["ready"]
    plan = ps.steps(1, 2, Path("/i/c.sqsh"), None, None, "/v/bin/python", ready)
    assert [n for n, r, _ in plan if r == 0] == ["bare", "sqsh", "named"]
    assert {tuple(a[-3:]) for n, _, a in plan if n != "bare"} == {("python3", "-c", ready)}
    assert [a[4:6] for n, _, a in plan if n == "bare"] == [["/v/bin/python", "-c"]] * 2
    plan = ps.steps(1, 2, Path("/i/c.sqsh"), Path("/i/c.sif"), None, None, ready)
    assert [n for n, r, _ in plan if r == 0] == ["sif", "sqsh", "named"]


def test_pyxis_log_lines_give_import_and_create_per_step_the_slowest_node(tmp_path):
    (tmp_path / "log").mkdir()
    lines = {"node1": ("[2026-12-06T20:55:00.000] [7.4] pyxis: importing docker image: x\n"
                       "[2026-12-06T20:55:10.000] [7.4] pyxis: imported docker image: x\n"
                       "[2026-12-06T20:55:10.000] [7.4] pyxis: creating container filesystem: y\n"
                       "[2026-12-06T20:55:15.500] [7.4] pyxis: completed container setup in "
                       "15500 ms\n[2026-12-06T20:55:15.000] [8.0] pyxis: importing docker im\n"),
             "node2": ("[2026-12-06T20:55:00.000] [7.4] pyxis: importing docker image: x\n"
                       "[2026-12-06T20:55:12.000] [7.4] pyxis: imported docker image: x\n")}
    for node, text in lines.items():
        (tmp_path / "log" / f"slurmd-{node}.log").write_text(text)
    sb = SimpleNamespace(state_dir=tmp_path, settings=SimpleNamespace(
        node_names=lambda: ["node1", "node2"]))
    assert ps.pyxis_log(sb, "7") == {4: {"import_s": 12.0, "create_s": 5.5, "setup_s": 15.5}}


def test_first_and_later_steps_and_their_ratios():
    steps = [{"step": i, "name": n, "round": r, "rc": 0, "ranks": 2, "start_s": s, "err": ""}
             for i, (n, r, s) in enumerate([("bare", 0, 0.2), ("sif", 0, 0.5), ("sqsh", 0, 0.6),
                                            ("bare", 1, 0.1), ("sif", 1, 0.3), ("sqsh", 1, 0.4),
                                            ("bare", 2, 0.3), ("sqsh", 2, 0.2)])]
    steps.append({"step": 9, "name": "named", "round": 1, "rc": 1, "ranks": 0,
                  "start_s": None, "err": "pyxis: no"})
    out = ps.summary({"nodes": 2, "steps": steps})
    assert out["sqsh_first_s"] == 0.6 and out["bare_later_s"] == 0.2
    assert round(out["ratio_sqsh_first_vs_sif_first"], 6) == 1.2
    assert round(out["ratio_sqsh_later_vs_bare_later"], 6) == 1.5
    assert out["ratio_dockerd_first_vs_sif_first"] is None
    assert out["failed"] == ["named round 1: rc 1, 0 ranks: pyxis: no"]


def test_bad_input_is_one_line_and_exit_status_2(tmp_path):
    for args, field in ((["--nodes", "0"], "--nodes"), (["--sqsh", str(tmp_path / "no")],
                                                        "--sqsh"),
                        (["--stack", "debian12", "--dockerd-nodes", "1"], "--dockerd-nodes"),
                        (["--program", "hello"], "--program")):
        proc = subprocess.run([PYTHON, "-m", "bench.pyxis_startup", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and field in proc.stderr, proc.stderr
