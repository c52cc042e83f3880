"""The DALI loader (chainermn_rt/data/dali.py) on GPU 0: what it hands over, and its rate.

On ImageNet-like JPEGs made here (chainermn_rt.data.writers.synthetic, Pillow) packed into shards:

- training: every batch a CuPy array on the GPU over DALI's own memory (the pointer DALI's
  output has: no copy), ``(batch, 224, 224, 3)`` uint8; an epoch's labels are those of the
  rank's own shards (2 simulated ranks);
- validation, 2 simulated ranks: every image once, labels in the manifest's order, each
  image within a few levels of libjpeg-turbo's (the turbo loader's) and far from any other;
- ``to_device``: float32 NCHW on the GPU;
- the rate: images/s of the training loader over the shards, median of 3 passes after one of
  warm-up (reported, not checked).

Prints one JSON line; exit 1 naming the first check that fails. tests/gpu_check.py's ``dali``
step runs it on a GPU; ``--device cpu`` runs the same in DALI's CPU-only mode (NumPy arrays).

    python bench/dali_gpu.py --device gpu --images 512
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"dali_gpu: {what}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--images", type=int, default=512, help="training images")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=4, help="DALI's threads")
    args = parser.parse_args(argv)

    import chainer
    import numpy

    from chainermn_rt.data import dali, make_loader, manifest, open_source, shards
    from chainermn_rt.data.batch import Batch, to_device
    from chainermn_rt.data.writers import pack, synthetic

    gpu = 0 if args.device == "gpu" else None
    device = chainer.get_device("@numpy" if gpu is None else "@cupy:0")
    device.use()
    handed = []  # (DALI's pointer, the array's): as_array must not copy
    original = dali.as_array

    def spy(outputs, on_gpu):
        array = original(outputs, on_gpu)
        handed.append((outputs.as_tensor().data_ptr(),
                       array.data.ptr if on_gpu else array.ctypes.data))
        return array

    dali.as_array = spy
    with tempfile.TemporaryDirectory(prefix="dali-gpu-") as work:
        root = Path(work)
        per_class = -(-args.images // 4)
        synthetic.tree(root / "train", classes=4, per_class=per_class)
        synthetic.tree(root / "val", classes=4, per_class=5, first=per_class)
        for name in ("train", "val"):
            pack.pack(str(root / name), str(root / f"{name}-shards"),
                      pack.Options(shard_size=16 if name == "train" else 3))
        train, val = root / "train-shards", root / "val-shards"

        def loader(path, rank, train_, decoder="dali"):
            source = open_source(path, train=train_, rank=rank, size=2, buffer=64)
            return make_loader(source, args.batch, decoder=decoder,
                               workers=args.threads if decoder == "dali" else 0, device=device)

        xp = device.xp
        for rank in (0, 1):
            it = loader(train, rank, True)
            source, labels = it.source, []
            while not it.is_new_epoch:
                batch = next(it)
                check(isinstance(batch.images, xp.ndarray) and batch.images.dtype == numpy.uint8
                      and batch.images.shape == (len(batch), 224, 224, 3),
                      f"training batch {type(batch.images)} {batch.images.shape}")
                if gpu is not None:
                    check(batch.images.device.id == 0, "training batch not on GPU 0")
                labels += batch.labels.tolist()
            own = [source.manifest.shards[i].name for i in source.own_shards(0)]
            want = [s.label for name in own for s in shards.read_file(str(train / name))]
            check(sorted(labels[:len(want)]) == sorted(want), f"rank {rank}: epoch 0's labels")
            it.finalize()
        check(handed and all(a == b for a, b in handed), f"copied: {handed[:3]}")
        last = batch.images.data.ptr if gpu is not None else batch.images.ctypes.data
        check(last == handed[-1][1], "the last batch is not DALI's memory")

        found, distances = [], []
        for rank in (0, 1):
            ours = list(loader(val, rank, False))
            theirs = [Batch(b.images.copy(), b.labels) for b in loader(val, rank, False, "turbo")]
            found += [int(x) for b in ours for x in b.labels]
            a = numpy.concatenate([xp.asnumpy(b.images) if gpu is not None
                                   else b.images for b in ours]).astype(numpy.int16)
            b = numpy.concatenate([t.images for t in theirs]).astype(numpy.int16)
            d = numpy.abs(a[:, None] - b[None]).mean(axis=(2, 3, 4))
            distances.append((float(d.diagonal().max()),
                              float((d + 255 * numpy.eye(len(a))).min())))
        m = manifest.load(val)
        want = [s.label for sh in m.shards for s in shards.read_file(str(val / sh.name))]
        check(found == want and len(found) == m.count, "validation: not every image once")
        check(all(same < 8 and 2 * same < other for same, other in distances),
              f"validation images against libjpeg-turbo's: {distances}")

        x, t = to_device(batch, device)
        check(x.dtype == numpy.float32 and x.shape == (len(batch), 3, 224, 224)
              and isinstance(x, xp.ndarray), f"to_device gave {type(x)} {x.shape}")

        it, rates = loader(train, 0, True), []
        for i in range(4):
            start, n = time.perf_counter(), 0
            while True:
                n += len(next(it))
                if it.is_new_epoch:
                    break
            if gpu is not None:
                xp.cuda.Device().synchronize()
            if i:
                rates.append(n / (time.perf_counter() - start))
        it.finalize()
    import nvidia.dali

    print(json.dumps({"device": args.device, "dali": nvidia.dali.__version__,
                      "images_per_s": round(statistics.median(rates), 1), "batch": args.batch,
                      "threads": args.threads, "zero_copy_batches": len(handed),
                      "validation_images": len(found),
                      "validation_vs_turbo_levels": round(max(s for s, _ in distances), 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
