"""Epoch orders behind a registry: which record each position of an epoch holds.

An order is a pure function of the data set size ``n``, the epoch, the global batch,
the rank count and the order's settings (an :class:`~lmdbio.pipeline.EpochPlan`:
seed, block, window, partitions, last-batch policy), so every rank computes the same
epoch. Each order lives in its own module and says what a saved state must match to
resume it (:attr:`Order.state_keys`) and whether it changes with the rank count
(:attr:`Order.depends_on_nprocs`). The Reader's ``order=`` takes a registered name or
an :class:`Order` object; :func:`register` adds one.

=========  ==========================================================================
name       order
=========  ==========================================================================
file       the records in key order (:mod:`lmdbio.orders.file`)
window     blocks permuted, each window shuffled whole (:mod:`lmdbio.orders.window`)
shard      each rank shuffles its own slice of every window (:mod:`lmdbio.orders.shard`)
elastic    the shard order over canonical partitions, at any rank count
           (:mod:`lmdbio.orders.elastic`)
=========  ==========================================================================
"""

from __future__ import annotations

from .base import ORDERS, Order, get_order, register
from .elastic import ELASTIC
from .file import FILE
from .shard import SHARD
from .window import WINDOW

for _order in (FILE, WINDOW, SHARD, ELASTIC):   # the order errors list them in
    register(_order)

__all__ = ["ORDERS", "Order", "get_order", "register"]
