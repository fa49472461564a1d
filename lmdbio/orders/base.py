"""The order protocol and the registry of orders by name."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..errors import ConfigurationError

__all__ = ["ORDERS", "Order", "get_order", "register"]


class Order:
    """One epoch order. Subclass it, set the class attributes, write :meth:`order`, and
    :func:`register` an instance (or pass it as ``Reader(order=...)``).

    Attributes:
        name: the registry name, and what a saved state records as its ``shuffle``.
        state_keys: the settings (of ``seed``, ``block``, ``window``, ``partitions``)
            the order depends on; a state saved under other values cannot be resumed.
        depends_on_nprocs: the order changes with the rank count (a state is then
            resumed on the rank count it was saved on only).
        shuffled: the order visits records out of key order: it needs a variant that
            reads any record position, and a shuffle ``block``.
    """

    name: ClassVar[str] = ""
    state_keys: ClassVar[tuple[str, ...]] = ()
    depends_on_nprocs: ClassVar[bool] = False
    shuffled: ClassVar[bool] = True

    def order(self, n: int, epoch: int, batch: int, nprocs: int, plan) -> np.ndarray:
        """Epoch ``epoch``'s global order: ``order[i]`` the record at position i (int64, a
        permutation of ``range(n)``). ``plan``: the settings (an EpochPlan)."""
        raise NotImplementedError

    def windows(self, n: int, epoch: int, plan) -> np.ndarray | None:
        """The shuffle window each record falls in (``w[p]`` for record p, windows in epoch
        order), for reading a window's records at once; None: the order has no windows."""
        return None

    def __repr__(self) -> str:
        return f"<order {self.name!r}>"


#: name -> the registered order.
ORDERS: dict[str, Order] = {}


def register(order: Order) -> Order:
    """Add ``order`` to :data:`ORDERS` under its name (a name may be registered once)."""
    if not isinstance(order, Order) or not order.name:
        raise ConfigurationError(f"an order must be an lmdbio.orders.Order with a name, got "
                                 f"{order!r}")
    if order.name in ORDERS and ORDERS[order.name] is not order:
        raise ConfigurationError(f"an order named {order.name!r} is registered already; "
                                 "give yours another name")
    ORDERS[order.name] = order
    return order


def get_order(order) -> Order:
    """The :class:`Order` that ``order`` names (a registered name) or is."""
    if isinstance(order, Order):
        return order
    if isinstance(order, str) and order in ORDERS:
        return ORDERS[order]
    raise ConfigurationError(f"order must be an lmdbio.orders.Order or one of "
                             f"{', '.join(map(repr, ORDERS))}, got {order!r}")
