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

from .deprecation import moved
from .errors import ConfigurationError

__all__ = ["POLICIES", "check_count", "DEFAULT_POLICY", "MODES", "epoch_order", "shard_order", "position_ranks",
           "DEFAULT_PARTITIONS", "elastic_order", "partition_owners",
           "record_windows", "num_batches", "global_batches", "rank_batches"]

#: Shuffle-quality names that moved to the reproduction lab (reading one here warns).
MOVED = dict.fromkeys(["mean_batch_distance", "adjacent_fraction", "mean_share_distance",
                       "position_correlation", "randomness_table", "format_table", "mode_table",
                       "format_mode_table", "REFERENCE_SEED", "gap_entropy", "uniform_gap_entropy",
                       "batch_class_shares", "order_quality", "node_reader_bytes",
                       "quality_table", "format_quality_table"], "lmdbio.lab.shuffle_quality")
__getattr__ = moved(__name__, MOVED)

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
