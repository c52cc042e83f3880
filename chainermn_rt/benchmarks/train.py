"""Training throughput on synthetic data, and the share of each step spent averaging gradients.

Every rank trains ``L.Classifier(model)`` with ChainerMN's multi-node optimizer (MomentumSGD)
on ``POOL`` batches generated in memory from ``seed + rank`` and already on the device (no
input pipeline, nothing read or downloaded):

- ``resnet50``: ``chainermn_rt.models.ResNet50`` (1000 classes) on ``(3, insize, insize)``;
- ``mlp``: ``chainermn_rt.models.MLP`` (1000 units, 10 classes) on 784-vectors.

Steps: one untimed update (ChainerMN's optimizer broadcasts the initial parameters in its
first update instead of averaging), ``warmup`` untimed updates, a barrier, then
``iterations`` timed updates (forward, backward, averaging, update; the GPU synchronised at
the end). Per rank, ``images_per_s = batch * iterations / seconds`` of that rank;
``images_per_s`` is the sum over ranks. ``averaging_share``: the time inside the
communicator's ``multi_node_mean_grad`` (the call the optimizer makes; on a GPU synchronised
before and after) over the timed seconds, all ranks together; waiting there for slower ranks
counts as averaging.

Example (every rank; ``comm, device = chainermn_rt.setup()``)::

    result = run(comm, device, "chunked", model="mlp", batchsize=32, iterations=20)
    result["images_per_s"], result["averaging_share"]
"""

from __future__ import annotations

import contextlib
import time

from chainermn_rt.benchmarks.world import check_fits, check_gpu, node_count

MODELS = ("resnet50", "mlp")
INSIZES = (32, 1024)  # ResNet-50's input side: it halves it five times
MAX_BATCH = 1 << 20
SEEDS = (0, 2**32 - 1)  # NumPy's global seed
# Host memory one rank's training takes beyond its start, measured on the CPU (bench/
# RESULTS.md): ResNet-50 about 2.4 kB per input pixel of each image of a batch (117 MB at
# 224x224), the MLP about 32 kB per sample; plus the model, its gradients and momentum.
RESNET_BYTES_PER_PIXEL, MLP_BYTES_PER_SAMPLE = 2400, 32 << 10
MODEL_BYTES = {"resnet50": 4 * 25_557_032 * 4, "mlp": 4 * 1_796_010 * 4}
MLP_INPUT, MLP_UNITS, MLP_CLASSES = 784, 1000, 10
RESNET_CLASSES = 1000
POOL = 4  # synthetic batches per rank, used in turn


def make_model(name: str, insize: int):
    """``(link, input shape of one sample, classes)`` for ``name`` in MODELS."""
    from chainermn_rt.models import MLP, ResNet50

    if name == "resnet50":
        return ResNet50(RESNET_CLASSES), (3, insize, insize), RESNET_CLASSES
    if name == "mlp":
        return MLP(MLP_UNITS, MLP_CLASSES), (MLP_INPUT,), MLP_CLASSES
    raise ValueError(f"model {name!r}; allowed: {', '.join(MODELS)}")


def host_bytes(model: str, batchsize: int, insize: int) -> int:
    """About the memory one rank training ``model`` on the CPU takes (see the constants)."""
    per_sample = RESNET_BYTES_PER_PIXEL * insize * insize if model == "resnet50" else \
        MLP_BYTES_PER_SAMPLE
    return MODEL_BYTES[model] + batchsize * per_sample


def check(model: str, batchsize: int, insize: int, communicator: str) -> None:
    """Before MPI starts: UserError naming ``--communicator`` when it needs a GPU this node
    lacks, or ``--batchsize`` when training on the CPU would not fit this node's memory."""
    from chainermn_rt.communicators import GPU_ONLY, NAMES, nccl_gpu_available

    check_gpu([communicator], "--communicator", [n for n in NAMES if n not in GPU_ONLY])
    if communicator not in GPU_ONLY and (communicator != "auto" or not nccl_gpu_available()):
        check_fits(host_bytes(model, batchsize, insize), "--batchsize", batchsize)  # CPU


def synthetic_batches(shape: tuple, classes: int, batchsize: int, seed: int, device) -> list:
    """``POOL`` pairs ``(x, t)``: standard normal float32 inputs, uniform int32 labels."""
    import numpy

    rng = numpy.random.default_rng(seed)
    return [(device.send(rng.standard_normal((batchsize, *shape), dtype=numpy.float32)),
             device.send(rng.integers(0, classes, batchsize).astype(numpy.int32)))
            for _ in range(POOL)]


class AveragingTimer:
    """Adds up the seconds spent in ``comm.multi_node_mean_grad`` while installed."""

    def __init__(self, comm, sync):
        self.comm, self.sync, self.seconds = comm, sync, 0.0

    @contextlib.contextmanager
    def installed(self):
        original = self.comm.multi_node_mean_grad

        def timed(*args, **kwargs):
            self.sync()
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.sync()
                self.seconds += time.perf_counter() - start

        self.comm.multi_node_mean_grad = timed  # the instance's attribute hides the method
        try:
            yield self
        finally:
            del self.comm.multi_node_mean_grad


def _synchronizer(device):
    import numpy

    if device.xp is numpy:
        return lambda: None
    import cupy

    return cupy.cuda.Device().synchronize


def run(comm, device, communicator: str, model: str = "mlp", batchsize: int = 32,
        insize: int = 224, iterations: int = 100, warmup: int = 10, seed: int = 0) -> dict:
    """Train ``iterations`` timed steps on every rank; the result (same on every rank)."""
    import chainer
    import chainer.links as L
    import chainermn
    import numpy

    numpy.random.seed(seed)  # the same initial parameters on every rank (then broadcast)
    link, shape, classes = make_model(model, insize)
    classifier = L.Classifier(link)
    classifier.to_device(device)
    optimizer = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=0.01, momentum=0.9), comm)
    optimizer.setup(classifier)
    batches = synthetic_batches(shape, classes, batchsize, seed + comm.rank, device)
    sync = _synchronizer(device)

    optimizer.update(classifier, *batches[0])  # broadcasts the initial parameters
    for i in range(warmup):
        optimizer.update(classifier, *batches[i % POOL])
    timer = AveragingTimer(comm, sync)
    sync()
    comm.mpi_comm.Barrier()
    with timer.installed():
        start = time.perf_counter()
        for i in range(iterations):
            optimizer.update(classifier, *batches[i % POOL])
        sync()
        seconds = time.perf_counter() - start
    per_rank = comm.mpi_comm.allgather((seconds, timer.seconds))
    images_per_rank = [batchsize * iterations / s for s, _ in per_rank]
    return {
        "benchmark": "train", "model": model, "ranks": comm.size,
        "nodes": node_count(comm.mpi_comm), "batch_per_rank": batchsize,
        "insize": insize if model == "resnet50" else None, "warmup": warmup,
        "iterations": iterations, "seconds": max(s for s, _ in per_rank),
        "images_per_s": sum(images_per_rank), "images_per_s_per_rank": images_per_rank,
        "averaging_share": sum(a for _, a in per_rank) / sum(s for s, _ in per_rank),
        "communicator": communicator, "device": "cpu" if device.xp is numpy else "gpu"}


def summary(result: dict) -> str:
    """The one human line ``bench train`` prints on rank 0."""
    r = result
    nodes = f"{r['nodes']} node" + ("s" if r["nodes"] != 1 else "")
    return (f"train {r['model']}: {r['ranks']} ranks on {nodes} ({r['device']}, "
            f"{r['communicator']}), batch {r['batch_per_rank']} per rank, {r['iterations']} "
            f"iterations: {r['images_per_s']:.1f} images/s ({r['images_per_s'] / r['ranks']:.1f}"
            f" per rank), averaging {r['averaging_share']:.1%} of the step")
