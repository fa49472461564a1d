"""Epoch order: chunks permuted, windows shuffled, bad arguments, randomness metrics. The
per-rank split and the last-batch policies (every record once per epoch) are
tests/test_epoch_property.py's."""

import numpy as np
import pytest

from lmdbio import shuffle
from lmdbio.lab import shuffle_quality as quality
from lmdbio.errors import ConfigurationError

N = 1000


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
    assert quality.mean_batch_distance(seq, 64) == 1.0
    assert quality.adjacent_fraction(seq, 64) == 1.0
    assert quality.position_correlation(seq, seq) == pytest.approx(1.0)
    assert quality.position_correlation(seq, seq[::-1]) == pytest.approx(-1.0)
    uniform = shuffle.epoch_order(n, 1, 1, seed=0, epoch=0)
    assert quality.mean_batch_distance(uniform, 64) == pytest.approx(n / 3, rel=0.05)
    assert abs(quality.position_correlation(uniform, shuffle.epoch_order(n, 1, 1, 0, 1))) < 0.05
    # Within one chunk (window 1, chunk >= batch), records are close; wider windows spread them.
    near = quality.mean_batch_distance(shuffle.epoch_order(n, 256, 1, 0, 0), 64)
    wide = quality.mean_batch_distance(shuffle.epoch_order(n, 256, 16, 0, 0), 64)
    assert near < 256 < 0.5 * n / 3 < wide
    rows = quality.randomness_table(n, 64, blocks=(16, 256), windows=(1, 4))
    assert [(r["block"], r["window"]) for r in rows] == \
        [(0, 0), (16, 1), (16, 4), (256, 1), (256, 4), (1, 1)]
    text = quality.format_table(rows)
    assert "unshuffled" in text and len(text.splitlines()) == len(rows) + 1
