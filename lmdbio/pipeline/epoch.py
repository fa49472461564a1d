"""Epochs: which records each global batch of an epoch holds, for every stage downstream.

An epoch is a table of rows, one global batch each (:class:`EpochRows`); the
pipeline's schedule (:class:`~lmdbio.plan.EpochSchedule`) takes it, and every locator reads the
positions its rows name. The order is one of :mod:`lmdbio.orders`'
registry (file, window, shard, elastic, or one registered): pure functions, so
every rank computes the same rows.

The last batch (``n % B`` records) follows :mod:`lmdbio.shuffle`'s policies.
``"short"`` (the default, PyTorch's ``drop_last=False``) is read as a full row
whose block ``r`` starts with rank r's share (:func:`lmdbio.shuffle.rank_batches`)
and goes on with the records after it in the order; each rank keeps only its
share, so the stages downstream never see a short batch. The rows are padded
to a multiple of the chunk's ``k`` batches with rows from the start of the
order: read with the last chunk, never delivered.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import shuffle as sh
from ..errors import ConfigurationError
from ..options import DEFAULT_COALESCE_BYTES
from ..orders import ORDERS, Order, get_order
from ..plan import coalesce_batches

__all__ = ["EpochPlan", "EpochRows", "epoch_rows", "default_block", "plan_of"]


@dataclass(frozen=True)
class EpochPlan:
    """How epochs are ordered and cut.

    Args:
        shuffle: an order of :mod:`lmdbio.orders` by name, or an
            :class:`~lmdbio.orders.Order`. False (or ``"file"``): file order. True or ``"window"``: :func:`lmdbio.shuffle.epoch_order`,
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

    shuffle: bool | str | Order = False
    seed: int = 0
    block: int | None = None
    window: int = 4
    last_batch: str = sh.DEFAULT_POLICY
    partitions: int = sh.DEFAULT_PARTITIONS

    @property
    def kind(self) -> Order:
        """The :class:`~lmdbio.orders.Order` that ``shuffle`` names (the registry's)."""
        if self.shuffle is True:
            return ORDERS["window"]
        if self.shuffle is False:
            return ORDERS["file"]
        return get_order(self.shuffle)

    @property
    def mode(self) -> str | None:
        """The order's name (``"window"``, ``"shard"``, ``"elastic"``, ...), None for file
        order (what a saved state records as ``shuffle``)."""
        kind = self.kind
        return kind.name if kind.shuffled else None

    def order(self, n: int, block: int | None, epoch: int, batch: int, nprocs: int) -> np.ndarray:
        """Epoch ``epoch``'s global order of ``n`` records (``block``: records per shuffle block)."""
        return self.kind.order(n, epoch, batch, nprocs, replace(self, block=block))

    def windows(self, n: int, epoch: int) -> np.ndarray | None:
        """The shuffle window of each record in epoch ``epoch`` (None: no windows)."""
        return self.kind.windows(n, epoch, self)

    def with_block(self, n: int, batch: int, mean_size: float) -> EpochPlan:
        """This plan with its block set: :func:`default_block` of ``n`` records, global batches
        of ``batch`` and the mean record size where none was asked for."""
        if self.block is not None:
            return self
        return replace(self, block=default_block(n, batch, mean_size))

    def __post_init__(self):
        if not isinstance(self.shuffle, (bool, Order)) and (not isinstance(self.shuffle, str)
                                                            or self.shuffle not in ORDERS):
            names = [m for m in ORDERS if m != "file"]
            raise ConfigurationError(f"shuffle must be False, True or one of the modes "
                                     f"{', '.join(map(repr, names))} (or an "
                                     f"lmdbio.orders.Order), got {self.shuffle!r}")
        if not isinstance(self.shuffle, bool) and not self.kind.shuffled:
            object.__setattr__(self, "shuffle", False)   # "file": one spelling, so truth tests hold
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


def plan_of(shuffle: bool | str | Order = False, seed: int = 0, shuffle_block: int | None = None,
            shuffle_window: int = 4, last_batch: str = sh.DEFAULT_POLICY,
            shuffle_partitions: int = sh.DEFAULT_PARTITIONS, order=None) -> EpochPlan:
    """The order arguments of :class:`lmdbio.Reader` (and :func:`lmdbio.torch.make_plan`) as
    an EpochPlan: ``order`` (a name or an :class:`~lmdbio.orders.Order`) or its shorthand
    ``shuffle``, with the other five."""
    if order is not None and shuffle is not False:
        raise ConfigurationError(f"order={order!r} and shuffle={shuffle!r} both name the order: "
                                 "pass one (shuffle= is the shorthand of order=)",
                                 option="order")
    return EpochPlan(shuffle if order is None else get_order(order), seed, shuffle_block,
                     shuffle_window, last_batch, shuffle_partitions)


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
