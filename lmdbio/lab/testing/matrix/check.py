"""One rank's check of one combination: build a Reader, read, compare every record with py-lmdb."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from collections.abc import Iterable

import numpy as np

from .combos import STALL_BATCHES, STALL_MAX_S, STALL_RECORDS, Combo

__all__ = ["check_combination"]


class _RankCheck:
    """One rank's record comparisons, with the batch it holds until its second following read."""

    def __init__(self, expected: list[bytes], rank: int, share: int, stall: bool):
        self.expected, self.rank, self.share, self.stall = expected, rank, share, stall
        self.n = len(expected)
        self.checked = self.wrong = self.wrong_held = 0
        self.where: Counter = Counter()
        self.stream: list[tuple[str, int, bool]] = []   # (phase, global start, well formed)
        self.epochs: dict[int, list[list[int]]] = {}
        self.phase = "setup"
        self.times: Counter = Counter()   # seconds per phase
        self._t = time.perf_counter()
        self._held: list = []   # the last two batches: (batch, its indices, phase delivered)
        self._per_batch = 0.01

    def enter(self, phase: str) -> None:
        """From here on, time and wrong records count for ``phase``."""
        now = time.perf_counter()
        self.times[self.phase] += now - self._t
        self.phase, self._t = phase, now

    def _compare(self, batch, idx: list[int]) -> int:
        bad = 0
        for i, j in enumerate(idx):
            if not 0 <= j < self.n or bytes(batch[i]) != self.expected[j]:
                bad += 1
        return bad

    def take(self, batch) -> list[int]:
        """Check a batch just delivered and the one delivered before it (after its first
        following read); hold both."""
        idx = np.asarray(batch.indices).tolist()
        bad = self._compare(batch, idx)
        self.checked += len(idx)
        self.wrong += bad
        if bad:
            self.where[self.phase] += bad
        self.recheck(self._held[-1:], self.phase)
        self._held = self._held[-1:] + [(batch, idx, self.phase)]
        return idx

    def recheck(self, held: list, now: str) -> None:
        for batch, idx, phase in held:
            bad = self._compare(batch, idx)
            self.wrong_held += bad
            if bad:
                self.where[f"held {phase}->{now}"] += bad

    def read(self, reader, phase: str) -> None:
        """One ``read_batch()`` of the endless stream."""
        self.enter(phase)
        idx = self.take(reader.read_batch())
        ok = len(idx) == self.share and bool(idx) and all(
            b == (idx[0] + k) % self.n for k, b in enumerate(idx))
        start = (idx[0] - self.rank * self.share) % self.n if idx else -1
        self.stream.append((phase, start, ok))

    def epoch(self, e: int, batches: Iterable) -> None:
        self.enter(f"epoch {e}")
        got = self.epochs.setdefault(e, [])
        stamps = [time.perf_counter()]
        for b in batches:
            got.append(self.take(b))
            stamps.append(time.perf_counter())
            if self.stall and e == 1 and len(got) == 2:
                # Computing long while both batches are held; then both must still be right.
                time.sleep(min(STALL_MAX_S, STALL_BATCHES * self._per_batch))
                self.recheck(self._held, "a stop in epoch 1")
        if e == 0 and len(stamps) > 2:
            self._per_batch = float(np.median(np.diff(stamps)))

    def drop(self) -> None:
        self._held = []

    def summary(self) -> dict:
        self.enter(self.phase)
        return {"times": dict(self.times), "checked": self.checked, "wrong": self.wrong,
                "wrong_held": self.wrong_held, "where": dict(self.where), "stream": self.stream,
                "epochs": self.epochs, "phase": self.phase}


def _raised(exc: BaseException, phase: str) -> dict:
    import traceback

    from lmdbio.errors import LmdbioError

    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    return {"type": type(exc).__name__, "message": str(exc),
            "classes": [k.__name__ for k in type(exc).__mro__],
            "lmdbio": isinstance(exc, LmdbioError), "phase": phase,
            "at": " < ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}"
                             for f in reversed(frames))}


def check_combination(item: dict, comm, expected: list[bytes]) -> dict:
    """Run one combination on this rank (every rank of ``comm`` calls it); ``expected``: every
    value in key order, as py-lmdb reads them. Returns this rank's counts, indices and what
    it raised, for :func:`merge_ranks`."""
    from lmdbio import Reader

    c = Combo(**item["combo"])
    share = c.batch // comm.size
    st = _RankCheck(expected, comm.rank, share, stall=False)
    out: dict = {"rank": comm.rank, "raised": None, "variant_read": None}
    t0 = time.perf_counter()
    try:
        reader = Reader(item["path"], c.batch, comm, on_error="abort", **c.reader_kwargs())
    except Exception as exc:  # a refusal, or an error the matrix reports
        out["raised"] = _raised(exc, "setup")
        out.update(st.summary(), seconds=time.perf_counter() - t0)
        return out
    out["variant_read"] = reader.variant
    st.stall = bool(c.prefetch and c.records in STALL_RECORDS and reader.options.localized
                    and not reader.is_reader)
    try:
        with reader as r:
            st.read(r, "before epochs")
            st.read(r, "before epochs")
            r.set_epoch(0)
            st.epoch(0, r)                  # iter(reader): set_epoch's epoch
            st.read(r, "between epochs")
            st.read(r, "between epochs")
            st.epoch(1, r.epoch(1))
            gen = r.epoch(2)
            st.epoch(2, (b for _, b in zip(range(item["break_after"]), gen)))
            del gen                         # broken early: its generator is dropped
            st.read(r, "after epochs")
            st.read(r, "after epochs")
            st.drop()
            st.enter("close")
    except Exception as exc:  # reported per combination
        out["raised"] = _raised(exc, st.phase)
    st.drop()
    out.update(st.summary(), seconds=time.perf_counter() - t0)
    return out
