"""Shuffle quality next to its cost: the entropy of the gaps, the class share of a batch on a
class-sorted set, the node readers' bytes (lmdbio.lab.shuffle_quality; against the readers' own
counters under MPI: tests/mpi_ranks/test_window_bytes.py), and DALI's row."""

import importlib.util

import numpy as np
import pytest

from lmdbio import shuffle as sh
from lmdbio.lab import shuffle_quality as quality
from lmdbio.plan import plan_extents

N, B, CLASSES = 60000, 256, 10     # CIFAR-10's size: 6,000 records a class


def test_gap_entropy_is_the_entropy_of_the_gaps():
    # gaps 2, 2, 1: p = 2/3 and 1/3
    assert quality.gap_entropy(np.array([0, 2, 4, 5])) == pytest.approx(
        -(2 / 3 * np.log2(2 / 3) + 1 / 3 * np.log2(1 / 3)))
    assert quality.gap_entropy(np.array([5, 4, 3])) == 0.0          # |gap| 1: as file order


def test_score_is_zero_for_file_order_and_near_one_for_a_random_permutation():
    assert quality.order_quality(np.arange(N), B, CLASSES)["entropy_score"] == 0.0
    for seed in (1, 2):
        uniform = sh.epoch_order(N, 1, 1, seed, 0)                 # blocks of one record
        assert quality.order_quality(uniform, B, CLASSES)["entropy_score"] == pytest.approx(1, abs=0.01)
    # Shuffled within windows of 1,024 records: between the two.
    window = quality.order_quality(sh.epoch_order(N, 256, 4, 0, 0), B, CLASSES)["entropy_score"]
    assert 0.5 < window < 0.95


def test_class_share_is_one_in_file_order_and_near_one_tenth_shuffled():
    q = quality.order_quality(np.arange(N), B, CLASSES)
    assert q["class_share_median"] == q["class_share_worst"] == 1.0
    shares = quality.batch_class_shares(sh.epoch_order(N, 1, 1, 3, 0), B, CLASSES)
    assert len(shares) == N // B and (shares >= 1 / CLASSES).all()
    assert 1 / CLASSES < np.median(shares) < 1.6 / CLASSES
    # Record i's label is i * classes // n: the batch across the class boundary holds two.
    assert quality.batch_class_shares(np.arange(1000), 200, 2).tolist() == [1, 1, 0.5, 1, 1]


def test_bytes_are_file_orders_for_shard_and_elastic_and_r_times_for_window():
    rows = {r["mode"]: r for r in quality.quality_table(N, B, 1024, nprocs=16, ranks_per_node=4)}
    assert list(rows) == ["file", "window", "shard", "elastic", "uniform"]
    assert rows["file"]["bytes_ratio"] == rows["shard"]["bytes_ratio"] == 1.0
    assert rows["elastic"]["bytes_ratio"] == pytest.approx(1, abs=0.01)
    assert 0.9 * 4 < rows["window"]["bytes_ratio"] <= 4          # 4 node readers, whole windows
    # A uniform shuffle reads only its records, one request each.
    assert rows["uniform"]["bytes_ratio"] == 1.0
    assert rows["uniform"]["requests_ratio"] == pytest.approx(B / 4, rel=0.01)


def test_node_reader_bytes_follow_plan_extents():
    n, batch, nprocs, rpn, rb = 3000, 24, 6, 2, 4096
    order = sh.shard_order(n, 50, 3, 5, 1, batch, nprocs)
    units = sh.record_windows(n, 50, 3, 5, 1)[order]
    nbytes, requests = quality.node_reader_bytes(order, batch, nprocs, rpn, units, record_bytes=rb,
                                            max_gap=3 * rb)
    reader = sh.position_ranks(n, batch, nprocs) // rpn
    for j in range(nprocs // rpn):
        want_bytes = want_requests = 0
        for u in np.unique(units):
            recs = np.unique(order[(reader == j) & (units == u)])
            _, length, _ = plan_extents(recs * rb, np.full(len(recs), rb), max_gap=3 * rb)
            want_bytes += int(length.sum())
            want_requests += len(length)
        assert (nbytes[j], requests[j]) == (want_bytes, want_requests)


def _have_dali() -> bool:
    from lmdbio.lab.dali_shuffle import dali_target

    in_venv = importlib.util.find_spec("nvidia") is not None and \
        importlib.util.find_spec("nvidia.dali") is not None
    return in_venv or (dali_target() / "nvidia" / "dali").is_dir()


@pytest.mark.skipif(not _have_dali(), reason="NVIDIA DALI is not installed (pip install --target "
                    "~/.cache/lmdbio/dali nvidia-dali-cuda120)")
def test_dali_shuffles_a_class_sorted_file_into_batches_of_one_or_two_classes():
    """DALI's caffe reader, random_shuffle=True, on 2,000-record classes: its 1,024-record
    buffer holds one or two classes, so most batches are mostly one class."""
    from lmdbio.lab.dali_shuffle import dali_order

    n = 20000
    order, version = dali_order(n, B, CLASSES)
    assert order is not None, version
    assert sorted(order.tolist()) == list(range(n))               # one epoch, every record once
    q = quality.order_quality(order, B, CLASSES)
    assert q["class_share_worst"] == 1.0 and q["class_share_median"] > 0.5
    assert q["entropy_score"] > 0.5


def test_table_renders_without_dali():
    from lmdbio.lab.shuffle_quality import markdown_table, table

    df = table(2000, 64, dali=False)
    assert df["reader"].eq("lmdbio").all() and list(df["mode"])[0] == "file"
    df.loc[0, "requests_ratio"] = float("nan")
    text = markdown_table(df, {"mode": "order", "requests_ratio": "requests"})
    assert text.splitlines()[:3] == ["| order | requests |", "|---|---|", "| file | n/a |"]
