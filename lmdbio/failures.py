"""How one rank's error reaches the others: a portable record, the lowest failing rank's wins,
rebuilt on every rank with its type and fields."""

from __future__ import annotations

import pickle
import re

from .errors import LmdbioError

__all__ = ["portable", "lowest_error", "rebuild", "union"]


def union(a: list, b: list) -> list:
    """The sorted union of two lists of ranks."""
    return sorted(set(a) | set(b))


def portable(rank: int, err: BaseException) -> tuple:
    """``err`` as a message ``(rank, type, type name, text, fields)``: its type travels when
    it can be unpickled elsewhere, its fields (``err.__dict__``) when they pickle."""
    etype: type[BaseException] | None = type(err)
    try:
        if pickle.loads(pickle.dumps(etype)) is not etype:
            etype = None
    except Exception:   # a local class: only its name travels
        etype = None
    fields = dict(getattr(err, "__dict__", {}))
    try:
        pickle.dumps(fields)
    except Exception:   # fields that cannot travel stay behind
        fields = {}
    return rank, etype, type(err).__name__, str(err), fields


def lowest_error(a, b):
    """Combine two ``(failed ranks, portable error or None)``: the ranks' union, and the error
    of the lowest failing rank."""
    errs = [e for e in (a[1], b[1]) if e is not None]
    return union(a[0], b[0]), min(errs, key=lambda e: e[0]) if errs else None


def rebuild(r: int, etype, name: str, msg: str, fields: dict | None = None) -> BaseException:
    """Rank ``r``'s error on this rank, with its type and fields; its message names rank ``r``
    once (an LmdbioError naming the type where the type cannot be rebuilt from a message)."""
    # Many of our messages already start with their rank ("rank 0 (reader): ...").
    named = re.match(rf"rank {r}\b", msg) is not None
    text = msg if named else f"rank {r}: {msg}"
    if etype is not None:
        try:
            err = etype(text)
        except Exception:   # a type that takes other arguments
            pass
        else:
            if fields:
                try:
                    err.__dict__.update(fields)
                except AttributeError:
                    pass
            return err
    return LmdbioError(f"rank {r}: {name}: {msg}")
