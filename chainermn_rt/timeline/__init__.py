"""Where a job's time goes, rank by rank: ``chainermn_rt.timeline`` (docs/timeline.md).

Example (on every rank, before ``trainer.run()``; beside ``chainermn_rt.resumable``)::

    comm, device = chainermn_rt.setup()
    ...
    chainermn_rt.timeline(trainer, comm)      # on when the job says so (render --timeline)
    chainermn_rt.timeline(trainer, comm, directory="result/timeline")   # always on
    trainer.run()

Each rank appends its steps' phases (data wait, compute, gradient exchange, update,
extensions) to ``DIRECTORY/rank-NNNNN.jsonl`` (:mod:`~chainermn_rt.timeline.records`), with
its clock's offset against rank 0's; ``chainermn-rt timeline`` merges them into one Chrome
trace (Perfetto), ``chainermn-rt report`` into a page. At the end rank 0 names a slow rank, if
any (:mod:`~chainermn_rt.timeline.straggler`), and writes ``DIRECTORY/slow-nodes.txt``.

Modules: ``records`` (the file format), ``clock`` (offsets against rank 0), ``gpu`` (NVTX
ranges, the optional device synchronisation), ``recorder`` (the trainer's hooks), ``live``
(rank 0's running view), ``straggler`` (the rule), ``metrics`` (Prometheus' text format),
``merge`` (records to steps and to a trace), ``report`` (the page), ``locate`` (a job id to
its folder).
"""

from __future__ import annotations

import os
from pathlib import Path

from chainermn_rt.errors import UserError
from chainermn_rt.rank_contract import METRICS_DIR_VAR, TIMELINE_VAR

__all__ = ["timeline"]


def timeline(trainer, comm, directory: str | Path | None = None, *, every: int = 1,
             sync: bool = False, nvtx: bool | None = None, metrics_every: float = 15.0,
             environ=None):
    """Record ``trainer``'s steps on every rank of ``comm`` (a ChainerMN communicator, on
    every rank, before ``trainer.run()``); returns the recorder, or None when it is off.

    On when ``directory`` is given or the job script sets ``CHAINERMN_RT_TIMELINE`` (``render
    --timeline``: the folder ``timeline/<job id>`` in the job's working folder, which wins over
    ``directory`` so that ``chainermn-rt timeline JOBID`` finds it), or when the site's
    profile names a metrics folder (``CHAINERMN_RT_METRICS_DIR``: metrics only, no files).
    ``every``: record every N-th iteration. ``sync``: wait for the GPU before each stamp
    (exact phases, slower steps). ``nvtx``: NVTX ranges (default: on a GPU).
    ``metrics_every``: seconds between rank 0's looks at every rank's recent steps (the
    metrics and the straggler rule).
    """
    environ = os.environ if environ is None else environ
    folder = environ.get(TIMELINE_VAR) or directory or None
    metrics_dir = environ.get(METRICS_DIR_VAR) or None
    if folder is None and metrics_dir is None:
        return None
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise UserError(f"timeline: every={every!r}; allowed: an integer >= 1")
    if not metrics_every > 0:
        raise UserError(f"timeline: metrics_every={metrics_every!r}; allowed: seconds > 0")
    from chainermn_rt.timeline import gpu
    from chainermn_rt.timeline.recorder import Recorder

    device = getattr(trainer.updater, "device", None)
    if nvtx is None:
        nvtx = gpu.on_gpu(device)
    recorder = Recorder(getattr(comm, "mpi_comm", comm), folder, every=every,
                        sync=bool(sync) and gpu.on_gpu(device),
                        nvtx=gpu.nvtx_module() if nvtx else None, metrics_dir=metrics_dir,
                        metrics_every=metrics_every, environ=environ)
    recorder.install(trainer, comm)
    return recorder
