"""The "shard" shuffle mode: shard each window among the ranks, then shuffle each shard. That
every record comes once per epoch is tests/test_epoch_property.py's."""

import numpy as np
import pytest

from lmdbio import shuffle as sh
from lmdbio.lab import shuffle_quality as quality
from lmdbio.pipeline import EpochPlan, epoch_rows

N, B = 1000, 48          # 1000 % 48 = 40: a partial last batch; 48 divides among 1, 3, 4, 16 ranks
# (chunk, window): windows of 27, 210 and 48 records, none a multiple of B, so windows start
# inside rows; and chunks that do not divide N (the short chunk moves each epoch).
SHAPES = [(9, 3), (70, 3), (16, 3)]


def _runs_ok(order, n, chunk, window, seed, epoch, nprocs, policy):
    """Whether each rank's records of each window are one run of the window's delivered
    records in file order, ranks in rank order."""
    owner = sh.position_ranks(n, B, nprocs, policy)
    win = sh.record_windows(n, chunk, window, seed, epoch)[order]
    for w in np.unique(win):
        pos = np.flatnonzero((win == w) & (owner < nprocs))
        sorted_recs = np.sort(order[pos])
        start = 0
        for r in range(nprocs):
            mine = np.sort(order[pos[owner[pos] == r]])
            if not np.array_equal(mine, sorted_recs[start:start + len(mine)]):
                return False
            start += len(mine)
    return True


@pytest.mark.parametrize("nprocs", [1, 3, 4, 16])
@pytest.mark.parametrize("policy", sh.POLICIES)
@pytest.mark.parametrize("chunk,window", SHAPES)
def test_shard_order_keeps_the_windows_and_gives_each_rank_a_run(nprocs, policy, chunk, window):
    for epoch in (0, 1):
        order = sh.shard_order(N, chunk, window, 5, epoch, B, nprocs, policy)
        # Same windows as the window mode: each position's window is unchanged.
        ref = sh.epoch_order(N, chunk, window, 5, epoch)
        win = sh.record_windows(N, chunk, window, 5, epoch)
        assert np.array_equal(win[order], win[ref])
        assert _runs_ok(order, N, chunk, window, 5, epoch, nprocs, policy)


def test_window_mode_is_not_contiguous():
    """The property fails for the window mode (the check can fail)."""
    order = sh.epoch_order(N, 70, 3, 5, 0)
    assert not _runs_ok(order, N, 70, 3, 5, 0, 4, "short")


@pytest.mark.parametrize("policy", sh.POLICIES)
def test_one_rank_gives_the_window_order(policy):
    for chunk, window in SHAPES + [(1, 1), (1000, 1)]:
        for epoch in (0, 3):
            assert np.array_equal(sh.shard_order(N, chunk, window, 2, epoch, B, 1, policy),
                                  sh.epoch_order(N, chunk, window, 2, epoch))
    rows = quality.mode_table(N, B, blocks=(16,), windows=(4,), nprocs=(1,))
    a, b = ({k: v for k, v in r.items() if k != "mode"} for r in rows)
    assert a == b


def test_shard_order_depends_on_ranks_and_seeds_only():
    a = sh.shard_order(N, 16, 4, 1, 0, B, 4)
    assert np.array_equal(a, sh.shard_order(N, 16, 4, 1, 0, B, 4))
    assert not np.array_equal(a, sh.shard_order(N, 16, 4, 1, 0, B, 16))
    assert not np.array_equal(a, sh.shard_order(N, 16, 4, 1, 1, B, 4))
    assert not np.array_equal(a, sh.shard_order(N, 16, 4, 2, 0, B, 4))


def test_mode_table_shows_the_cost():
    rows = quality.mode_table(6000, 256, blocks=(64,), windows=(16,), nprocs=(1, 16))
    by = {(r["mode"], r["nprocs"]): r for r in rows}
    # At P = 16 a rank's share comes from 1/16 of a 1,024-record window: close together.
    assert by["shard", 16]["share_distance"] < 0.1 * by["window", 16]["share_distance"]
    assert by["shard", 1]["mean_distance"] == by["window", 1]["mean_distance"]
    assert "shard" in quality.format_mode_table(rows)


def test_plan_modes():
    assert EpochPlan(shuffle=True).mode == EpochPlan(shuffle="window").mode == "window"
    assert EpochPlan(shuffle="shard").mode == "shard" and EpochPlan().mode is None
    a = epoch_rows(EpochPlan(shuffle=True, block=9), N, B, 4, 2, 1)
    b = epoch_rows(EpochPlan(shuffle="window", block=9), N, B, 4, 2, 1)
    assert np.array_equal(a.rows, b.rows)
    for bad in ("random", "Shard", 1, None):
        with pytest.raises(ValueError, match="'window', 'shard'"):
            EpochPlan(shuffle=bad)
