"""Runtime ``none``: the ranks run on the node itself, with the profile's ``python``."""

from __future__ import annotations

from chainermn_rt.runtimes.base import Runtime


class Bare(Runtime):
    name = "none"


RUNTIME = Bare()
