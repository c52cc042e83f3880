"""Both examples trained for real with ``mpirun -np 2``: identical parameters on every rank,
decreasing loss, snapshots and --resume, and the ImageNet-style folder/list loader."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import zipfile

import numpy
import pytest

from chainermn_rt.data.writers import pack, synthetic

from conftest import PYTHON, REPO, folder_contents, run_mpi

MNIST = ["examples/train_mnist.py", "--n-train", "2000", "--n-test", "400", "--unit", "100",
         "--batchsize", "50", "--log-every", "10", "--no-progress"]
IMAGENET = ["examples/train_imagenet.py", "--insize", "32", "--batchsize", "4", "--no-progress"]


def digests(stdout: str) -> dict[int, str]:
    return {int(r): d for r, d in re.findall(r"^rank (\d+) parameters sha256 (\w+)$", stdout,
                                            re.MULTILINE)}


def images_trained(stdout: str) -> int:
    match = re.search(r"^throughput: [\d.]+ images/s \((\d+) images in", stdout, re.MULTILINE)
    assert match, stdout
    return int(match.group(1))


def losses(out) -> list[tuple[int, float]]:
    return [(e["iteration"], e["main/loss"]) for e in json.loads((out / "log").read_text())]


def check_run(stdout: str, out, images: int) -> list[tuple[int, float]]:
    ranks = digests(stdout)
    assert sorted(ranks) == [0, 1], stdout
    assert ranks[0] == ranks[1], "parameters differ between ranks"
    assert images_trained(stdout) == images
    return losses(out)


@pytest.mark.mpi
def test_mnist_snapshots_and_resumes_bit_identically(tmp_path):
    """40 iterations straight vs. resumed from iteration 20 (named, found, or found past a
    damaged newer set): the same parameters to the last bit."""
    out = tmp_path / "mnist"
    run = MNIST + ["--iterations", "40", "--snapshot-every", "20", "--keep", "5"]
    proc = run_mpi(2, run + ["--out", str(out)])
    log = check_run(proc.stdout, out, images=40 * 2 * 50)
    straight = digests(proc.stdout)[0]
    assert [i for i, _ in log] == [10, 20, 30, 40]
    assert log[-1][1] < 0.8 * log[0][1], log
    sets = out / "snapshots"
    assert sorted(p.name for p in sets.iterdir()) == ["iter_000000020", "iter_000000040"]

    named = tmp_path / "named"
    proc = run_mpi(2, run + ["--out", str(named), "--resume", str(sets / "iter_000000020")])
    log = check_run(proc.stdout, named, images=20 * 2 * 50)  # only iterations 21..40 ran
    assert [i for i, _ in log] == [10, 20, 30, 40]  # the log went on from the snapshot's
    assert digests(proc.stdout)[0] == straight

    found = tmp_path / "found"
    shutil.copytree(out, found)
    shutil.rmtree(found / "snapshots" / "iter_000000040")
    proc = run_mpi(2, run + ["--out", str(found)])
    check_run(proc.stdout, found, images=20 * 2 * 50)
    assert digests(proc.stdout)[0] == straight

    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    newest = damaged / "snapshots" / "iter_000000040" / "rank_00001.npz"
    newest.write_bytes(newest.read_bytes()[:1000])  # truncated
    before = folder_contents(damaged)
    proc = run_mpi(2, run + ["--out", str(tmp_path / "x"), "--resume", str(newest.parent)],
                   check=False)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "chainermn-rt: error" in line]
    assert errors == [f"chainermn-rt: error: resume: snapshot {newest.parent}: rank_00001.npz: "
                      "its sha256 differs from the manifest's (damaged or truncated); allowed: "
                      "the file as written"], proc.stderr
    assert folder_contents(damaged) == before and not (tmp_path / "x").exists()  # nothing written

    # sha-consistent but not an npz that fits its file: refused under --resume, skipped without
    bad = huge_array_npz()
    newest.write_bytes(bad)
    manifest = json.loads((newest.parent / "manifest.json").read_text())
    manifest["files"]["rank_00001.npz"] = hashlib.sha256(bad).hexdigest()
    (newest.parent / "manifest.json").write_text(json.dumps(manifest))
    reason = (f"snapshot {newest.parent}: rank_00001.npz: not a valid .npz (member 'w.npy': its "
              "header declares shape (1000000000000,) of float64, which is not the 144 bytes it "
              "holds); allowed: an .npz file of arrays written by chainermn_rt.resumable")
    proc = run_mpi(2, run + ["--out", str(tmp_path / "y"), "--resume", str(newest.parent)],
                   check=False)
    assert proc.returncode == 2, proc.stderr
    assert [line for line in proc.stderr.splitlines() if "chainermn-rt: error" in line] == [
        f"chainermn-rt: error: resume: {reason}"], proc.stderr
    proc = run_mpi(2, run + ["--out", str(damaged)])
    assert f"chainermn-rt: warning: skipping {reason}" in proc.stderr.splitlines(), proc.stderr
    check_run(proc.stdout, damaged, images=20 * 2 * 50)
    assert digests(proc.stdout)[0] == straight

    # one rank resuming a two-rank set: nothing to abort, still bad input's status
    proc = run_mpi(1, run + ["--out", str(tmp_path / "z"), "--resume",
                             str(sets / "iter_000000020")], check=False)
    assert proc.returncode == 2, proc.stderr
    assert [line for line in proc.stderr.splitlines() if "chainermn-rt" in line] == [
        f"chainermn-rt: error: resume: snapshot {sets / 'iter_000000020'}: world_size: written "
        "by 2 ranks, this job has 1; allowed: the same number of ranks"], proc.stderr


def huge_array_npz() -> bytes:
    """A zip holding ``w.npy`` whose header declares 10**12 float64 values in 16 bytes."""
    header = io.BytesIO()
    numpy.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("w.npy", header.getvalue() + bytes(16))
    return buffer.getvalue()


@pytest.mark.mpi
def test_imagenet_synthetic_resnet50(tmp_path):
    out = tmp_path / "resnet"
    proc = run_mpi(2, IMAGENET + ["--synthetic", "--n-class", "4", "--n-synthetic", "16",
                                  "--iterations", "12", "--log-every", "4", "--lr", "0.002",
                                  "--out", str(out)], timeout=600)
    assert "communicator ChunkedCommunicator" in proc.stdout
    log = check_run(proc.stdout, out, images=12 * 2 * 4)
    assert [i for i, _ in log] == [4, 8, 12]
    assert log[-1][1] < log[0][1], log


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory):
    """A small ImageNet-like tree (3 classes, JPEGs of ImageNet's shapes at a fifth of the
    size), its shards (5 of them, 4 holding 5 images and one 4: the ranks' shards hold unequal
    counts), and a validation list file."""
    root = tmp_path_factory.mktemp("imagenet")
    sizes = [(w // 5, h // 5) for w, h in synthetic.SIZES]
    synthetic.tree(root / "train", classes=3, per_class=8, sizes=sizes)
    synthetic.tree(root / "val", classes=3, per_class=3, sizes=sizes)
    pack.pack(str(root / "train"), str(root / "train-shards"), pack.Options(shard_size=5))
    pack.pack(str(root / "val"), str(root / "val-shards"), pack.Options(shard_size=2))
    (root / "val.txt").write_text("".join(
        f"{p.relative_to(root)} {int(p.parent.name[1:])}\n" for p in sorted(
            (root / "val").glob("*/*.JPEG"))))
    return root


def validation_images(out) -> set[int]:
    return {e["validation/images"] for e in json.loads((out / "log").read_text())}


@pytest.mark.mpi
def test_imagenet_from_shards_resumes_mid_epoch_bit_identically(tmp_path, imagenet):
    """ResNet-50 from shards, 2 ranks, 6 iterations straight vs resumed from iteration 2: mid
    epoch (the ranks' shards hold 14 and 10 images or 15 and 9; each reads as many as the
    other, 3 batches of 4, so the per-epoch evaluation meets), with batches in the loader's
    workers and the shuffle buffer: the same parameters. Validation counts each of the 9
    images once."""
    run = IMAGENET + ["--train", str(imagenet / "train-shards"), "--val",
                      str(imagenet / "val-shards"), "--n-class", "3", "--val-resize", "36",
                      "--iterations", "6", "--log-every", "3", "--snapshot-every", "2",
                      "--keep", "3", "--workers", "1", "--shuffle-buffer", "3"]
    out = tmp_path / "straight"
    proc = run_mpi(2, run + ["--out", str(out)], timeout=600)
    check_run(proc.stdout, out, images=6 * 2 * 4)
    assert validation_images(out) == {9}
    assert re.search(r"^epoch \d+: [\d.]+ images/s, the slowest rank waited for data "
                     r"[\d.]+ % of the step time$", proc.stdout, re.MULTILINE), proc.stdout
    resumed = tmp_path / "resumed"
    proc2 = run_mpi(2, run + ["--out", str(resumed), "--resume",
                              str(out / "snapshots" / "iter_000000002")], timeout=600)
    check_run(proc2.stdout, resumed, images=4 * 2 * 4)
    assert digests(proc2.stdout)[0] == digests(proc.stdout)[0]


@pytest.mark.mpi
def test_imagenet_from_a_class_folder_tree_and_a_list(tmp_path, imagenet):
    out = tmp_path / "out"
    proc = run_mpi(2, IMAGENET + ["--train", str(imagenet / "train"), "--val",
                                  str(imagenet / "val.txt"), "--root", str(imagenet),
                                  "--n-class", "3", "--val-resize", "36", "--iterations", "2",
                                  "--log-every", "2", "--workers", "0", "--out", str(out)],
                   timeout=600)
    check_run(proc.stdout, out, images=2 * 2 * 4)
    assert validation_images(out) == {9}


@pytest.mark.mpi
def test_imagenet_refuses_more_classes_than_the_model_has(tmp_path, imagenet):
    proc = run_mpi(2, IMAGENET + ["--train", str(imagenet / "train-shards"), "--val",
                                  str(imagenet / "val-shards"), "--n-class", "2", "--out",
                                  str(tmp_path / "x")], check=False)
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if "chainermn-rt" in line] == [
        "chainermn-rt: error: --n-class: 2, but the data has 3 classes; allowed: at least 3"]


def test_porting_doc_shows_the_real_diff():
    """docs/porting.md's diff is exactly ``diff -u before.py after.py``."""
    diff = subprocess.run(["diff", "-u", "examples/port/before.py", "examples/port/after.py"],
                          capture_output=True, text=True, cwd=REPO, check=False).stdout
    hunks = diff.split("\n", 2)[2]  # without the two header lines (they carry dates)
    doc = (REPO / "docs" / "porting.md").read_text()
    assert f"```diff\n{hunks}```" in doc


@pytest.mark.mpi
def test_porting_example_runs_before_and_after(tmp_path):
    before = subprocess.run([PYTHON, str(REPO / "examples/port/before.py")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300, check=False)
    assert before.returncode == 0, before.stderr
    proc = run_mpi(2, [str(REPO / "examples/port/after.py")], cwd=tmp_path)
    for out in (before.stdout, proc.stdout):
        epochs = [line.split() for line in out.splitlines() if line.strip()[-1:].isdigit()]
        assert len(epochs) == 3 and float(epochs[-1][-2]) < float(epochs[0][-2]), out
