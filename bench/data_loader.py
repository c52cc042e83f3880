"""Feeding ResNet-50: the training data path per core, against its own bare decode loop, more
worker processes, Pillow, NVIDIA DALI's CPU pipeline, and ``tar``.

On ImageNet-like synthetic JPEGs (chainermn_rt.data.writers.synthetic: 500x375-class sizes,
quality 90, about 100 KB) packed into shards, every figure is images/s of the training transform
(random-resized crop to 224 + flip), methods interleaved in rounds, median of the rounds:

- ``bare``: the decoder and transform in a loop over the images held in memory (one core);
- ``loader, N workers``: the whole path (shard read, decode, transform, hand-off as a uint8
  batch) with N decoding processes, timed over three epochs of the images (a shorter window
  is mostly the prefetch filling); ``loader, in process``: no worker;
- ``pillow``: Pillow 13 decoding the whole image and resizing the crop (one core);
- ``dali``: DALI's fastest CPU-only training pipeline (its webdataset reader and fused
  random-crop decoder, ``image_random_crop``, then resize and flip; one thread), run by
  ``--dali PYTHON``, an interpreter with ``nvidia-dali-cuda120`` (a throwaway venv: DALI is
  not a dependency);
- ``pack`` vs ``tar``: ``chainermn-rt data pack`` (no re-encoding) and ``tar -cf`` over the same
  files, the images copied ``--pack-copies`` times (pack building one shard at a time, its
  default on 2 CPUs, and one per CPU; tar has one).

Run: ``python -m bench.data_loader [--images 400] [--rounds 3] [--dali /tmp/dali/bin/python]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DALI_PROGRAM = r"""
import glob, os, subprocess, sys, time
from nvidia.dali import fn, pipeline_def, types
shards = sorted(glob.glob(os.path.join(sys.argv[1], "shard-*.tar")))
indices = []
for s in shards:
    index = s + ".idx"
    if not os.path.exists(index):
        subprocess.run(["wds2idx", s, index], check=True, capture_output=True)
    indices.append(index)
n, rounds, size = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

@pipeline_def(batch_size=32, num_threads=1, device_id=None, prefetch_queue_depth=2)
def train():
    jpegs, labels = fn.readers.webdataset(paths=shards, index_paths=indices, ext=["jpg", "cls"],
                                          random_shuffle=True, initial_fill=256, name="r")
    images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                           random_area=[0.08, 1.0],
                                           random_aspect_ratio=[0.75, 4 / 3])
    images = fn.resize(images, resize_x=size, resize_y=size)
    return fn.flip(images, horizontal=fn.random.coin_flip()), labels

pipe = train()
pipe.build()
for _ in range(3):
    pipe.run()
for _ in range(rounds):
    start, done = time.perf_counter(), 0
    while done < n:
        pipe.run()
        done += 32
    print(done / (time.perf_counter() - start), flush=True)
"""


def dali_round(python: str, shards: Path, n: int, size: int) -> float:
    """Images/s of one timed round of DALI's pipeline (after its warm-up), in its interpreter."""
    proc = subprocess.run([python, "-c", DALI_PROGRAM, str(shards), str(n), "1", str(size)],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": f"{Path(python).parent}:{os.environ['PATH']}"})
    if proc.returncode:
        raise SystemExit(f"DALI failed: {proc.stderr[-2000:]}")
    return float(proc.stdout.split()[-1])


def rate(fn, n: int) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def bare(images, size: int):
    import numpy

    from chainermn_rt.data import jpeg
    from chainermn_rt.data.transforms import TrainCrop

    crop, out = TrainCrop(size), numpy.empty((size, size, 3), numpy.uint8)

    def run():
        for i, data in enumerate(images):
            w, h = jpeg.header(data)[:2]
            box, flip = crop.box(w, h, str(i), 0)
            jpeg.decode(data, (size, size), box, flip, out)
    return run


def pillow(images, size: int):
    import io

    import numpy
    from PIL import Image

    from chainermn_rt.data.transforms import TrainCrop

    crop = TrainCrop(size)

    def run():
        for i, data in enumerate(images):
            image = Image.open(io.BytesIO(data))
            box, flip = crop.box(*image.size, str(i), 0)
            out = image.convert("RGB").resize((size, size), Image.BILINEAR, box=box)
            if flip:
                out = out.transpose(Image.FLIP_LEFT_RIGHT)
            numpy.asarray(out)
    return run


def loader_round(shards: Path, workers: int, n: int, size: int) -> float:
    """Images/s of a fresh loader over ``n`` images after two warm-up batches; then it is
    stopped, so its prefetching never runs into another method's round."""
    from chainermn_rt.data import make_loader, open_source

    it = make_loader(open_source(shards, train=True, buffer=256), 32, size=size,
                     workers=workers)
    try:
        for _ in range(2):
            next(it)
        start, done = time.perf_counter(), 0
        while done < n:
            done += len(next(it))
        return done / (time.perf_counter() - start)
    finally:
        it.finalize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--pack-copies", type=int, default=5,
                        help="pack and tar read each image this many times (as copies)")
    parser.add_argument("--dali", help="a Python with nvidia-dali-cuda120 (throwaway venv)")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    from chainermn_rt.data.writers import pack, synthetic

    work = Path(tempfile.mkdtemp(prefix="bench-data-"))
    try:
        files = synthetic.tree(work / "src", classes=10, per_class=args.images // 10)
        images = [f.read_bytes() for f in files]
        n = len(images)
        pack.pack(str(work / "src"), str(work / "shards"), pack.Options(shard_size=50),
                  workers=2)
        # pack and tar over more files (copies), so starting pack's processes is amortised
        for f in files:
            for k in range(args.pack_copies):
                target = work / "many" / f.parent.name / f"{f.stem}_{k}{f.suffix}"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, target)
        many = n * args.pack_copies
        print(f"{n} images, {sum(map(len, images)) / n / 1e3:.0f} KB each on average; "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        methods = {"bare": bare(images, args.size), "pillow": pillow(images, args.size),
                   "loader_0": None, "loader_1": None, "loader_2": None}
        if args.dali:
            methods["dali"] = None  # a round in DALI's own interpreter, timed there
        methods.update(pack_1=None, pack=None, tar=None)
        rates = {name: [] for name in methods}
        for i in range(args.rounds):  # every method once per round: load changes hit all
            for name, fn in methods.items():
                if fn is not None:
                    rates[name].append(rate(fn, n))
                elif name.startswith("loader_"):
                    rates[name].append(loader_round(work / "shards", int(name[-1]), 3 * n,
                                                    args.size))
                elif name == "dali":
                    rates[name].append(dali_round(args.dali, work / "shards", n, args.size))
                elif name.startswith("pack"):
                    out = work / f"packed{i}"
                    start = time.perf_counter()
                    pack.pack(str(work / "many"), str(out), pack.Options(shard_size=500),
                              workers=1 if name == "pack_1" else len(os.sched_getaffinity(0)))
                    rates[name].append(many / (time.perf_counter() - start))
                    shutil.rmtree(out)
                else:
                    start = time.perf_counter()
                    subprocess.run(["tar", "-cf", str(work / "t.tar"), "-C", str(work), "many"],
                                   check=True)
                    rates[name].append(many / (time.perf_counter() - start))
                    os.unlink(work / "t.tar")
        median = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
        names = {"bare": "bare decode + transform loop, in memory", "pillow": "Pillow 13",
                 "loader_0": "loader, in process (shard read + decode)",
                 "loader_1": "loader, 1 worker", "loader_2": "loader, 2 workers",
                 "dali": "DALI CPU pipeline, 1 thread", "pack_1": "data pack, 1 shard at a time",
                 "pack": "data pack, a shard per CPU at a time", "tar": "tar -cf"}
        print(f"| method | images/s (median of {args.rounds}) |\n| --- | --- |")
        for k, v in median.items():
            print(f"| {names[k]} | {v:.0f} |")
        ratios = {"loader_1_vs_bare": median["loader_1"] / median["bare"],
                  "loader_0_vs_bare": median["loader_0"] / median["bare"],
                  "two_workers_vs_one": median["loader_2"] / median["loader_1"],
                  "bare_vs_pillow": median["bare"] / median["pillow"],
                  "pack_vs_tar": median["pack"] / median["tar"],
                  "pack_1_vs_tar": median["pack_1"] / median["tar"]}
        if "dali" in median:
            ratios["bare_vs_dali"] = median["bare"] / median["dali"]
            ratios["loader_1_vs_dali"] = median["loader_1"] / median["dali"]
        print(json.dumps({"images_per_s": {k: round(v, 1) for k, v in median.items()},
                          **{k: round(v, 3) for k, v in ratios.items()},
                          "load_after": round(os.getloadavg()[0], 2)}))
    finally:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
