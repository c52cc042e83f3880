"""What a GPU adds to the timeline: the phases as NVTX ranges (CuPy's ``cupy.cuda.nvtx``), so
that Nsight Systems shows them beside the kernels, and, only when asked, a device
synchronisation before each stamp.

Without a synchronisation a stamp on a GPU marks when the host queued the work, not when the
device did it: ``compute`` then holds the kernels' launch and ``exchange`` the wait for them
(NCCL's allreduce waits for the backward's kernels). With ``sync=True`` each stamp first waits
for the device, so every phase holds its own kernels; that wait removes the overlap of host and
device, and the step gets slower.

>>> ranges = Ranges(None)        # no GPU: nothing to push
>>> ranges.push("data"); ranges.pop()
"""

from __future__ import annotations


class Ranges:
    """NVTX ranges through ``nvtx`` (the module ``cupy.cuda.nvtx``, or None: no ranges)."""

    def __init__(self, nvtx):
        self._nvtx = nvtx
        self.depth = 0

    def push(self, name: str) -> None:
        if self._nvtx is not None:
            self._nvtx.RangePush(name)
            self.depth += 1

    def pop(self) -> None:
        if self._nvtx is not None and self.depth:
            self._nvtx.RangePop()
            self.depth -= 1

    def close(self) -> None:
        """Pop what is still pushed (a step cut short by an exception)."""
        while self.depth:
            self.pop()


def on_gpu(device) -> bool:
    """Whether ``device`` (a Chainer device, or what its updater holds) is a CUDA GPU."""
    return getattr(getattr(device, "xp", None), "__name__", "") == "cupy"


def nvtx_module():
    """``cupy.cuda.nvtx``; None when CuPy or its NVTX binding cannot be imported."""
    try:
        from cupy.cuda import nvtx
    except ImportError:
        return None
    return nvtx


def synchronizer(enabled: bool):
    """A function that waits for the current CUDA device (``sync=True`` on a GPU), or None."""
    if not enabled:
        return None
    import cupy

    return lambda: cupy.cuda.Device().synchronize()
