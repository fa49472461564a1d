"""Epochs: which records each global batch of an epoch holds, for every stage downstream.

An epoch is a table of rows, one global batch each (:class:`EpochRows`); the
pipeline's :class:`~lmdbio.plan.Layout` takes it, and every locator reads the
positions its rows name. The order is the file order (``shuffle=False``),
:func:`lmdbio.shuffle.epoch_order` (``shuffle=True`` or ``"window"``: blocks
permuted, windows shuffled, seeded by ``(seed, epoch)``) or
:func:`lmdbio.shuffle.shard_order` (``"shard"``: the same windows, each rank's
positions of a window filled with a contiguous slice of it, shuffled): pure
functions, so every rank computes the same rows.

The last batch (``n % B`` records) follows :mod:`lmdbio.shuffle`'s policies.
``"short"`` (the default, PyTorch's ``drop_last=False``) is read as a full row
whose block ``r`` starts with rank r's share (:func:`lmdbio.shuffle.rank_batches`)
and goes on with the records after it in the order; each rank keeps only its
share, so the stages downstream never see a short batch. The rows are padded
to a multiple of the chunk's ``k`` batches with rows from the start of the
order: read with the last chunk, never delivered.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import shuffle as sh
from ..errors import ConfigurationError
from ..options import DEFAULT_COALESCE_BYTES
from ..plan import coalesce_batches

__all__ = ["EpochPlan", "EpochRows", "epoch_rows", "default_block"]


@dataclass(frozen=True)
class EpochPlan:
    """How epochs are ordered and cut.

    Args:
        shuffle: False: file order. True or ``"window"``: :func:`lmdbio.shuffle.epoch_order`,
            each window's records shuffled over all its positions: the most random, but a
            node reader whose ranks' records lie < 64 KiB apart reads every window whole
            (``R`` node readers: ``R`` times a file-order epoch's bytes). ``"shard"``:
            :func:`lmdbio.shuffle.shard_order`, shard then shuffle: each rank draws from its
            own contiguous ``1/P`` of every window (a rank's share spans less of the file,
            and the order depends on the rank count), so a node reader reads one run of
            ``1/R`` of each window: a file-order epoch's bytes. ``"elastic"``:
            :func:`lmdbio.shuffle.elastic_order`, the shard order over ``partitions``
            canonical partitions in place of the ranks: the same order at any rank count,
            and a node reader reads one run of each window where its ranks' positions are
            whole partitions (``partitions`` at least the batch, or dividing it and divided
            by the rank count).
        seed: the run's seed (>= 0); epoch ``e``'s order is seeded by ``(seed, e)``.
        block: records per shuffle block (None: :func:`default_block`, the global batches
            whose bytes come nearest below COAL's default 4 MiB request; the same for every
            variant, rank count and node layout, so all of them deliver the same order).
        window: blocks per shuffle window.
        last_batch: ``"short"``, ``"pad"`` or ``"drop"`` (:mod:`lmdbio.shuffle`).
        partitions: the ``"elastic"`` mode's canonical partitions
            (:data:`lmdbio.shuffle.DEFAULT_PARTITIONS`).
    """

    shuffle: bool | str = False
    seed: int = 0
    block: int | None = None
    window: int = 4
    last_batch: str = sh.DEFAULT_POLICY
    partitions: int = sh.DEFAULT_PARTITIONS

    @property
    def mode(self) -> str | None:
        """``"window"``, ``"shard"``, ``"elastic"`` or None (file order)."""
        if self.shuffle is True:
            return "window"
        return self.shuffle or None

    def order(self, n: int, block: int, epoch: int, batch: int, nprocs: int) -> np.ndarray:
        """Epoch ``epoch``'s global order of ``n`` records (``block``: records per shuffle block)."""
        if self.mode == "shard":
            return sh.shard_order(n, block, self.window, self.seed, epoch, batch, nprocs,
                                  self.last_batch)
        if self.mode == "elastic":
            return sh.elastic_order(n, block, self.window, self.seed, epoch, batch,
                                    self.partitions, self.last_batch)
        if self.mode == "window":
            return sh.epoch_order(n, block, self.window, self.seed, epoch)
        return np.arange(n, dtype=np.int64)

    def __post_init__(self):
        if not isinstance(self.shuffle, bool) and (not isinstance(self.shuffle, str)
                                                   or self.shuffle not in sh.MODES):
            raise ConfigurationError(f"shuffle must be False, True or one of the modes "
                                     f"{', '.join(map(repr, sh.MODES))}, got {self.shuffle!r}")
        if not isinstance(self.last_batch, str) or self.last_batch not in sh.POLICIES:
            raise ConfigurationError(f"last_batch must be one of "
                                     f"{', '.join(map(repr, sh.POLICIES))}, got {self.last_batch!r}")
        # Named as the Reader's arguments are, which is where users set them.
        for name, arg, minimum in (("seed", "seed", 0), ("window", "shuffle_window", 1),
                                   ("block", "shuffle_block", 1),
                                   ("partitions", "shuffle_partitions", 1)):
            if name != "block" or self.block is not None:
                label = arg if arg == name else f"{arg} (EpochPlan.{name})"
                sh.check_count(label, getattr(self, name), minimum)


def default_block(n: int, batch: int, mean_size: float) -> int:
    """Records per shuffle block when none is asked for: ``k * batch``, with ``k`` the batches
    whose bytes come nearest below COAL's default request (4 MiB), as if one reader read the
    whole global batch. It depends on the dataset and the batch only: a reader's own pipeline
    chunk (its share of ``k`` batches, which depends on the variant, the rank count and how many
    ranks share a node reader) would give each variant its own order. cifar10 (3.1 KB
    records), ``B = 256``: 1,024 records."""
    return batch * coalesce_batches(batch * mean_size, DEFAULT_COALESCE_BYTES, n // batch)


@dataclass(frozen=True)
class EpochRows:
    """One epoch's global batches: ``rows[t]`` the B positions of batch t (padded rows
    included), ``batches`` delivered, and ``keep[r]`` records rank r keeps of the last one."""

    rows: np.ndarray
    batches: int
    keep: np.ndarray

    def kept(self, i: int, rank: int, share: int) -> int:
        """Records of its ``share`` that ``rank`` keeps in the epoch's batch ``i``."""
        return int(self.keep[rank]) if i == self.batches - 1 else share


def epoch_rows(plan: EpochPlan, n: int, batch: int, nprocs: int, k: int, epoch: int) -> EpochRows:
    """Epoch ``epoch``'s rows for ``n`` records, global batches of ``batch``, ``k`` batches per
    pipeline chunk (the rows are padded to a multiple of it). A shuffled ``plan`` needs its
    ``block`` (the pipeline sets :func:`default_block` where none was asked for). Raises
    ConfigurationError for ``batch > n`` (one batch would repeat records)."""
    nb = sh.num_batches(n, batch, plan.last_batch)
    sh.check_count("epoch", epoch, 0)
    if plan.mode is not None and plan.block is None:
        raise ConfigurationError("a shuffled epoch's plan needs its block (records per shuffle "
                                 "block; default_block(n, batch, mean record size) is the "
                                 "Reader's default)")
    order = plan.order(n, plan.block, epoch, batch, nprocs)
    full, rest = divmod(n, batch)
    rows = [order[:full * batch].reshape(full, batch)]
    share = batch // nprocs
    keep = np.full(nprocs, share, dtype=np.int64)
    if rest and plan.last_batch == "pad":
        rows.append(np.concatenate([order[full * batch:], order[:batch - rest]])[None])
    elif rest and plan.last_batch == "short":
        q, r = divmod(rest, nprocs)
        keep = q + (np.arange(nprocs) < r)
        lo = np.arange(nprocs) * q + np.minimum(np.arange(nprocs), r)
        # Block r: rank r's share, then the records after it (mostly the next rank's; a
        # cursor steps back over them, never around the whole file).
        idx = (full * batch + lo[:, None] + np.arange(share)[None, :]) % n
        rows.append(order[idx.reshape(1, batch)])
    pad = -len(np.concatenate(rows)) % k
    filler = np.resize(np.arange(n, dtype=np.int64), pad * batch).reshape(pad, batch)
    out = np.concatenate(rows + [order[filler]]).astype(np.int64)
    return EpochRows(out, nb, keep)
