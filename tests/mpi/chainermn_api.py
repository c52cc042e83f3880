"""Rank-side check of the whole ChainerMN API on CPU: run with ``mpirun -np 2``.

Usage: ``mpirun -np 2 python -W error tests/mpi/chainermn_api.py COMMUNICATOR WORKDIR [CHECK...]``
(all checks unless some are named).
Each check prints ``ok <check> rank=<r>`` and raises on any mismatch; the pytest side
(tests/test_chainermn_api.py) requires every check on every rank.
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import chainermn.functions
import chainermn.links
import numpy as np
from chainer import training
from chainer.training import extensions

chainer.disable_experimental_feature_warning = True  # MNBN, multi_node_snapshot are "experimental"

CHECKS: list = []


def check(func):
    CHECKS.append(func)
    return func


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(what)


def close(a, b, what: str, atol: float = 1e-5) -> None:
    a, b = np.asarray(a), np.asarray(b)
    expect(a.shape == b.shape and np.allclose(a, b, atol=atol), f"{what}: {a!r} != {b!r}")


def rank_rows(rank: int, n: int = 4, dim: int = 3) -> np.ndarray:
    """Deterministic, rank-dependent inputs every rank can recompute for any other rank."""
    return (np.arange(n * dim, dtype=np.float32).reshape(n, dim) + 10 * rank) / 7.0


class Model(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 2, initialW=np.arange(6, dtype=np.float32).reshape(2, 3) / 10,
                               initial_bias=0.5)

    def forward(self, x, t):
        loss = F.softmax_cross_entropy(self.fc(x), t)
        chainer.report({"loss": loss, "rank": float(COMM.rank)}, self)
        return loss


@check
def communicator(comm):
    expect(comm.size == 2 and comm.rank in (0, 1), f"size {comm.size} rank {comm.rank}")
    expect(comm.intra_size == 2 and comm.inter_size == 1, "one node, two local ranks")
    x = np.full(3, comm.rank + 1, dtype=np.float32)
    close(comm.allreduce(x), np.full(3, 3.0), "allreduce sums")
    close(comm.bcast(np.arange(3, dtype=np.float32) * (comm.rank + 1)), np.arange(3), "bcast")
    gathered = comm.allgather(x)
    close(np.stack(gathered), [[1, 1, 1], [2, 2, 2]], "allgather")


@check
def objects(comm):
    got = comm.bcast_obj({"from": comm.rank, "items": [1, 2]} if comm.rank == 0 else None)
    expect(got == {"from": 0, "items": [1, 2]}, f"bcast_obj {got}")
    everyone = comm.gather_obj(("rank", comm.rank))
    if comm.rank == 0:
        expect(everyone == [("rank", 0), ("rank", 1)], f"gather_obj {everyone}")
    else:
        expect(everyone is None, "gather_obj off-root returns None")
    expect(comm.allreduce_obj(comm.rank + 1) == 3, "allreduce_obj")
    peer = 1 - comm.rank
    if comm.rank == 0:
        comm.send_obj({"hello": "from 0"}, dest=peer)
        expect(comm.recv_obj(source=peer) == ["from", 1], "recv_obj on 0")
    else:
        expect(comm.recv_obj(source=peer) == {"hello": "from 0"}, "recv_obj on 1")
        comm.send_obj(["from", 1], dest=peer)
    # Array send/recv (not pickled).
    if comm.rank == 0:
        comm.send(np.arange(4, dtype=np.float32), dest=1, tag=7)
    else:
        close(comm.recv(source=0, tag=7), np.arange(4), "send/recv array")


@check
def datasets(comm):
    data = list(range(11)) if comm.rank == 0 else None
    mine = chainermn.scatter_dataset(data, comm, shuffle=False)
    everyone = comm.bcast_obj(comm.gather_obj(list(mine)))
    expect(len(everyone[0]) == len(everyone[1]) == 6, f"equal lengths {everyone}")
    expect(sorted(set(everyone[0]) | set(everyone[1])) == list(range(11)), "covers all")
    shuffled = chainermn.scatter_dataset(data, comm, shuffle=True, seed=3)
    expect(len(shuffled) == 6, "shuffled length")
    bounds = comm.bcast_obj(comm.gather_obj(chainermn.scatter_index(11, comm)))
    expect(bounds == [(0, 6), (5, 11)], f"scatter_index, equal lengths: {bounds}")
    bounds = comm.bcast_obj(comm.gather_obj(
        chainermn.scatter_index(11, comm, force_equal_length=False)))
    expect(bounds == [(0, 6), (6, 11)], f"scatter_index, no duplicates: {bounds}")


@check
def multi_node_optimizer(comm):
    model = Model()
    if comm.rank == 1:  # different start: bcast_data on the first update must fix it
        model.fc.W.array[...] = 42.0
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(lr=0.5), comm)
    optimizer.setup(model)
    labels = np.array([0, 1, 1, 0], dtype=np.int32)
    # Expected: SGD step with the mean over ranks of each rank's gradient, from rank 0's start.
    grads = []
    for r in range(comm.size):
        ref = Model()
        ref.cleargrads()
        ref(rank_rows(r), labels).backward()
        grads.append(ref.fc.W.grad.copy())
    expected = Model().fc.W.array - 0.5 * np.mean(grads, axis=0)
    optimizer.update(model, rank_rows(comm.rank), labels)  # first call: bcast_data only
    close(model.fc.W.array, Model().fc.W.array, "first update broadcasts rank 0's weights")
    optimizer.update(model, rank_rows(comm.rank), labels)
    close(model.fc.W.array, expected, "W after one multi-node SGD step")
    weights = comm.allgather(model.fc.W.array)
    close(weights[0], weights[1], "same weights on every rank")


@check
def multi_node_iterators(comm):
    data = [np.full(2, i, dtype=np.float32) for i in range(8)]
    actual = chainer.iterators.SerialIterator(data, 3, shuffle=True) if comm.rank == 0 else None
    iterator = chainermn.iterators.create_multi_node_iterator(actual, comm)
    batches = [np.stack(iterator.next()) for _ in range(3)]
    expect(iterator.dataset_size == 8 if comm.rank == 1 else True, "dataset_size on non-root")
    everyone = comm.gather_obj(batches)
    if comm.rank == 0:
        for a, b in zip(*everyone, strict=True):
            close(a, b, "multi-node iterator: same batch on every rank")
    synced = chainermn.iterators.create_synchronized_iterator(
        chainer.iterators.SerialIterator(list(range(10)), 4, shuffle=True), comm)
    order = [synced.next() for _ in range(2)]
    both = comm.bcast_obj(comm.gather_obj(order))
    expect(both[0] == both[1], f"synchronized iterator order: {both}")


def _trainer(comm, out, iterations=3):
    model = Model()
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(lr=0.1), comm)
    optimizer.setup(model)
    labels = np.array([0, 1, 1, 0], dtype=np.int32)
    dataset = chainer.datasets.TupleDataset(rank_rows(comm.rank), labels)
    iterator = chainer.iterators.SerialIterator(dataset, 2, shuffle=False)
    updater = training.StandardUpdater(iterator, optimizer)
    return training.Trainer(updater, (iterations, "iteration"), out=out), model, optimizer


@check
def multi_node_evaluator(comm):
    model = Model()
    labels = np.array([0, 1, 1, 0], dtype=np.int32)
    dataset = chainer.datasets.TupleDataset(rank_rows(comm.rank), labels)
    evaluator = chainermn.create_multi_node_evaluator(
        extensions.Evaluator(chainer.iterators.SerialIterator(dataset, 4, repeat=False,
                                                              shuffle=False), model), comm)
    result = evaluator()
    # "rank" is reported as 0 and 1: the multi-node mean is 0.5 on every rank.
    close(result["main/rank"], 0.5, "evaluator averages over ranks")
    losses = []
    for r in range(comm.size):
        losses.append(float(Model()(rank_rows(r), labels).array))
    close(result["main/loss"], np.mean(losses), "mean loss over ranks")


@check
def checkpointer(comm):
    """The documented loop without a trainer (trainer.run() would delete the checkpoints)."""
    out = os.path.join(WORKDIR, "checkpointer")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # deprecated upstream, still API
        cp = chainermn.create_multi_node_checkpointer("run", comm, path=out)
    trainer, model, optimizer = _trainer(comm, out)
    for iteration in range(1, 4):
        trainer.updater.update()
        cp.save(model, iteration)
    mine = sorted(f for f in os.listdir(out) if f.startswith(f"run.{comm.rank}."))
    expect(mine == [f"run.{comm.rank}.{i}" for i in (1, 2, 3)], f"checkpoint files {mine}")
    saved = model.fc.W.array.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        cp2 = chainermn.create_multi_node_checkpointer("run", comm, path=out)
    _, model2, optimizer2 = _trainer(comm, out)
    cp2.maybe_load(model2, optimizer2)
    close(model2.fc.W.array, saved, "checkpointer restores the latest weights")
    cp2.finalize()
    comm.mpi_comm.Barrier()
    expect(os.listdir(out) == [], f"finalize removes the checkpoints: {os.listdir(out)}")


def _first_iteration_recorder(seen, model):
    @training.make_extension(trigger=(1, "iteration"))
    def first_iteration(trainer):
        seen.setdefault("iteration", trainer.updater.iteration)
        seen.setdefault("W", model.fc.W.array.copy())
    return first_iteration


@check
def multi_node_snapshot(comm):
    out = os.path.join(WORKDIR, "snapshot")

    def run(iterations, seen):
        trainer, model, _ = _trainer(comm, out, iterations)
        snap = chainermn.extensions.multi_node_snapshot(
            comm, extensions.snapshot(filename="snap_iter_{.updater.iteration}", autoload=True),
            [0])
        trainer.extend(snap, trigger=(1, "iteration"))
        trainer.extend(_first_iteration_recorder(seen, model))
        trainer.run()  # autoload happens in initialize(), before the first iteration
        return model

    first, second = {}, {}
    saved = run(3, first).fc.W.array.copy()
    expect(first["iteration"] == 1, f"fresh run starts at 1: {first['iteration']}")
    run(5, second)
    expect(second["iteration"] == 4, f"autoload: first iteration run {second['iteration']}")
    # After iteration 4 the weights are one SGD step away from the restored ones.
    expect(np.abs(second["W"] - saved).max() < np.abs(second["W"] - Model().fc.W.array).max(),
           "weights restored from the snapshot, not the initial ones")


@check
def multi_node_batch_normalization(comm):
    mnbn = chainermn.links.MultiNodeBatchNormalization(3, comm)
    local = rank_rows(comm.rank)
    with chainer.using_config("train", True):
        y = mnbn(local)
    # Same as plain BatchNormalization over the global batch (both ranks' rows).
    reference = L.BatchNormalization(3)
    whole = np.concatenate([rank_rows(r) for r in range(comm.size)])
    with chainer.using_config("train", True):
        expected = reference(whole).array[4 * comm.rank:4 * (comm.rank + 1)]
    close(y.array, expected, "MNBN uses global batch statistics", atol=1e-4)
    F.sum(y * y).backward()
    expect(mnbn.gamma.grad is not None, "MNBN backward")
    close(mnbn.avg_mean, reference.avg_mean, "MNBN running mean", atol=1e-4)


@check
def collectives(comm):
    x = chainer.Variable(np.full((2,), comm.rank + 1, dtype=np.float32))
    ys = chainermn.functions.allgather(comm, x)
    close(np.stack([y.array for y in ys]), [[1, 1], [2, 2]], "functions.allgather")
    F.sum(F.stack(ys) * np.array([[1], [2]], dtype=np.float32)).backward()
    # Every rank weights y_r by (r + 1): x's gradient is the sum over both ranks' losses.
    close(x.grad, np.full(2, 2.0 * (comm.rank + 1)), "allgather backward sums over ranks")

    xs = [chainer.Variable(np.full((2,), 10 * comm.rank + i, dtype=np.float32))
          for i in range(comm.size)]
    ys = chainermn.functions.alltoall(comm, xs)
    close(np.stack([y.array for y in ys]), [[comm.rank] * 2, [10 + comm.rank] * 2],
          "functions.alltoall")

    root_value = chainer.Variable(np.arange(3, dtype=np.float32)) if comm.rank == 0 else None
    y = chainermn.functions.bcast(comm, root_value)
    close(y.array, np.arange(3), "functions.bcast")

    g = chainermn.functions.gather(comm, chainer.Variable(np.full(2, comm.rank, np.float32)))
    if comm.rank == 0:
        close(np.stack([v.array for v in g]), [[0, 0], [1, 1]], "functions.gather")

    parts = [chainer.Variable(np.full(2, i, np.float32)) for i in range(comm.size)] \
        if comm.rank == 0 else None
    y = chainermn.functions.scatter(comm, parts)
    close(y.array, np.full(2, comm.rank), "functions.scatter")


@check
def point_to_point(comm):
    if comm.rank == 0:
        x = chainer.Variable(np.arange(3, dtype=np.float32))
        phi = chainermn.functions.send(x * 2, comm, rank=1)
        grad = chainermn.functions.recv(comm, rank=1, delegate_variable=phi)
        F.sum(grad).backward()
        close(grad.array, np.arange(3) * 2 + 1, "send/recv round trip")
        close(x.grad, np.full(3, 2.0), "gradient through send and recv")
    else:
        y = chainermn.functions.recv(comm, rank=0)
        phi = chainermn.functions.send(y + 1, comm, rank=0)
        phi.backward()


def main() -> int:
    global COMM, WORKDIR
    name, WORKDIR, only = sys.argv[1], sys.argv[2], set(sys.argv[3:])
    COMM = chainermn.create_communicator(name)
    unknown = only - {func.__name__ for func in CHECKS}
    if unknown:
        raise SystemExit(f"unknown checks: {sorted(unknown)}")
    for func in CHECKS:
        if only and func.__name__ not in only:
            continue
        try:
            func(COMM)
        except BaseException:  # one failing rank must not leave the other waiting
            traceback.print_exc()
            sys.stderr.flush()
            COMM.mpi_comm.Abort(1)
        COMM.mpi_comm.Barrier()
        print(f"ok {func.__name__} rank={COMM.rank}", flush=True)
    return 0


COMM = None
WORKDIR = ""

if __name__ == "__main__":
    sys.exit(main())
