"""Epoch order for training: blocks of consecutive records permuted, then shuffled within windows.

A block is a run of consecutive records (what COAL reads in one request),
so a shuffled epoch still reads large runs; a window of several blocks is
then shuffled record by record, so a batch mixes records of several blocks.
The order is a pure function of ``(n, block, window, seed, epoch)``: every
rank computes the same one without talking to the others.

Three modes (:data:`MODES`) share the blocks and windows and differ inside a window:

- ``"window"`` (:func:`epoch_order`): the window's records are shuffled
  among all of its positions, so every rank's share of a batch is drawn from
  the whole window. Most random; but a node reader that serves a quarter of
  the ranks needs a random quarter of every window, records a few KB apart,
  and reads the whole window: ``R`` node readers read ``R`` times the bytes.
- ``"shard"`` (:func:`shard_order`): shard, then shuffle, the order DALI's
  ``random_shuffle`` within a shard, tf.data's ``shard`` + ``shuffle`` and
  most sharded loaders give. In each window, the positions rank r delivers
  hold a random permutation of a contiguous slice of the window's records in
  file order (rank 0 the first ones). A node's ranks are consecutive, so a
  node reader reads one run of ``1/R`` of the window: the bytes of a file-order
  epoch. The price in randomness: a rank's batch draws from ``1/P`` of a window
  (records closer together; a batch's global mix still spans the window), and
  the order depends on ``nprocs`` and the batch size (at ``P = 1`` it is the
  ``"window"`` order). It never depends on the variant or the number of readers.
- ``"elastic"`` (:func:`elastic_order`): the shard order over a fixed number
  ``C`` of canonical partitions (:data:`DEFAULT_PARTITIONS`) in place of the
  ranks, as Mosaic streaming's canonical nodes: each batch's positions are
  cut into ``C`` runs, and in each window the positions of partition c hold
  a random permutation of its contiguous slice of the window's records. The
  order depends on ``(n, block, window, seed, epoch)``, the batch size, the
  last-batch policy and ``C``, never on the rank count, so a job stopped at
  ``P = 4`` goes on with the same global batches at ``P = 2`` or any P
  dividing the batch. Where each rank's positions are whole partitions (C at
  least the batch size, or C dividing the batch size and P dividing C), rank
  r's records of a window are one run and a node reader reads one run of
  each window, as in the shard mode (but for the window holding a short last
  batch, which the ranks split by their count); elsewhere ranks share a
  partition, and their readers each read its whole run. Partitions beyond
  the batch size give the batch size's order (each position its own
  partition).

Last-batch policies (``n`` not a multiple of the batch size):

- ``"short"`` (the default): the last global batch holds the ``n % B``
  records left, split as evenly as possible among the ranks (sizes differ by
  at most one; a rank may get none). Every record is delivered exactly once.
  This is what PyTorch users get from ``DataLoader(drop_last=False)``, its
  default. ``DistributedSampler`` instead pads each epoch to a multiple of
  the world size with repeated records, so that ranks get equal counts; we
  keep exactly-once as the default because the epoch is the unit training
  metrics are computed over, and offer padding as ``"pad"``.
- ``"pad"``: the last global batch is filled up to ``B`` with records from
  the start of the epoch's order (at most ``B - 1`` repeats), so every batch
  and every rank's share has the same size.
- ``"drop"``: the last partial batch is left out (``drop_last=True``).
"""

from __future__ import annotations

import numpy as np

from .errors import ConfigurationError

__all__ = ["POLICIES", "check_count", "DEFAULT_POLICY", "MODES", "epoch_order", "shard_order", "position_ranks",
           "DEFAULT_PARTITIONS", "elastic_order", "partition_owners",
           "record_windows", "num_batches", "global_batches", "rank_batches", "mean_batch_distance",
           "adjacent_fraction", "mean_share_distance", "position_correlation", "randomness_table",
           "format_table", "mode_table", "format_mode_table", "REFERENCE_SEED", "gap_entropy",
           "uniform_gap_entropy", "batch_class_shares", "order_quality", "node_reader_bytes",
           "quality_table", "format_quality_table"]

POLICIES = ("short", "pad", "drop")
DEFAULT_POLICY = "short"
MODES = ("window", "shard", "elastic")
#: Canonical partitions of the ``"elastic"`` order (:func:`elastic_order`) unless asked otherwise:
#: a node reader's records of a window stay one run (but in the window of a short last batch)
#: at every rank count dividing 64 (batches of a multiple of 64) or dividing the batch (batches
#: of 64 or fewer).
DEFAULT_PARTITIONS = 64


def check_count(name: str, value, minimum: int) -> int:
    """``value`` as an int, or ConfigurationError naming ``name`` and what it may be."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigurationError(f"{name} must be an integer >= {minimum}, got {value!r} "
                                 f"(a {type(value).__name__})")
    if value < minimum:
        raise ConfigurationError(f"{name} must be >= {minimum} (an integer), got {value}")
    return int(value)


def epoch_order(n: int, block: int, window: int, seed: int, epoch: int) -> np.ndarray:
    """The global record order of one epoch: a permutation of ``range(n)`` (int64).

    Args:
        n: records in the dataset.
        block: records per block; blocks (consecutive records, the last one
            possibly shorter) are permuted.
        window: blocks per window; the records of each window of consecutive
            blocks (in the permuted order) are shuffled among themselves.
            ``window=1`` keeps each block's records together.
        seed: the run's seed (>= 0).
        epoch: the epoch number (>= 0); each epoch has its own order.
    Returns:
        ``order`` with ``order[i]`` the record read i-th in the epoch.
    """
    rng, perm = _block_permutation(n, block, seed, epoch)
    window = check_count("window", window, 1)
    n, block, nblocks = int(n), int(block), len(perm)
    starts = perm * block
    lens = np.minimum(block, n - starts)
    first = np.cumsum(lens) - lens                 # where each permuted block begins in the order
    order = np.repeat(starts - first, lens) + np.arange(n)
    # Shuffle within windows: sort by (window, random key); windows are already in order.
    win = np.repeat(np.arange(nblocks) // window, lens)
    return order[np.lexsort((rng.random(n), win))]


def _block_permutation(n: int, block: int, seed: int, epoch: int):
    """The epoch's generator and its first draw: the permutation of the blocks."""
    n = check_count("n", n, 1)
    block = check_count("block", block, 1)
    rng = np.random.default_rng([check_count("seed", seed, 0), check_count("epoch", epoch, 0)])
    return rng, rng.permutation(-(-n // block))


def record_windows(n: int, block: int, window: int, seed: int, epoch: int) -> np.ndarray:
    """The window of :func:`epoch_order` (same arguments) each record is shuffled in: ``w[p]``
    for record ``p`` (int64; windows numbered in epoch order). Its records are the ``window``
    blocks that come ``w``-th in the permuted order."""
    _, perm = _block_permutation(n, block, seed, epoch)
    window = check_count("window", window, 1)
    rank = np.empty(len(perm), dtype=np.int64)
    rank[perm] = np.arange(len(perm))
    return rank[np.arange(int(n), dtype=np.int64) // int(block)] // window


def position_ranks(n: int, batch_size: int, nprocs: int, policy: str = DEFAULT_POLICY) -> np.ndarray:
    """The rank that delivers each position of an epoch's order (int64; ``nprocs``: none).

    The split is :func:`rank_batches`': ``batch_size // nprocs`` consecutive
    positions of each full batch per rank; the short last batch split as
    evenly as possible; a padded one like a full batch (its repeats from the
    epoch's start are not counted: their positions have their first owner);
    a dropped one delivered by nobody.
    """
    _check(n, batch_size, policy)
    nprocs = check_count("nprocs", nprocs, 1)
    if batch_size % nprocs:
        raise ConfigurationError(f"batch_size {batch_size} does not divide among {nprocs} ranks; "
                                 "use a multiple of the rank count")
    share = batch_size // nprocs
    full, rest = divmod(n, batch_size)
    out = np.arange(n, dtype=np.int64) % batch_size // share
    tail = out[full * batch_size:]
    if policy == "drop":
        tail[:] = nprocs
    elif policy == "short":
        q, r = divmod(rest, nprocs)
        sizes = q + (np.arange(nprocs) < r)
        tail[:] = np.repeat(np.arange(nprocs), sizes)
    return out


def shard_order(n: int, block: int, window: int, seed: int, epoch: int, batch_size: int,
                nprocs: int, policy: str = DEFAULT_POLICY) -> np.ndarray:
    """The ``"shard"`` mode's order: shard each window among the ranks, then shuffle each shard.

    The blocks and windows are :func:`epoch_order`'s (same ``record_windows``).
    In each window, the positions rank r delivers (:func:`position_ranks`)
    hold a random permutation of the window's records ``c_r .. c_r + n_r - 1``
    in file order (``n_r``: how many of the window's positions rank r
    delivers, ``c_r`` the sum of the earlier ranks'). Positions nobody
    delivers (``policy="drop"``) keep :func:`epoch_order`'s records; the
    others share the rest. At ``nprocs = 1`` this is :func:`epoch_order`.
    A pure function of all its arguments: every rank computes the same order.
    """
    owner = position_ranks(n, batch_size, nprocs, policy)
    return _shard_windows(n, block, window, seed, epoch, owner, nprocs)


def _shard_windows(n: int, block: int, window: int, seed: int, epoch: int, owner: np.ndarray,
                   owners: int) -> np.ndarray:
    """:func:`epoch_order` with each window's positions of owner c (``owner``: one per
    position, ``owners`` for none) filled with the c-th contiguous slice of the window's
    records, in a random order."""
    order = epoch_order(n, block, window, seed, epoch)
    win = record_windows(n, block, window, seed, epoch)[order]    # non-decreasing
    give = np.flatnonzero(owner < owners)
    o, w = order[give], win[give]
    # epoch_order's records ranked within (window, owner) are a uniform random bijection of
    # each owner's positions onto its slice; at one owner it gives epoch_order back.
    out = order.copy()
    out[give[np.lexsort((o, owner[give], w))]] = o[np.lexsort((o, w))]
    return out


def partition_owners(n: int, batch_size: int, partitions: int,
                     policy: str = DEFAULT_POLICY) -> np.ndarray:
    """The canonical partition each position of an epoch belongs to (int64; ``partitions``:
    none), for :func:`elastic_order`.

    Each batch's positions are cut into ``partitions`` runs in order, as evenly as
    possible (the first ``slots % partitions`` one longer; empty runs where there are
    more partitions than positions): the full batches' ``batch_size`` positions, the
    short last batch's ``n % batch_size`` (``"short"``), a padded one's as a full batch
    (``"pad"``); a dropped one's positions belong to none. Where ``partitions`` divides
    ``batch_size`` this is :func:`position_ranks` with ``partitions`` ranks.
    """
    _check(n, batch_size, policy)
    partitions = check_count("partitions", partitions, 1)
    full, rest = divmod(n, batch_size)
    out = _runs_of(np.arange(n, dtype=np.int64) % batch_size, batch_size, partitions)
    tail = out[full * batch_size:]
    if policy == "drop":
        tail[:] = partitions
    elif policy == "short" and rest:
        tail[:] = _runs_of(np.arange(rest, dtype=np.int64), rest, partitions)
    return out


def _runs_of(slot: np.ndarray, slots: int, runs: int) -> np.ndarray:
    """The run each of ``slots`` positions (``slot``) falls in when they are cut into ``runs``
    runs in order, the first ``slots % runs`` one longer."""
    q, r = divmod(slots, runs)
    long_end = r * (q + 1)                    # the longer runs end here
    return np.where(slot < long_end, slot // (q + 1), r + (slot - long_end) // max(q, 1))


def elastic_order(n: int, block: int, window: int, seed: int, epoch: int, batch_size: int,
                  partitions: int = DEFAULT_PARTITIONS,
                  policy: str = DEFAULT_POLICY) -> np.ndarray:
    """The ``"elastic"`` mode's order: :func:`shard_order` with ``partitions`` canonical
    partitions (:func:`partition_owners`) in place of the ranks.

    The blocks and windows are :func:`epoch_order`'s. A pure function of its arguments,
    none of which is the rank count: every rank count delivers the same global batches
    (the Reader gives rank r of P the positions ``[r B/P, (r+1) B/P)`` of each). Where
    ``partitions`` divides ``batch_size`` it is ``shard_order`` at ``nprocs=partitions``.
    """
    owner = partition_owners(n, batch_size, partitions, policy)
    return _shard_windows(n, block, window, seed, epoch, owner, int(partitions))


def num_batches(n: int, batch_size: int, policy: str = DEFAULT_POLICY) -> int:
    """Global batches in an epoch of ``n`` records under ``policy``."""
    _check(n, batch_size, policy)
    full, rest = divmod(n, batch_size)
    return full + (1 if rest and policy != "drop" else 0)


def _check(n: int, batch_size: int, policy: str) -> None:
    n = check_count("n", n, 1)
    batch_size = check_count("batch_size", batch_size, 1)
    if batch_size > n:
        raise ConfigurationError(f"batch_size {batch_size} is larger than the dataset ({n} "
                                 "records); one batch would repeat records. Use a batch size of "
                                 f"at most {n}")
    if policy not in POLICIES:
        raise ConfigurationError(f"unknown last-batch policy {policy!r}: last_batch must be one "
                                 f"of {', '.join(map(repr, POLICIES))}")


def global_batches(order: np.ndarray, batch_size: int,
                   policy: str = DEFAULT_POLICY) -> list[np.ndarray]:
    """The epoch's global batches: consecutive slices of ``order``, the last one per ``policy``."""
    order = np.asarray(order)
    n = len(order)
    _check(n, batch_size, policy)
    full, rest = divmod(n, batch_size)
    batches = list(order[:full * batch_size].reshape(full, batch_size))
    if rest and policy == "short":
        batches.append(order[full * batch_size:])
    elif rest and policy == "pad":
        batches.append(np.concatenate([order[full * batch_size:], order[:batch_size - rest]]))
    return batches


def rank_batches(order: np.ndarray, batch_size: int, nprocs: int, rank: int,
                 policy: str = DEFAULT_POLICY) -> list[np.ndarray]:
    """This rank's share of each global batch: records ``[rank * B/P, (rank + 1) * B/P)`` of it.

    The split is the Reader's: each rank gets ``batch_size // nprocs``
    consecutive records of every full batch. A short last batch is split as
    evenly as possible (the first ``rest % nprocs`` ranks get one more).
    """
    nprocs = check_count("nprocs", nprocs, 1)
    rank = check_count("rank", rank, 0)
    if rank >= nprocs:
        raise ConfigurationError(f"rank {rank} is not below nprocs {nprocs}; rank must be in "
                                 f"0..{nprocs - 1}")
    if batch_size % nprocs:
        raise ConfigurationError(f"batch_size {batch_size} does not divide among {nprocs} ranks; "
                                 "use a multiple of the rank count")
    share = batch_size // nprocs
    out = []
    for b in global_batches(order, batch_size, policy):
        if len(b) == batch_size:
            out.append(b[rank * share:(rank + 1) * share])
        else:
            q, r = divmod(len(b), nprocs)
            lo = rank * q + min(rank, r)
            out.append(b[lo:lo + q + (rank < r)])
    return out


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
    _check(n, batch_size, DEFAULT_POLICY)
    classes = check_count("classes", classes, 1)
    if order.min() < 0 or order.max() >= n:
        raise ConfigurationError(f"order must hold records 0..{n - 1} (an epoch of the {n} "
                                 f"records), got {order.min()}..{order.max()}")
    full = n // batch_size
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


if __name__ == "__main__":  # python -m lmdbio.shuffle [N] [BATCH]: the table for a dataset size
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 60000
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    print(f"n = {n}, batch = {batch}, seed 0, epochs 0 and 1")
    print(format_table(randomness_table(n, batch, blocks=(16, 64, 256, 1024), windows=(1, 4, 16))))
    print("\nthe modes (window: shuffle the whole window; shard: each rank a contiguous slice; "
          f"elastic: each of {DEFAULT_PARTITIONS} partitions one, at any P)")
    print(format_mode_table(mode_table(n, batch, blocks=(64, 512, 1024), windows=(1, 4, 16),
                                       modes=MODES)))
    from .datum import encode
    from .options import DEFAULT_COALESCE_BYTES
    from .plan import coalesce_batches

    # The Reader's default block (lmdbio.pipeline.epoch.default_block) for cifar10 Datums
    # (3.1 KB), window 4, on 16 ranks in 4 nodes.
    datum_bytes = len(encode(np.zeros((3, 32, 32), np.uint8), 9))
    block = batch * coalesce_batches(batch * datum_bytes, DEFAULT_COALESCE_BYTES, n // batch)
    rows = quality_table(n, batch, block)
    r = rows[0]
    print(f"\nshuffle quality on a class-sorted set of {r['classes']} classes, block {block}, "
          f"window 4, P = {r['nprocs']}, {r['node_readers']} node readers (entropy: bits of the "
          "gaps between neighbouring records, Mosaic streaming's; score: over a uniform "
          "permutation's; share: of one class in a batch, median and worst; bytes and requests "
          "of the node readers over file order's)")
    print(format_quality_table(rows))
