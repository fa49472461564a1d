"""Work on the records of a batch in threads: one shared pool per size, the caller among them."""

from __future__ import annotations

import threading

__all__ = ["each"]


def each(threads: int, items: list, work):
    """``work(i)`` for every i of ``items`` (ascending) on ``threads`` threads; the error of
    the smallest item that returned one, or None.

    The JPEG and PNG decoders release the GIL, so encoded records decode in
    parallel. The caller is one of the threads and each takes the next item
    from one shared iterator: no task per record, and a thread that the
    machine slows down takes fewer.
    """
    if threads == 1 or len(items) < 2:
        for i in items:
            err = work(i)
            if err is not None:
                return err
        return None
    todo = iter(items)  # next() on a list iterator is atomic under the GIL
    errors: dict = {}

    def loop():
        for i in todo:
            err = work(i)
            if err is not None:
                errors[i] = err

    helpers = [_pool(threads - 1).submit(loop) for _ in range(min(threads, len(items)) - 1)]
    try:
        loop()
    finally:
        for f in helpers:  # a helper that has not started finds nothing left: drop it
            if not f.cancel():
                f.result()
    return errors[min(errors)] if errors else None


_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()


def _pool(threads: int):
    """One shared thread pool per size, made on first use (its threads live with the process)."""
    from concurrent.futures import ThreadPoolExecutor

    with _POOLS_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="lmdbio-decode")
        return _POOLS[threads]
