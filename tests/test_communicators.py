"""The chunked CPU communicator equals ChainerMN's naive one bit for bit (2 real ranks), and
with more ranks gives every rank the same mean, through either exchange."""

from __future__ import annotations

import pytest

from chainermn_rt.communicators import resolve_name
from chainermn_rt.errors import UserError

from conftest import json_objects, run_mpi


@pytest.mark.mpi
def test_chunked_equals_naive_two_ranks():
    proc = run_mpi(2, ["tests/programs/communicators_equal.py"], timeout=300)
    rows = sorted(json_objects(proc.stdout),
                  key=lambda r: r["rank"])
    assert [r["rank"] for r in rows] == [0, 1]
    # 3 dtypes x 2 zero_fill modes x 4 chunk sizes x 2 exchanges, plus mixed and
    # non-contiguous with each exchange
    assert [r["cases"] for r in rows] == [52, 52]
    assert rows[0]["checksum"] == rows[1]["checksum"] != 0  # both ranks saw the same means


@pytest.mark.mpi
@pytest.mark.parametrize("ranks, exchange", [(3, "SharedWindow"), (5, "MpiChunks")])
def test_chunked_more_ranks_agree(ranks, exchange):
    """3 ranks: shared memory (ranks 0-1 and 2 take different code paths to one sum);
    5 ranks: more than SHARED_MAX_RANKS, so MPI."""
    proc = run_mpi(ranks, ["tests/programs/communicators_many.py"], timeout=300)
    assert json_objects(proc.stdout) == [{"ranks": ranks, "auto": exchange, "cases": 12}]


def test_auto_resolves_by_gpu():
    assert resolve_name("auto", gpu=False) == "chunked"
    assert resolve_name("auto", gpu=True) == "pure_nccl"
    assert resolve_name("naive") == "naive"


def test_unknown_name_is_a_user_error():
    with pytest.raises(UserError, match="communicator 'fast'; allowed: auto, chunked"):
        resolve_name("fast")
