"""Shuffle quality next to its cost: how random an epoch's order is and what it costs to read.

Arithmetic on the orders of :mod:`lmdbio.shuffle`, no I/O: distances between
the records of a batch, the entropy of the gaps between neighbouring records
(Mosaic streaming's measure), the class share of a batch on a class-sorted set,
and the bytes and requests of the node readers. :func:`table` adds DALI's
caffe reader, whose order is measured (:mod:`lmdbio.lab.dali_shuffle`).
``python -m lmdbio.lab.shuffle_quality [N] [BATCH]`` prints the tables for a
data set's size.
"""

from __future__ import annotations

import sys

import numpy as np

from lmdbio.errors import ConfigurationError
from lmdbio.shuffle import (DEFAULT_PARTITIONS, DEFAULT_POLICY, MODES, check_count, elastic_order,
                            epoch_order, num_batches, position_ranks, record_windows, shard_order)

from .dali_shuffle import dali_order, dali_target

__all__ = ["mean_batch_distance", "adjacent_fraction", "mean_share_distance",
           "position_correlation", "randomness_table", "format_table", "mode_table",
           "format_mode_table", "REFERENCE_SEED", "gap_entropy", "uniform_gap_entropy",
           "batch_class_shares", "order_quality", "node_reader_bytes", "quality_table",
           "format_quality_table", "NPROCS", "RANKS_PER_NODE", "dali_target", "dali_order",
           "table", "markdown_table", "main"]

#: The rank layout :func:`table` counts the bytes for: 16 ranks, 4 per node (4 node readers).
NPROCS, RANKS_PER_NODE = 16, 4


def mean_batch_distance(order: np.ndarray, batch_size: int) -> float:
    """Mean ``|record[i+1] - record[i]|`` over consecutive records of the same batch.

    1 for the unshuffled order; about ``n / 3`` for a uniform shuffle.
    """
    order = np.asarray(order, dtype=np.int64)
    d = np.abs(np.diff(order))
    same = (np.arange(1, len(order)) % batch_size) != 0   # pairs that do not cross batches
    return float(d[same].mean()) if same.any() else float("nan")


def adjacent_fraction(order: np.ndarray, batch_size: int) -> float:
    """Fraction of consecutive pairs in a batch that are neighbours in the file (distance 1)."""
    order = np.asarray(order, dtype=np.int64)
    d = np.abs(np.diff(order))
    same = (np.arange(1, len(order)) % batch_size) != 0
    return float((d[same] == 1).mean()) if same.any() else float("nan")


def mean_share_distance(order: np.ndarray, batch_size: int, nprocs: int) -> float:
    """:func:`mean_batch_distance` within each rank's share of the full batches (what one rank's
    ``batch_size // nprocs`` records span)."""
    order = np.asarray(order, dtype=np.int64)
    share = batch_size // check_count("nprocs", nprocs, 1)
    full = len(order) // batch_size
    if share < 2 or not full:
        return float("nan")
    shares = order[:full * batch_size].reshape(full * nprocs, share)
    return float(np.abs(np.diff(shares, axis=1)).mean())


def position_correlation(order_a: np.ndarray, order_b: np.ndarray) -> float:
    """Pearson correlation of each record's position in two epochs' orders (1: same order)."""
    a, b = np.asarray(order_a), np.asarray(order_b)
    if len(a) != len(b):
        raise ConfigurationError(f"order_a and order_b must have the same length, got "
                                 f"{len(a)} and {len(b)}")
    pos_a = np.empty(len(a), np.int64)
    pos_b = np.empty(len(b), np.int64)
    pos_a[a] = np.arange(len(a))
    pos_b[b] = np.arange(len(b))
    if len(a) < 2:
        return 1.0
    return float(np.corrcoef(pos_a, pos_b)[0, 1])


def _order_stats(o0: np.ndarray, o1: np.ndarray, batch_size: int) -> dict:
    """The statistics both tables report for epoch 0's order ``o0`` (and epoch 1's ``o1``)."""
    return {"mean_distance": mean_batch_distance(o0, batch_size),
            "adjacent": adjacent_fraction(o0, batch_size),
            "epoch_correlation": position_correlation(o0, o1)}


def randomness_table(n: int, batch_size: int, blocks, windows, seed: int = 0) -> list[dict]:
    """Randomness of the orders for each (block, window): one row each, plus the two extremes.

    The extremes: the unshuffled order (block and window 0) and a uniform
    shuffle (blocks of one record).

    Columns: ``block``, ``window``, ``records_per_window``, ``mean_distance``
    (in a batch, :func:`mean_batch_distance`), ``distance_vs_uniform`` (that
    over ``n / 3``, the uniform shuffle's), ``adjacent`` (:func:`adjacent_fraction`)
    and ``epoch_correlation`` (:func:`position_correlation` of epochs 0 and 1).
    """
    rows = []
    settings = [(0, 0, "unshuffled")] + [(c, w, "") for c in blocks for w in windows] \
        + [(1, 1, "uniform (blocks of one record)")]
    for block, window, note in settings:
        if note == "unshuffled":
            o0 = o1 = np.arange(n)
        else:
            o0 = epoch_order(n, block, window, seed, 0)
            o1 = epoch_order(n, block, window, seed, 1)
        stats = _order_stats(o0, o1, batch_size)
        rows.append({"block": block, "window": window, "records_per_window": min(n, block * window)
                     if block else 0,
                     "note": note, "mean_distance": stats["mean_distance"],
                     "distance_vs_uniform": stats["mean_distance"] / (n / 3),
                     "adjacent": stats["adjacent"], "epoch_correlation": stats["epoch_correlation"]})
    return rows


def mode_table(n: int, batch_size: int, blocks, windows, nprocs=(1, 4, 16), seed: int = 0,
               policy: str = DEFAULT_POLICY, modes=("window", "shard")) -> list[dict]:
    """Shuffle modes side by side: one row per (block, window, nprocs, mode).

    Columns: ``mode`` (of ``modes``, from :data:`MODES`; ``"elastic"`` with
    :data:`DEFAULT_PARTITIONS`), ``nprocs``, ``block``, ``window``,
    ``records_per_window``, ``mean_distance`` (in a global batch,
    :func:`mean_batch_distance`), ``share_distance`` (in one rank's share,
    :func:`mean_share_distance`), ``adjacent`` (:func:`adjacent_fraction`) and
    ``epoch_correlation`` (:func:`position_correlation` of epochs 0 and 1).
    At ``nprocs = 1`` the two modes give the same order.
    """
    rows = []
    for p in nprocs:
        for block in blocks:
            for window in windows:
                for mode in modes:
                    if mode == "window":
                        o0, o1 = (epoch_order(n, block, window, seed, e) for e in (0, 1))
                    elif mode == "elastic":
                        o0, o1 = (elastic_order(n, block, window, seed, e, batch_size,
                                                DEFAULT_PARTITIONS, policy) for e in (0, 1))
                    else:
                        o0, o1 = (shard_order(n, block, window, seed, e, batch_size, p, policy)
                                  for e in (0, 1))
                    stats = _order_stats(o0, o1, batch_size)
                    rows.append({"mode": mode, "nprocs": p, "block": block, "window": window,
                                 "records_per_window": min(n, block * window),
                                 "mean_distance": stats["mean_distance"],
                                 "share_distance": mean_share_distance(o0, batch_size, p),
                                 "adjacent": stats["adjacent"],
                                 "epoch_correlation": stats["epoch_correlation"]})
    return rows


def format_mode_table(rows: list[dict]) -> str:
    """The rows of :func:`mode_table` as a fixed-width text table."""
    lines = [f"{'mode':>7} {'P':>3} {'block':>6} {'window':>6} {'rec/window':>10} "
             f"{'mean dist':>10} {'share dist':>10} {'adjacent':>8} {'epoch corr':>10}"]
    for r in rows:
        lines.append(f"{r['mode']:>7} {r['nprocs']:>3} {r['block']:>6} {r['window']:>6} "
                     f"{r['records_per_window']:>10} {r['mean_distance']:>10.1f} "
                     f"{r['share_distance']:>10.1f} {r['adjacent']:>8.3f} "
                     f"{r['epoch_correlation']:>10.3f}")
    return "\n".join(lines)


def format_table(rows: list[dict]) -> str:
    """The rows of :func:`randomness_table` as a fixed-width text table."""
    head = (f"{'block':>7} {'window':>6} {'rec/window':>10} {'mean dist':>10} {'vs uniform':>10} "
            f"{'adjacent':>8} {'epoch corr':>10}  note")
    lines = [head]
    for r in rows:
        lines.append(f"{r['block']:>7} {r['window']:>6} {r['records_per_window']:>10} "
                     f"{r['mean_distance']:>10.1f} {r['distance_vs_uniform']:>10.3f} "
                     f"{r['adjacent']:>8.3f} {r['epoch_correlation']:>10.3f}  {r['note']}")
    return "\n".join(lines)


# --- shuffle quality next to its cost ------------------------------------------------------------

#: Seed of the uniform random permutation :func:`uniform_gap_entropy` scores against (any order's
#: score uses the same reference, whatever its own seed).
REFERENCE_SEED = 314159


def gap_entropy(order: np.ndarray) -> float:
    """Shannon entropy, in bits, of the gaps between neighbouring records of ``order``.

    With ``g_i = |order[i+1] - order[i]|`` over the ``n - 1`` neighbouring
    pairs of the whole epoch and ``p_d`` the share of pairs with ``g_i = d``:
    ``H = -sum_d p_d log2 p_d``. 0 for file order (every gap is 1); near
    ``log2 n`` less the estimate's bias for a uniform random permutation
    (:func:`uniform_gap_entropy`). This is the sample half of Mosaic streaming's
    shuffle quality (``get_entropy`` in ``simulation/core/shuffle_quality.py``
    of mosaicml/streaming, which its simulator reports as the harmonic mean of
    this entropy over sample ids and over shard ids); an LMDB has no shards, so
    only the sample entropy is used here.
    """
    order = np.asarray(order, dtype=np.int64)
    if len(order) < 2:
        return 0.0
    counts = np.bincount(np.abs(np.diff(order)))
    p = counts[counts > 0] / (len(order) - 1)
    return float(-(p * np.log2(p)).sum()) + 0.0     # + 0.0: file order's -0.0 reads 0.0


def uniform_gap_entropy(n: int) -> float:
    """:func:`gap_entropy` of a uniform random permutation of ``n`` records (one permutation,
    :data:`REFERENCE_SEED`; tests/test_shuffle_quality.py checks that permutations of other
    seeds score within 0.01 of it at 60,000 records)."""
    n = check_count("n", n, 1)
    return gap_entropy(np.random.default_rng(REFERENCE_SEED).permutation(n))


def batch_class_shares(order: np.ndarray, batch_size: int, classes: int) -> np.ndarray:
    """The largest share of one class in each full global batch of ``order``, on a class-sorted
    data set: record ``i`` of ``n`` has label ``i * classes // n`` (``i // (n / classes)`` where
    ``classes`` divides ``n``). 1.0: a batch of one class; a little over ``1 / classes`` for a
    uniform shuffle with batches much larger than ``classes``. A short last batch is left out."""
    order = np.asarray(order, dtype=np.int64)
    n = len(order)
    full = num_batches(n, batch_size, "drop")      # checks n and batch_size
    classes = check_count("classes", classes, 1)
    if order.min() < 0 or order.max() >= n:
        raise ConfigurationError(f"order must hold records 0..{n - 1} (an epoch of the {n} "
                                 f"records), got {order.min()}..{order.max()}")
    labels = (order[:full * batch_size] * classes // n).reshape(full, batch_size)
    counts = np.zeros((full, classes), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(full), batch_size), labels.ravel()), 1)
    return counts.max(axis=1) / batch_size


def order_quality(order: np.ndarray, batch_size: int, classes: int) -> dict:
    """The shuffle-quality numbers of one epoch's order (no I/O).

    Keys: ``entropy_bits`` (:func:`gap_entropy`), ``entropy_uniform_bits``
    (:func:`uniform_gap_entropy` of as many records), ``entropy_score`` (their
    ratio: 0 for file order, about 1 for a uniform random permutation),
    ``class_share_median`` and ``class_share_worst`` (the median and the
    largest of :func:`batch_class_shares`).
    """
    h, u = gap_entropy(order), uniform_gap_entropy(len(order))
    shares = batch_class_shares(order, batch_size, classes)
    return {"entropy_bits": h, "entropy_uniform_bits": u, "entropy_score": h / u,
            "class_share_median": float(np.median(shares)),
            "class_share_worst": float(shares.max())}


def node_reader_bytes(order: np.ndarray, batch_size: int, nprocs: int, ranks_per_node: int,
                      units: np.ndarray, *, record_bytes: int = 4096, max_gap: int = 64 << 10,
                      policy: str = DEFAULT_POLICY) -> tuple[np.ndarray, np.ndarray]:
    """Bytes and read requests of each node reader over an epoch, from the order alone.

    Node reader j serves ranks ``j * ranks_per_node ..`` (consecutive, as the
    Reader groups them); rank r's positions are :func:`position_ranks`'. In
    each unit (``units[i]`` for position i: a shuffle window, :func:`record_windows`
    of the order's records, which the WINDOW stage reads at once), the records
    a reader's ranks deliver are planned into extents by the rule of
    :func:`lmdbio.plan.plan_extents` (holes up to ``max_gap`` read through),
    record p at file offset ``p * record_bytes``: records of one size in key
    order (a cifar10 Datum, 3.1 KB, fills one 4 KiB overflow page). Returns
    ``(bytes, requests)``, one int64 per node reader.
    """
    order, units = np.asarray(order, dtype=np.int64), np.asarray(units, dtype=np.int64)
    if len(units) != len(order):
        raise ConfigurationError(f"units must give one unit per position: {len(units)} for "
                                 f"{len(order)} positions")
    rpn = check_count("ranks_per_node", ranks_per_node, 1)
    if nprocs % rpn:
        raise ConfigurationError(f"ranks_per_node {rpn} does not divide nprocs {nprocs}")
    readers = nprocs // rpn
    reader = position_ranks(len(order), batch_size, nprocs, policy) // rpn
    keep = reader < readers                          # positions a dropped batch leaves unread
    # Each (reader, unit, record) once, sorted: a reader's records of a unit in file order.
    key = np.unique(np.stack([reader[keep], units[keep], order[keep]]), axis=1)
    who, unit, rec = key
    hole = (np.diff(rec) - 1) * record_bytes
    same = (np.diff(who) == 0) & (np.diff(unit) == 0)
    merged = same & (hole <= max_gap)                # read through the hole: one extent
    nbytes = np.bincount(who, minlength=readers) * record_bytes
    nbytes += np.bincount(who[1:][merged], weights=hole[merged], minlength=readers).astype(np.int64)
    requests = np.bincount(who, minlength=readers) - np.bincount(who[1:][merged],
                                                                 minlength=readers)
    return nbytes.astype(np.int64), requests.astype(np.int64)


def quality_table(n: int, batch_size: int, block: int, *, window: int = 4, classes: int = 10,
                  nprocs: int = 16, ranks_per_node: int = 4,
                  partitions: int = DEFAULT_PARTITIONS, seed: int = 0,
                  record_bytes: int = 4096) -> list[dict]:
    """Shuffle quality next to its cost: one row per order of an ``n``-record epoch.

    Rows (``mode``): ``"file"`` (file order), ``"window"``, ``"shard"`` (at
    ``nprocs``) and ``"elastic"`` (``partitions``), all with the same
    ``block`` and ``window``, epoch 0; ``"uniform"``: a uniform random
    permutation (blocks of one record, windows of one block: every record its
    own read). Columns: :func:`order_quality`'s, on a class-sorted data set of
    ``classes`` classes; ``bytes_ratio`` and ``requests_ratio``: the bytes and
    read requests all node readers make in the epoch (:func:`node_reader_bytes`,
    ``nprocs / ranks_per_node`` node readers, each shuffle window one unit),
    over file order's (each batch one unit: file order reads each reader's run
    of every batch, never through the holes between them); and the settings.
    At 4 ranks, 2 node readers, the readers' counters are within 3% of these
    bytes and equal these requests for the shuffled modes
    (tests/mpi_ranks/test_window_bytes.py).
    """
    orders = {"file": (np.arange(n, dtype=np.int64), np.arange(n) // batch_size)}
    windows = record_windows(n, block, window, seed, 0)
    for mode in MODES:
        if mode == "window":
            o = epoch_order(n, block, window, seed, 0)
        elif mode == "shard":
            o = shard_order(n, block, window, seed, 0, batch_size, nprocs)
        else:
            o = elastic_order(n, block, window, seed, 0, batch_size, partitions)
        orders[mode] = (o, windows[o])
    o = epoch_order(n, 1, 1, seed, 0)
    orders["uniform"] = (o, record_windows(n, 1, 1, seed, 0)[o])
    cost = {m: node_reader_bytes(o, batch_size, nprocs, ranks_per_node, u,
                                 record_bytes=record_bytes)
            for m, (o, u) in orders.items()}
    file_bytes, file_requests = (int(x.sum()) for x in cost["file"])
    rows = []
    for mode, (o, _) in orders.items():
        nbytes, requests = cost[mode]
        rows.append({"mode": mode, **order_quality(o, batch_size, classes),
                     "bytes_ratio": int(nbytes.sum()) / file_bytes,
                     "requests_ratio": int(requests.sum()) / file_requests,
                     "records": n, "batch_size": batch_size, "classes": classes,
                     "nprocs": nprocs, "node_readers": nprocs // ranks_per_node,
                     "block": block if mode != "uniform" else 1,
                     "window": window if mode != "uniform" else 1,
                     "partitions": partitions if mode == "elastic" else 0, "seed": seed,
                     "record_bytes": record_bytes})
    return rows


def format_quality_table(rows: list[dict]) -> str:
    """The rows of :func:`quality_table` as a fixed-width text table."""
    lines = [f"{'mode':>10} {'entropy':>8} {'score':>6} {'share med':>9} {'share max':>9} "
             f"{'bytes':>6} {'requests':>8}"]
    for r in rows:
        lines.append(f"{r['mode']:>10} {r['entropy_bits']:>8.2f} {r['entropy_score']:>6.3f} "
                     f"{r['class_share_median']:>9.3f} {r['class_share_worst']:>9.3f} "
                     f"{r['bytes_ratio']:>6.2f} {r['requests_ratio']:>8.2f}")
    return "\n".join(lines)


def table(n: int, batch_size: int, *, classes: int = 10, nprocs: int = NPROCS,
          ranks_per_node: int = RANKS_PER_NODE, seed: int = 0, dali: bool = True):
    """The shuffle-quality table: :func:`quality_table` (the Reader's default
    block for cifar10 Datums, window 4) and a ``dali-caffe`` row, one per order.

    The ``dali-caffe`` row's bytes are file order's (DALI reads its shard
    sequentially, through mmap: its requests are page faults and read-ahead, not
    counted). Where DALI cannot run, the row is left out and the
    reason printed. Columns: ``reader`` (``lmdbio``, or ``DALI <version>``),
    ``mode`` and :func:`quality_table`'s.
    """
    import pandas as pd

    from lmdbio import datum
    from lmdbio.pipeline.epoch import default_block

    cifar10 = len(datum.encode(np.zeros((3, 32, 32), np.uint8), 9))   # a raw Datum's bytes
    block = default_block(n, batch_size, cifar10)
    rows = [{"reader": "lmdbio", **r} for r in quality_table(
        n, batch_size, block, classes=classes, nprocs=nprocs, ranks_per_node=ranks_per_node,
        seed=seed)]
    if dali:
        order, version = dali_order(n, batch_size, classes, seed=seed)
        if order is None:
            print(version)
        else:
            file_row = rows[0]
            rows.append({**file_row, "reader": f"DALI {version}", "mode": "dali-caffe",
                         **order_quality(order, batch_size, classes),
                         "bytes_ratio": 1.0, "requests_ratio": float("nan"), "block": 0,
                         "window": 0, "note": "random_shuffle=True, initial_fill=1024, one "
                                              "shard; reads its shard sequentially (mmap)"})
    notes = {"uniform": "reference: a uniform random permutation, every record its own read"}
    df = pd.DataFrame(rows)
    df["note"] = df["note"].fillna(df["mode"].map(notes)).fillna("") if "note" in df else \
        df["mode"].map(notes).fillna("")
    return df


def markdown_table(df, columns: dict, digits: int = 3) -> str:
    """``df``'s ``columns`` (name -> header) as a Markdown table, floats to ``digits``, NaN as
    ``n/a`` (pandas' ``to_markdown`` needs tabulate, which the venv does not hold)."""
    def cell(v):
        if isinstance(v, float):
            return "n/a" if np.isnan(v) else f"{v:.{digits}f}"
        return str(v)

    lines = ["| " + " | ".join(columns.values()) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in df[list(columns)].itertuples(index=False)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Print the randomness, mode and quality tables for ``[N] [BATCH]`` (default 60,000, 256)."""
    from lmdbio.datum import encode
    from lmdbio.pipeline.epoch import default_block

    argv = sys.argv[1:] if argv is None else argv
    n = int(argv[0]) if len(argv) > 0 else 60000
    batch = int(argv[1]) if len(argv) > 1 else 256
    print(f"n = {n}, batch = {batch}, seed 0, epochs 0 and 1")
    print(format_table(randomness_table(n, batch, blocks=(16, 64, 256, 1024), windows=(1, 4, 16))))
    print("\nthe modes (window: shuffle the whole window; shard: each rank a contiguous slice; "
          f"elastic: each of {DEFAULT_PARTITIONS} partitions one, at any P)")
    print(format_mode_table(mode_table(n, batch, blocks=(64, 512, 1024), windows=(1, 4, 16),
                                       modes=MODES)))
    # The Reader's default block for cifar10 Datums (3.1 KB), window 4, on 16 ranks in 4 nodes.
    block = default_block(n, batch, len(encode(np.zeros((3, 32, 32), np.uint8), 9)))
    rows = quality_table(n, batch, block)
    r = rows[0]
    print(f"\nshuffle quality on a class-sorted set of {r['classes']} classes, block {block}, "
          f"window 4, P = {r['nprocs']}, {r['node_readers']} node readers (entropy: bits of the "
          "gaps between neighbouring records, Mosaic streaming's; score: over a uniform "
          "permutation's; share: of one class in a batch, median and worst; bytes and requests "
          "of the node readers over file order's)")
    print(format_quality_table(rows))


if __name__ == "__main__":  # python -m lmdbio.lab.shuffle_quality [N] [BATCH]
    main()
