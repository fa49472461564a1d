"""Epoch order: chunks permuted, windows shuffled, the per-rank split, the last-batch policies."""

from collections import Counter

import numpy as np
import pytest

from lmdbio import shuffle
from lmdbio.errors import ConfigurationError

N, B = 1000, 48          # 1000 % 48 = 40: a partial last batch; 48 divides among 1, 3, 4, 16 ranks


def _delivered(order, batch, nprocs, policy):
    """Every rank's batches, and all records delivered in the epoch (with repeats)."""
    per_rank = [shuffle.rank_batches(order, batch, nprocs, r, policy) for r in range(nprocs)]
    flat = np.concatenate([np.concatenate(b) if b else np.empty(0, np.int64) for b in per_rank])
    return per_rank, flat


@pytest.mark.parametrize("nprocs", [1, 3, 4, 16])
@pytest.mark.parametrize("n", [N, 960])  # with and without a partial last batch
def test_short_delivers_every_record_exactly_once(nprocs, n):
    order = shuffle.epoch_order(n, block=10, window=3, seed=7, epoch=2)
    per_rank, flat = _delivered(order, B, nprocs, "short")
    assert sorted(flat.tolist()) == list(range(n))
    nb = shuffle.num_batches(n, B, "short")
    assert nb == -(-n // B) and all(len(b) == nb for b in per_rank)
    for t in range(nb):  # the ranks' shares, in rank order, are the global batch
        glued = np.concatenate([per_rank[r][t] for r in range(nprocs)])
        assert np.array_equal(glued, order[t * B:(t + 1) * B])
    sizes = [len(per_rank[r][-1]) for r in range(nprocs)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == (n % B or B)


@pytest.mark.parametrize("nprocs", [1, 3, 4, 16])
def test_pad_fills_the_last_batch_from_the_start(nprocs):
    order = shuffle.epoch_order(N, block=10, window=3, seed=7, epoch=0)
    per_rank, flat = _delivered(order, B, nprocs, "pad")
    rest = N % B
    assert Counter(flat.tolist()) == Counter(list(range(N)) + order[:B - rest].tolist())
    assert all(len(x) == B // nprocs for b in per_rank for x in b)


@pytest.mark.parametrize("nprocs", [1, 3, 4, 16])
def test_drop_leaves_out_the_partial_batch(nprocs):
    order = shuffle.epoch_order(N, block=10, window=3, seed=7, epoch=0)
    per_rank, flat = _delivered(order, B, nprocs, "drop")
    keep = N - N % B
    assert sorted(flat.tolist()) == sorted(order[:keep].tolist())
    assert len(set(flat.tolist())) == keep
    assert all(len(b) == N // B for b in per_rank)


@pytest.mark.parametrize("n,chunk,window", [(1000, 10, 3), (1001, 64, 1), (50, 100, 2),
                                            (7, 1, 1), (4096, 256, 16)])
def test_order_is_a_permutation(n, chunk, window):
    order = shuffle.epoch_order(n, chunk, window, seed=1, epoch=0)
    assert order.dtype == np.int64 and sorted(order.tolist()) == list(range(n))


def test_same_seed_and_epoch_give_the_same_order_and_others_differ():
    a = shuffle.epoch_order(N, 16, 4, seed=3, epoch=5)
    assert np.array_equal(a, shuffle.epoch_order(N, 16, 4, seed=3, epoch=5))
    assert not np.array_equal(a, shuffle.epoch_order(N, 16, 4, seed=3, epoch=6))
    assert not np.array_equal(a, shuffle.epoch_order(N, 16, 4, seed=4, epoch=5))


def test_window_one_keeps_each_chunk_contiguous():
    n, chunk = 1003, 16
    order = shuffle.epoch_order(n, chunk, window=1, seed=0, epoch=1)
    ids = order // chunk
    nchunks = -(-n // chunk)
    # Each chunk's records form one run of the order, and the chunks are permuted.
    assert np.count_nonzero(np.diff(ids)) == nchunks - 1
    runs = ids[np.r_[0, np.flatnonzero(np.diff(ids)) + 1]]
    assert sorted(runs.tolist()) == list(range(nchunks))
    assert not np.array_equal(runs, np.arange(nchunks))
    assert not np.array_equal(order, np.arange(n))   # records shuffled inside their chunk


def test_windows_mix_chunks_but_never_beyond_the_window():
    n, chunk, window = 4000, 20, 5
    order = shuffle.epoch_order(n, chunk, window, seed=2, epoch=0)
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    by_chunk = pos.reshape(-1, chunk)
    # A chunk's records lie in one window: the same block of window * chunk positions.
    span = window * chunk
    assert (by_chunk.min(axis=1) // span == by_chunk.max(axis=1) // span).all()
    assert np.count_nonzero(np.diff(order // chunk)) > n // chunk  # runs broken up


def test_bad_arguments_are_clear():
    order = np.arange(10)
    with pytest.raises(ValueError, match="batch_size 11 is larger than the dataset"):
        shuffle.rank_batches(order, 11, 1, 0)
    with pytest.raises(ValueError, match="unknown last-batch policy"):
        shuffle.global_batches(order, 5, "wrap")
    with pytest.raises(ValueError, match="does not divide among 3 ranks"):
        shuffle.rank_batches(order, 4, 3, 0)
    with pytest.raises(ValueError, match="rank 3 is not below nprocs 3"):
        shuffle.rank_batches(order, 3, 3, 3)
    with pytest.raises(ValueError, match="block must be >= 1"):
        shuffle.epoch_order(10, 0, 1, 0, 0)
    with pytest.raises(ConfigurationError, match="seed must be an integer"):
        shuffle.epoch_order(10, 2, 1, 0.5, 0)
    assert shuffle.DEFAULT_POLICY == "short"


def test_randomness_metrics():
    n = 30000
    seq = np.arange(n)
    assert shuffle.mean_batch_distance(seq, 64) == 1.0
    assert shuffle.adjacent_fraction(seq, 64) == 1.0
    assert shuffle.position_correlation(seq, seq) == pytest.approx(1.0)
    assert shuffle.position_correlation(seq, seq[::-1]) == pytest.approx(-1.0)
    uniform = shuffle.epoch_order(n, 1, 1, seed=0, epoch=0)
    assert shuffle.mean_batch_distance(uniform, 64) == pytest.approx(n / 3, rel=0.05)
    assert abs(shuffle.position_correlation(uniform, shuffle.epoch_order(n, 1, 1, 0, 1))) < 0.05
    # Within one chunk (window 1, chunk >= batch), records are close; wider windows spread them.
    near = shuffle.mean_batch_distance(shuffle.epoch_order(n, 256, 1, 0, 0), 64)
    wide = shuffle.mean_batch_distance(shuffle.epoch_order(n, 256, 16, 0, 0), 64)
    assert near < 256 < 0.5 * n / 3 < wide
    rows = shuffle.randomness_table(n, 64, blocks=(16, 256), windows=(1, 4))
    assert [(r["block"], r["window"]) for r in rows] == \
        [(0, 0), (16, 1), (16, 4), (256, 1), (256, 4), (1, 1)]
    text = shuffle.format_table(rows)
    assert "unshuffled" in text and len(text.splitlines()) == len(rows) + 1
