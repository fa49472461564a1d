"""Drive the storage model of lmdbio.lab.pfs with the request streams a variant issues.

A *stream* is one reader's requests in one phase of an iteration: ``n``
requests of ``size`` bytes at consecutive offsets from ``offset`` (or
``spacing`` apart), at most ``depth`` in flight (1: each waits for the
previous, as page faults do; a fractional depth, measured, alternates
``floor(d)`` and ``ceil(d)`` slots). All streams of a phase start together; each
is submitted to :class:`lmdbio.lab.pfs.model.StorageModel` in time order
(FIFO targets, stripes, seeks between interleaved streams, node links).

Scale: a phase with more pieces than ``budget`` is simulated on the same
fraction ``q`` of every stream's requests (at least one each, ``m`` in
all); each stream's time is extrapolated from ``m`` to ``n`` requests at
the rate of the second half of its sampled requests (the steady state: the
start-up transient of all streams arriving at once is paid once), or scaled
by ``n / m`` when fewer than four were sampled. Small phases are simulated
whole.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

from ..pfs.model import Profile, StorageModel

__all__ = ["Stream", "BlockCache", "run_phase", "disk_profile"]


@dataclass(frozen=True)
class Stream:
    node: int
    n: float              # requests in the iteration (may be fractional: amortized)
    size: int             # bytes per request
    offset: int = 0       # file offset of the first request
    spacing: int = 0      # distance between request starts (0: size, i.e. sequential)
    depth: float = 1      # requests in flight (an effective depth may be fractional)
    align: bool = True    # start on a multiple of ``size`` (whole blocks, as GPFS reads them)
    after: int = -1       # start when stream ``after`` (an earlier index) ends; -1: at time 0


def disk_profile(latency_s: float, bw: float, readahead: int, max_request: int) -> Profile:
    """This machine's disk as a one-target storage profile (values from calibrate)."""
    return Profile(name="disk", targets=1, stripe=max(4096, max_request), latency_s=latency_s,
                   target_bw=bw, seek_s=0.0, node_link_bw=None, read_size=max(4096, max_request),
                   readahead=readahead, time_scale=1.0,
                   description="this machine's disk, measured by lmdbio model calibrate")


class BlockCache:
    """One node's client cache of whole storage blocks (GPFS's pagepool), least recently used out.

    ``ready(block)`` is when a cached block's bytes are there (a block still
    being fetched is waited for, not fetched twice); None when it is not
    cached. Hits cost no storage time (the copy out of the cache is CPU,
    counted by the caller's per-record costs).
    """

    def __init__(self, capacity_bytes: int, block: int):
        if capacity_bytes <= 0 or block <= 0:
            raise ValueError(f"capacity and block must be > 0 bytes, got {capacity_bytes}, {block}")
        self.block = int(block)
        self.capacity = max(1, int(capacity_bytes) // self.block)
        self._ready: OrderedDict[int, float] = OrderedDict()
        self.hits = self.misses = 0

    def ready(self, block: int) -> float | None:
        r = self._ready.get(block)
        if r is not None:
            self._ready.move_to_end(block)
            self.hits += 1
        return r

    def put(self, block: int, ready: float) -> None:
        self.misses += 1
        self._ready[block] = ready
        self._ready.move_to_end(block)
        while len(self._ready) > self.capacity:
            self._ready.popitem(last=False)


def run_phase(profile: Profile, nodes: int, streams: list[Stream], budget: int = 20000,
              cache_bytes: int = 0) -> tuple[list[float], dict]:
    """Seconds each stream takes from its start; plus the model's total counters.

    Streams start at once, except a stream with ``after`` = j, which starts
    when stream j's last sampled request completes (turns taken one after
    another, as DM's ring; sampled chains start early, their times are
    still each stream's own extrapolated duration).

    ``cache_bytes`` > 0: every node has a :class:`BlockCache` of that size in
    front of storage (the blocks are the profile's stripe units: GPFS reads
    whole blocks into its pagepool); a request is served by the blocks it
    touches, each fetched whole on a miss. The cache lives for this phase.
    A phase is a pure function of its arguments: a repeated one (DIO's and
    PROV's reads, one index pass for four variants) is simulated once.
    """
    if not streams:
        return [], {}
    for i, s in enumerate(streams):
        if s.after >= i:
            raise ValueError(f"stream {i} starts after stream {s.after}: it must be an earlier one")
    times, counters = _phase(profile, nodes, tuple(streams), budget, cache_bytes)
    return list(times), dict(counters)


@lru_cache(maxsize=64)
def _phase(profile, nodes, streams, budget, cache_bytes):
    return _Phase(profile, nodes, streams, budget, cache_bytes).run()


class _Phase:
    """One phase's event simulation: requests submitted in time order, completions refill slots."""

    def __init__(self, profile, nodes, streams, budget, cache_bytes):
        pieces = sum(s.n * max(1, math.ceil(s.size / profile.stripe)) for s in streams)
        q = min(1.0, budget / pieces) if pieces > 0 else 1.0
        self.q, self.streams, self.profile = q, streams, profile
        self.m = [max(1, math.ceil(s.n * q - 1e-9)) if s.n > 0 else 0 for s in streams]
        self.model = StorageModel(profile, nodes)
        self.caches = ([BlockCache(cache_bytes, profile.stripe) for _ in range(nodes)]
                       if cache_bytes > 0 else None)
        k = len(streams)
        self.issued, self.inflight, self.finished = [0] * k, [0] * k, [0] * k
        self.done, self.start, self.mid_t = [0.0] * k, [0.0] * k, [0.0] * k
        self.mid_k = [mi // 2 for mi in self.m]    # the completion that marks the half-way point
        self.slots = [max(1, int(math.floor(s.depth))) for s in streams]
        self.frac = [max(0.0, float(s.depth) - b) if s.depth > 1 else 0.0
                     for s, b in zip(streams, self.slots)]
        self.heap: list[tuple[float, int, int, bool]] = []   # (time, seq, stream, is_completion)
        self.seq = 0
        self.waiting: dict[int, list[int]] = {}   # stream -> the streams that start when it ends

    def refill(self, i: int, t: float) -> None:
        # A fractional depth d alternates floor(d) and ceil(d) slots: after the k-th completion
        # the stream may have ceil(d) in flight for a fraction f of the k (Bresenham).
        cap, f = self.slots[i], self.frac[i]
        if f:
            k = self.finished[i]
            cap += int(math.floor((k + 1) * f) - math.floor(k * f))
        n = min(self.m[i] - self.issued[i], cap - self.inflight[i])
        for _ in range(n):
            heapq.heappush(self.heap, (t, self.seq, i, False))
            self.seq += 1
        if n > 0:
            self.issued[i] += n
            self.inflight[i] += n

    def ended(self, i: int, t: float) -> None:
        for j in self.waiting.pop(i, ()):
            self.start[j] = t
            self.refill(j, t)
            if not self.m[j]:
                self.ended(j, t)

    def submit(self, i: int, off: int, t: float) -> float:
        s = self.streams[i]
        if self.caches is None:
            return self.model.submit(s.node, i, off, s.size, t)
        c, blk = self.caches[s.node], self.profile.stripe
        end = t
        for b in range(off // blk, (off + max(1, s.size) - 1) // blk + 1):
            r = c.ready(b)
            if r is None:
                r = self.model.submit(s.node, i, b * blk, blk, t)
                c.put(b, r)
            end = max(end, r)
        return end

    def run(self) -> tuple[list[float], dict]:
        streams, m, heap = self.streams, self.m, self.heap
        for i, s in enumerate(streams):
            if s.after >= 0:
                self.waiting.setdefault(s.after, []).append(i)
            else:
                self.refill(i, 0.0)
        for i, s in enumerate(streams):
            if not m[i] and s.after < 0:
                self.ended(i, 0.0)
        first = [(s.offset // s.size) * s.size if s.align and s.size else s.offset for s in streams]
        step = [s.spacing or s.size for s in streams]
        sent, done, finished = [0] * len(streams), self.done, self.finished
        while heap:
            t, _, i, completion = heapq.heappop(heap)
            if completion:
                self.inflight[i] -= 1
                finished[i] += 1
                if finished[i] == self.mid_k[i]:
                    self.mid_t[i] = t
                self.refill(i, t)
                if finished[i] == m[i]:
                    self.ended(i, t)
                continue
            end = self.submit(i, first[i] + sent[i] * step[i], t)
            sent[i] += 1
            if end > done[i]:
                done[i] = end
            heapq.heappush(heap, (end, self.seq, i, True))
            self.seq += 1
        return self.times(), self.counters()

    def times(self) -> list[float]:
        out = []
        for i, s in enumerate(self.streams):
            m, done = self.m[i], self.done[i]
            if not m:
                out.append(0.0)
            elif s.n > m and m >= 4:
                # Extrapolate at the steady rate of the second half (the start-up transient,
                # every stream arriving at once, is not repeated).
                rate = (done - self.mid_t[i]) / (m - self.mid_k[i])
                out.append(done - self.start[i] + (s.n - m) * rate)
            else:
                out.append((done - self.start[i]) * (s.n / m))
        return out

    def counters(self) -> dict:
        c = self.model.counters()["total"]
        scale = sum(s.n for s in self.streams) / max(1, sum(self.m))
        out = {"requests": c["requests"] * scale, "bytes": c["bytes"] * scale,
               "seeks": c["seeks"] * scale, "sampled_fraction": self.q}
        if self.caches is not None:
            hits, misses = sum(x.hits for x in self.caches), sum(x.misses for x in self.caches)
            out["cache_hit_fraction"] = hits / max(1, hits + misses)
        return out
