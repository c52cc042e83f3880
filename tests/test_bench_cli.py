"""``chainermn-rt bench allreduce|train`` with real ranks (mpirun): the structure and the
arithmetic of what they print and write, the correctness check (which must be able to fail),
and bad arguments. Never their speed."""

from __future__ import annotations

import csv
import json
import os
import subprocess

import numpy
import pytest

from chainermn_rt.arguments import parse_bytes
from chainermn_rt.benchmarks import allreduce, pattern
from chainermn_rt.errors import UserError

from conftest import (
    PYTHON,
    REPO,
    clean_launcher_env,
    gpu_available,
    json_objects,
    mpirun_argv,
    run_mpi,
)

CLI = ["-m", "chainermn_rt", "bench"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TRAIN_KEYS = {"benchmark", "model", "ranks", "nodes", "batch_per_rank", "insize", "warmup",
              "iterations", "seconds", "images_per_s", "images_per_s_per_rank",
              "averaging_share", "communicator", "device"}


def check_results(rows: list[dict], sizes: list[int], communicators: list[str], ranks: int):
    """Every size for every communicator, in sweep order, with the documented arithmetic
    on the unrounded numbers the file holds, and nothing wrong."""
    assert [(r["nbytes"], r["communicator"]) for r in rows] == [
        (s, c) for s in sizes for c in communicators]
    for r in rows:
        assert r["count"] == r["nbytes"] // 4 and r["type"] == "float32"
        assert r["redop"] == ("sum" if r["communicator"] == "mpi" else "mean")
        assert r["ranks"] == ranks and r["seconds"] > 0
        assert r["algbw_gbps"] == r["nbytes"] / r["seconds"] / 1e9
        assert r["busbw_gbps"] == r["algbw_gbps"] * (2 * (ranks - 1) / ranks)
        assert r["wrong"] == 0, r


def table_rows(stdout: str) -> list[tuple[int, str, int]]:
    """(size, communicator, #wrong) of the table's data lines."""
    rows = []
    for line in stdout.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit():
            rows.append((int(cells[0]), cells[4], int(cells[-1])))
    return rows


# -- allreduce -------------------------------------------------------------------------------

@pytest.mark.mpi
def test_allreduce_sweep_writes_json_and_a_png(tmp_path):
    out, png = tmp_path / "ar.json", tmp_path / "ar.png"
    proc = run_mpi(2, CLI + ["allreduce", "--min-bytes", "8", "--max-bytes", "64K",
                             "--repeat", "2", "--output", str(out), "--plot", str(png),
                             "--progress"], cwd=tmp_path)
    sizes = [8 << i for i in range(14)]  # 8 B .. 64 KiB
    names = ["mpi", "naive", "chunked"]  # every communicator available without a GPU
    doc = json.loads(out.read_text())
    assert {k: doc[k] for k in ("benchmark", "ranks", "nodes", "type", "repeat", "warmup",
                                "communicators")} == {
        "benchmark": "allreduce", "ranks": 2, "nodes": 1, "type": "float32", "repeat": 2,
        "warmup": 1, "communicators": names}
    check_results(doc["results"], sizes, names, ranks=2)
    assert table_rows(proc.stdout) == [(s, c, 0) for s in sizes for c in names]
    assert "# wrong elements: 0 OK" in proc.stdout
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert "bench allreduce: 100%" in proc.stderr  # --progress: rank 0's bar on stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ar.json", "ar.png"]  # no temp left


@pytest.mark.mpi
def test_allreduce_csv_with_chosen_communicators_and_three_ranks(tmp_path):
    """Three ranks: busbw's factor is 4/3 and the mean 1/3 rounds (the check allows that)."""
    out = tmp_path / "ar.csv"
    proc = run_mpi(3, CLI + ["allreduce", "--min-bytes", "64", "--max-bytes", "1000",
                             "--repeat", "1", "--warmup", "0", "--communicators",
                             "chunked,mpi", "--output", str(out)])
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["communicator", "nbytes", "count", "type", "redop", "ranks",
                             "seconds", "algbw_gbps", "busbw_gbps", "wrong"]
    ints, floats = ("nbytes", "count", "ranks", "wrong"), ("seconds", "algbw_gbps",
                                                            "busbw_gbps")
    rows = [{**r, **{k: int(r[k]) for k in ints}, **{k: float(r[k]) for k in floats}}
            for r in rows]  # Python writes floats so that float() reads them back exactly
    check_results(rows, [64, 128, 256, 512], ["chunked", "mpi"], ranks=3)
    assert "bench allreduce" not in proc.stderr  # no bar: stderr is not a terminal


@pytest.mark.mpi
def test_a_wrong_result_is_reported_and_fails_the_run(tmp_path):
    out = tmp_path / "ar.json"
    argv = mpirun_argv(2) + [PYTHON, str(REPO / "tests/programs/bench_corrupt.py"),
                             "chunked", "64", "--", "--max-bytes", "256", "--repeat", "2",
                             "--output", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env=clean_launcher_env(), check=False)
    assert proc.returncode == 1, proc.stderr
    calls = 1 + 2  # warm-up and timed: each result checked, one element wrong in each
    wrong = {(r["nbytes"], r["communicator"]): r["wrong"]
             for r in json.loads(out.read_text())["results"]}
    assert wrong == {(s, c): calls if (s, c) == (64, "chunked") else 0
                     for s in (8, 16, 32, 64, 128, 256) for c in ("mpi", "naive", "chunked")}
    assert (64, "chunked", calls) in table_rows(proc.stdout)
    assert "# wrong elements: 3 FAILED" in proc.stdout
    assert "chainermn-rt bench: error: 3 wrong elements after allreduce: chunked at 64 B\n" \
        in proc.stderr


@pytest.mark.mpi
def test_measure_is_callable_from_other_modules():
    proc = run_mpi(2, ["tests/programs/bench_measure.py", "4096", "mpi", "chunked"])
    found = json_objects(proc.stdout)
    assert [(m["communicator"], m["redop"]) for m in found] == [("mpi", "sum"),
                                                                ("chunked", "mean")]
    for m in found:
        assert (m["nbytes"], m["count"], m["ranks"], m["wrong"]) == (4096, 1024, 2, 0)
        assert (m["algbw_gbps"], m["busbw_gbps"]) == allreduce.bandwidths(4096, m["seconds"], 2)


# -- train -----------------------------------------------------------------------------------

def check_train(result: dict, model: str, batch: int, iterations: int, ranks: int = 2):
    assert TRAIN_KEYS <= set(result)
    assert (result["benchmark"], result["model"], result["ranks"], result["nodes"]) == (
        "train", model, ranks, 1)
    assert (result["batch_per_rank"], result["iterations"]) == (batch, iterations)
    assert (result["device"], result["communicator"]) == ("cpu", "chunked")  # auto, no GPU
    per_rank = result["images_per_s_per_rank"]
    assert len(per_rank) == ranks and all(v > 0 for v in per_rank)
    assert result["images_per_s"] == sum(per_rank)
    assert result["seconds"] == pytest.approx(max(batch * iterations / v for v in per_rank))
    assert 0 <= result["averaging_share"] <= 1


@pytest.mark.mpi
def test_train_mlp(tmp_path):
    out = tmp_path / "t.json"
    proc = run_mpi(2, CLI + ["train", "--model", "mlp", "--batchsize", "16", "--iterations",
                             "3", "--warmup", "1", "--output", str(out)])
    [result] = json_objects(proc.stdout)
    check_train(result, "mlp", 16, 3)
    assert result["insize"] is None
    assert json.loads(out.read_text()) == result
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("train mlp: 2 ranks on 1 node (cpu, "
                                                   "chunked), batch 16 per rank")


@pytest.mark.mpi
def test_train_resnet50_small_images():
    proc = run_mpi(2, CLI + ["train", "--model", "resnet50", "--insize", "32", "--batchsize",
                             "2", "--iterations", "2", "--warmup", "1"], timeout=300)
    [result] = json_objects(proc.stdout)
    check_train(result, "resnet50", 2, 2)
    assert result["insize"] == 32


@pytest.mark.mpi
def test_train_runs_from_an_installed_wheel(tmp_path):
    """No examples/ there: the models ship in the wheel (chainermn_rt/models.py)."""
    subprocess.run([PYTHON, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(REPO)], check=True, cwd=tmp_path,
                   capture_output=True)
    target = tmp_path / "site-packages"
    subprocess.run([PYTHON, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    *map(str, tmp_path.glob("chainermn_rt-*.whl"))], check=True)
    code = (f"import sys, chainermn_rt.models as m; assert m.__file__.startswith({str(target)!r})"
            "; from chainermn_rt.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = run_mpi(1, ["-c", code, "bench", "train", "--model", "mlp", "--batchsize", "4",
                       "--iterations", "2", "--warmup", "0"], cwd=tmp_path,
                   env={**os.environ, "PYTHONPATH": str(target)})
    [result] = json_objects(proc.stdout)
    assert (result["ranks"], result["images_per_s"]) == (1, result["images_per_s_per_rank"][0])


@pytest.mark.gpu
@pytest.mark.mpi
def test_gpu_pure_nccl_allreduce_and_train(tmp_path):
    import cupy

    ranks = min(2, cupy.cuda.runtime.getDeviceCount())
    out = tmp_path / "ar.json"
    run_mpi(ranks, CLI + ["allreduce", "--max-bytes", "1M", "--repeat", "2", "--output",
                          str(out)])
    names = ["mpi", "naive", "chunked", "pure_nccl"]
    check_results(json.loads(out.read_text())["results"], [8 << i for i in range(18)], names,
                  ranks)
    proc = run_mpi(ranks, CLI + ["train", "--model", "mlp", "--iterations", "3"])
    [result] = json_objects(proc.stdout)
    assert (result["device"], result["communicator"]) == ("gpu", "pure_nccl")
    assert result["images_per_s"] == sum(result["images_per_s_per_rank"])


# -- bad arguments: one line, exit 2, nothing written, MPI never started --------------------

@pytest.mark.parametrize("args, message", [
    (["allreduce", "--min-bytes", "12Q"], "--min-bytes: '12Q'; allowed: a whole number"),
    (["allreduce", "--min-bytes", "6"], "--min-bytes: 6; allowed: a multiple of 4"),
    (["allreduce", "--max-bytes", "4"], "--max-bytes: 4; allowed: at least --min-bytes (8)"),
    (["allreduce", "--repeat", "0"], "--repeat: 0; allowed: 1 or more"),
    (["allreduce", "--warmup", "-1"], "--warmup: -1; allowed: 0 or more"),
    (["allreduce", "--communicators", "mpi,nccl"], "--communicators: 'nccl'; allowed: "),
    (["allreduce", "--output", "out.txt"], "--output: out.txt; allowed: a file ending in "
                                           ".json or .csv"),
    (["allreduce", "--output", "missing/out.json"], "--output: missing/out.json; allowed: "
                                                    "a file in an existing folder"),
    (["allreduce", "--output", "ok.json", "--plot", "ar.jpg"], "--plot: ar.jpg; allowed: "),
    (["allreduce", "--output", "."], "--output: .; allowed: a file ending in .json or .csv"),
    (["allreduce", "--output", "d.json"], "--output: d.json is a folder; allowed: a file"),
    (["allreduce", "--plot", "d.png"], "--plot: d.png is a folder; allowed: a file"),
    (["allreduce", "--output", "ar.CSV"], "--output: ar.CSV; allowed: a file ending in .json "
                                          "or .csv"),
    (["allreduce", "--max-bytes", "2000G"], "--max-bytes: '2000G'; allowed: a whole number of "
                                            "bytes up to 1024G"),
    (["allreduce", "--min-bytes", "512G", "--max-bytes", "512G"],
     "--max-bytes: 512G needs about 1536.0 GiB for 1 rank(s) here"),
    (["train", "--batchsize", "0", "--output", "t.json"], "--batchsize: 0; allowed: 1-1048576"),
    (["train", "--batchsize", "1048576"], "--batchsize: 1048576 needs about "),
    (["train", "--insize", "16"], "--insize: 16; allowed: 32-1024"),
    (["train", "--output", "t.csv"], "--output: t.csv; allowed: a file ending in .json"),
    (["train", "--output", "d.json"], "--output: d.json is a folder; allowed: a file"),
    (["train", "--model", "vgg"], "--model: invalid choice: 'vgg'"),
    (["train", "--communicator", "fast"], "--communicator: invalid choice: 'fast'"),
    (["train", "--seed", "-1"], "--seed: -1; allowed: 0-4294967295"),
    (["train", "--seed", str(2**32)], "--seed: 4294967296; allowed: 0-4294967295"),
    (["train", "--iterations", "1e3"], "--iterations: '1e3'; allowed: an integer, 1 or more"),
])
def test_bad_arguments(tmp_path, args, message):
    for folder in ("d.json", "d.png"):
        (tmp_path / folder).mkdir()
    proc = subprocess.run([PYTHON, *CLI, *args], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=clean_launcher_env(), check=False)
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith("chainermn-rt bench") and message in line, line
    assert proc.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["d.json", "d.png"]


@pytest.mark.skipif(gpu_available(), reason="a GPU is here: pure_nccl is allowed")
def test_pure_nccl_without_a_gpu_is_refused(tmp_path):
    proc = subprocess.run([PYTHON, *CLI, "allreduce", "--communicators", "mpi,pure_nccl"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env=clean_launcher_env(), check=False)
    assert proc.returncode == 2
    assert proc.stderr == ("chainermn-rt bench: error: --communicators: pure_nccl needs a GPU "
                           "with CuPy and NCCL; allowed here: mpi, naive, chunked\n")
    for name in ("pure_nccl", "flat", "non_cuda_aware"):
        proc = subprocess.run([PYTHON, *CLI, "train", "--communicator", name],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path,
                              env=clean_launcher_env(), check=False)
        assert (proc.returncode, proc.stderr) == (2, (
            f"chainermn-rt bench: error: --communicator: {name} needs a GPU with CuPy and NCCL; "
            "allowed here: auto, chunked, naive, dummy\n"))


# -- pieces, in this process (no MPI) --------------------------------------------------------

def ranks_buffers(ranks: int, count: int) -> list[numpy.ndarray]:
    bufs = [numpy.empty(count, numpy.float32) for _ in range(ranks)]
    for rank, buf in enumerate(bufs):
        pattern.fill(buf, rank)
    return bufs


@pytest.mark.parametrize("ranks", [1, 2, 3, 5, 8])
def test_checker_accepts_sums_and_rounded_means(ranks):
    count = pattern.BLOCK + 37  # two blocks, the second partial
    bufs = ranks_buffers(ranks, count)
    total = numpy.sum(bufs, axis=0, dtype=numpy.float32)
    assert pattern.count_wrong(total, ranks, "sum") == 0
    assert pattern.count_wrong(total * numpy.float32(1 / ranks), ranks, "mean") == 0  # naive
    assert pattern.count_wrong(total / numpy.float32(ranks), ranks, "mean") == 0


@pytest.mark.parametrize("redop", ["sum", "mean"])
def test_checker_counts_corrupted_elements(redop):
    ranks, count = 3, pattern.BLOCK + 37
    total = numpy.sum(ranks_buffers(ranks, count), axis=0, dtype=numpy.float32)
    good = total if redop == "sum" else total / numpy.float32(ranks)
    bad = good.copy()
    bad[5] = numpy.nextafter(bad[5], numpy.float32(1e9))  # one ulp off: exact sums only
    bad[pattern.BLOCK + 3] += 1  # in the second block
    bad[17] = numpy.nan
    bad[20] *= 1 + 2 * pattern.MEAN_RTOL  # beyond what rounding can do
    assert pattern.count_wrong(bad, ranks, redop) == (4 if redop == "sum" else 3)


def test_checker_sees_a_missing_rank_and_an_unreduced_buffer():
    ranks, count = 4, 1000
    bufs = ranks_buffers(ranks, count)
    without_one = numpy.sum(bufs[:-1], axis=0, dtype=numpy.float32)
    assert pattern.count_wrong(without_one, ranks, "sum") == count
    for rank, buf in enumerate(bufs):  # a rank whose buffer came back untouched
        assert pattern.count_wrong(buf, ranks, "mean") > count // 2, rank


def test_sizes_bandwidths_and_byte_arguments():
    assert allreduce.sizes(8, 1 << 30)[-1] == 1 << 30 and len(allreduce.sizes(8, 1 << 30)) == 28
    assert allreduce.sizes(8, 100) == [8, 16, 32, 64]
    algbw, busbw = allreduce.bandwidths(3 << 20, 1e-3, ranks=3)
    assert algbw == (3 << 20) / 1e-3 / 1e9 and busbw == algbw * (2 * 2 / 3)
    assert allreduce.bandwidths(8, 1.0, ranks=1)[1] == 0.0
    assert [parse_bytes(t, "--max-bytes") for t in ("8", "64K", "64k", "16M", "1G")] == [
        8, 65536, 65536, 16 << 20, 1 << 30]
    for text in ("", "1.5M", "1T", "-8", "8 B"):
        with pytest.raises(UserError, match=f"^--max-bytes: {text!r}; allowed: "):
            parse_bytes(text, "--max-bytes")
