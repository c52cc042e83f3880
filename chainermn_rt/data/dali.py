"""Batches decoded by NVIDIA DALI (``--decoder dali``; pyproject's ``dali`` extra, the gpu-dali
image): on a GPU, nvJPEG decodes (its hardware decoder where the GPU has one) and the batch
reaches CuPy without a copy; with no GPU, DALI's CPU-only mode runs the same pipeline.

    train = DaliLoader(ShardSource(path, comm.rank, comm.size, train=True), 32, TrainCrop(),
                       gpu=device.device.id)    # None: DALI's CPU-only mode, NumPy batches
    updater = StandardUpdater(train, optimizer, converter=to_device, device=device)

The same iterator as ``loader.Loader`` (``iterator.BatchIterator``): the same samples in the same
order from the same per-rank split (``sources``), the same boxes and flips (``transforms``:
key, epoch and seed alone), the same :class:`~chainermn_rt.data.batch.Batch` of uint8 images
and labels. What differs: DALI decodes the box's region and resizes it with its own filters
(pixels differ from libjpeg-turbo's by a few levels), ``workers`` are DALI's threads, and a
batch's images are valid as long as they are referenced (DALI's outputs are reference-counted).
Bit-identical pixels hold on the CPU from run to run (so a resumed job sees what an
uninterrupted one would); on a GPU DALI does not promise them (nvJPEG's hardware and CUDA
decoders and GPU models differ), so a resume there is exact in samples, boxes and flips only.
"""

from __future__ import annotations

import numpy

from chainermn_rt.data import jpeg
from chainermn_rt.data.cpus import default_workers
from chainermn_rt.data.iterator import BatchIterator, Job
from chainermn_rt.data.shards import DataError
from chainermn_rt.errors import UserError

OPTION = "--decoder dali"


def require():
    """``nvidia.dali``, imported now; a UserError naming the option and how to get DALI."""
    try:
        import nvidia.dali as dali
    except (ImportError, OSError) as err:
        raise UserError(f"{OPTION}: NVIDIA DALI does not import ({err}); allowed: --decoder "
                        "turbo, or DALI from pyproject's dali extra (pip install "
                        "'chainermn-rt[dali]'; `make setup` does) or the gpu-dali image "
                        "(make image FLAVOR=gpu-dali)", everywhere=True) from None
    return dali


def as_array(outputs, gpu: bool):
    """A DALI output batch as a CuPy (``gpu``) or NumPy array over DALI's own memory: no copy."""
    tensor = outputs.as_tensor()
    if gpu:
        import cupy

        return cupy.asarray(tensor)
    return numpy.asarray(tensor)


class DaliLoader(BatchIterator):
    """A Chainer iterator of :class:`Batch` es of ``batch_size`` from ``source``, each image
    ``transform``'s box resized to ``size`` x ``size``, decoded by DALI on GPU ``gpu`` (CuPy
    arrays there) or, with ``gpu=None``, on the CPU (NumPy arrays). ``workers``: DALI's threads
    (default: the rank's CPUs less one, at least one); ``depth``: batches DALI prepares ahead."""

    def __init__(self, source, batch_size: int, transform, *, size: int = 224,
                 workers: int | None = None, repeat: bool = True, depth: int | None = None,
                 gpu: int | None = None):
        require()
        super().__init__(source, batch_size, repeat=repeat)
        self.transform, self.size, self.gpu = transform, size, gpu
        self.workers = max(1, default_workers(spare=1) if workers is None else workers)
        self.depth = depth or 2
        self._pipe = None
        self._restart()

    def finalize(self) -> None:
        self._pipe = None  # DALI's threads and buffers go with it

    # --- the pipeline ----------------------------------------------------------------------
    def _build(self):
        from nvidia.dali import Pipeline, fn, types

        pipe = Pipeline(batch_size=self.batch_size, num_threads=self.workers,
                        device_id=self.gpu, prefetch_queue_depth=self.depth)
        with pipe:
            jpegs, anchors, shapes, flips = fn.external_source(
                source=self._feed, num_outputs=4, batch=True,
                dtype=[types.UINT8, types.FLOAT, types.FLOAT, types.INT32])
            images = fn.decoders.image_slice(
                jpegs, anchors, shapes, device="cpu" if self.gpu is None else "mixed",
                output_type=types.RGB, normalized_anchor=False, normalized_shape=False,
                axis_names="WH")
            images = fn.resize(images, resize_x=self.size, resize_y=self.size)
            pipe.set_outputs(fn.flip(images, horizontal=flips))
        pipe.build()
        return pipe

    def _feed(self):
        """DALI's input for the next batch (called by DALI, ``depth`` batches ahead): the
        encoded images and each one's box and flip; StopIteration at the end of a pass."""
        job = self._take()
        if job is None:
            raise StopIteration
        images, anchors, shapes, flips = [], [], [], []
        for sample, epoch in zip(job.samples, job.epoch_of, strict=True):
            data = sample.image()
            try:
                width, height = jpeg.header(data)[:2]
            except jpeg.DecodeError as err:
                raise DataError(f"{sample.shard}: sample {sample.key!r}: {err}") from None
            if width * height > jpeg.MAX_PIXELS:
                raise DataError(f"{sample.shard}: sample {sample.key!r}: {width}x{height} "
                                f"pixels; allowed: at most {jpeg.MAX_PIXELS}")
            (x0, y0, x1, y1), flip = self.transform.box(width, height, sample.key, epoch)
            images.append(numpy.frombuffer(data, numpy.uint8))
            anchors.append(numpy.array([x0, y0], numpy.float32))
            shapes.append(numpy.array([x1 - x0, y1 - y0], numpy.float32))
            flips.append(numpy.array(flip, numpy.int32))
        self._add_in_flight(job)
        return images, anchors, shapes, flips

    def _produce(self) -> tuple[Job, object]:
        if self._pipe is None:
            self._pipe = self._build()
        stream = None
        if self.gpu is not None:
            import cupy

            stream = cupy.cuda.get_current_stream()  # outputs bound to it: freed in its order
        try:
            (images,) = self._pipe.run(stream)
        except RuntimeError as err:
            raise self._blame(err) from None
        return self._pop_in_flight(), as_array(images, self.gpu is not None)

    def _drop_in_flight(self) -> None:
        self._pipe = None  # DALI's scheduled batches cannot be taken back: a new pipeline

    def _restart(self) -> None:
        super()._restart()
        if self._pipe is not None:
            self._pipe.reset()  # after a whole pass: DALI reads again from the start

    def _blame(self, err: Exception) -> DataError:
        """DALI's error as one line naming a sample: the first of the batches in flight that
        libjpeg-turbo cannot decode either, else the oldest batch's first."""
        self._pipe = None  # DALI's pipeline is unusable after an error
        lines = [line.strip(" :") for line in str(err).splitlines() if line.strip(" :")]
        after = lines.index("encountered") + 1 if "encountered" in lines else 0
        what = lines[after] if after < len(lines) else type(err).__name__
        in_flight = self._in_flight()
        for job in in_flight:
            for sample in job.samples:
                try:
                    jpeg.decode(sample.image(), (8, 8))
                except jpeg.DecodeError as bad:
                    return DataError(f"{sample.shard}: sample {sample.key!r}: {bad} (DALI: "
                                     f"{what})")
        first = in_flight[0].samples[0] if in_flight else None
        where = f"{first.shard}: batch from sample {first.key!r}" if first else \
            self.source_name()
        return DataError(f"{where}: DALI: {what}")
