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

from chainermn_rt.errors import UserError
from examples.imagenet_data import CroppedImages, compute_mean, image_list, read_image, write_ppm

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


def make_folder(root, classes=3, per_class=4, size=36, seed=0):
    rng = numpy.random.default_rng(seed)
    for c in range(classes):
        (root / f"n0{c}").mkdir(parents=True)
        for i in range(per_class):
            image = rng.integers(0, 256, (3, size, size)) // (c + 1)
            write_ppm(str(root / f"n0{c}" / f"img{i}.ppm"), image)
    return root


@pytest.mark.mpi
def test_imagenet_folder_and_list(tmp_path):
    train = make_folder(tmp_path / "train")
    val = make_folder(tmp_path / "val", per_class=2, seed=1)
    listing = tmp_path / "val.txt"
    listing.write_text("".join(f"{p.relative_to(tmp_path)} {int(p.parent.name[2:])}\n"
                               for p in sorted(val.glob("*/*.ppm"))))
    out = tmp_path / "out"
    proc = run_mpi(2, IMAGENET + ["--train", str(train), "--val", str(listing), "--root",
                                  str(tmp_path), "--n-class", "3", "--iterations", "4",
                                  "--log-every", "2", "--batchsize", "2", "--out", str(out)],
                   timeout=600)
    log = check_run(proc.stdout, out, images=4 * 2 * 2)
    assert [i for i, _ in log] == [2, 4]


def test_loader_reads_folders_lists_and_crops(tmp_path):
    root = make_folder(tmp_path / "train", classes=2, per_class=2, size=10)
    pairs = image_list(str(root))
    assert [label for _, label in pairs] == [0, 0, 1, 1]
    image = read_image(pairs[2][0])
    assert image.shape == (3, 10, 10) and image.dtype == numpy.float32 and image.max() <= 127
    numpy.save(tmp_path / "a.npy", image.transpose(1, 2, 0))  # HWC .npy is accepted too
    assert numpy.array_equal(read_image(str(tmp_path / "a.npy")), image)
    mean = compute_mean(pairs)
    assert mean.shape == (3, 10, 10)
    x, t = CroppedImages(pairs, mean, 8, random=False)[3]
    assert x.shape == (3, 8, 8) and t == 1
    assert numpy.allclose(x, ((read_image(pairs[3][0]) - mean) / 128)[:, 1:9, 1:9])
    listing = tmp_path / "list.txt"
    listing.write_text("n00/img0.ppm 0\nn01/img1.ppm 1\n")
    assert image_list(str(listing), str(root)) == [(str(root / "n00/img0.ppm"), 0),
                                                   (str(root / "n01/img1.ppm"), 1)]


@pytest.mark.parametrize("content, message", [
    ("a.ppm zero\n", r"list.txt:1: 'a.ppm zero'; allowed: 'PATH LABEL'"),
    ("", "holds no images"),
])
def test_loader_errors_name_the_line(tmp_path, content, message):
    listing = tmp_path / "list.txt"
    listing.write_text(content)
    with pytest.raises(UserError, match=message):
        image_list(str(listing))


def test_loader_missing_path(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        image_list(str(tmp_path / "nope"))


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
