"""Drive the storage model of lmdbio.lab.pfs with the request streams a variant issues.

A *stream* is one reader's requests in one phase of an iteration: ``n``
requests of ``size`` bytes at consecutive offsets from ``offset`` (or
``spacing`` apart), at most ``depth`` in flight (1: each waits for the
previous, as page faults do). A fractional depth ``d`` (a measured
effective depth, e.g. 1.5) is simulated, not divided: the stream keeps
its slots alternating between ``floor(d)`` and ``ceil(d)``: after its
``k``-th completion it may refill up to ``ceil(d)`` requests for a fraction
``f = d - floor(d)`` of the ``k`` (spread evenly), else up to ``floor(d)``. All streams of a phase start together; each
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
    """
    if not streams:
        return [], {}
    pieces = sum(s.n * max(1, math.ceil(s.size / profile.stripe)) for s in streams)
    q = min(1.0, budget / pieces) if pieces > 0 else 1.0
    m = [max(1, math.ceil(s.n * q - 1e-9)) if s.n > 0 else 0 for s in streams]
    model = StorageModel(profile, nodes)
    caches = [BlockCache(cache_bytes, profile.stripe) for _ in range(nodes)] if cache_bytes > 0 else None
    issued = [0] * len(streams)            # requests scheduled (submitted or waiting in the heap)
    inflight = [0] * len(streams)
    done = [0.0] * len(streams)
    mid_k = [mi // 2 for mi in m]          # the request whose completion marks the half-way point
    mid_t = [0.0] * len(streams)
    finished = [0] * len(streams)
    base_slots = [max(1, int(math.floor(s.depth))) for s in streams]
    frac = [max(0.0, float(s.depth) - b) if s.depth > 1 else 0.0 for s, b in zip(streams, base_slots)]
    closed = [0] * len(streams)            # completions so far: the slot count's clock

    def cap(i: int) -> int:
        # Alternate floor and ceil slots: after the k-th completion the stream may have
        # ceil(d) requests in flight for a fraction f of the k (Bresenham), else floor(d).
        k = closed[i]
        return base_slots[i] + int(math.floor((k + 1) * frac[i]) - math.floor(k * frac[i]))

    heap: list[tuple[float, int, int, bool]] = []   # (time, seq, stream, is_completion)
    seq = 0

    def refill(i: int, t: float) -> None:
        nonlocal seq
        while issued[i] < m[i] and inflight[i] < cap(i):
            heapq.heappush(heap, (t, seq, i, False))
            seq += 1
            issued[i] += 1
            inflight[i] += 1

    for i, s in enumerate(streams):
        if s.after >= i:
            raise ValueError(f"stream {i} starts after stream {s.after}: it must be an earlier one")
    start = [0.0] * len(streams)
    waiting = {}                           # stream -> the streams that start when it ends
    for i, s in enumerate(streams):
        if s.after >= 0:
            waiting.setdefault(s.after, []).append(i)
        else:
            refill(i, 0.0)

    def ended(i: int, t: float) -> None:
        for j in waiting.pop(i, ()):
            start[j] = t
            refill(j, t)
            if not m[j]:
                ended(j, t)

    for i in range(len(streams)):
        if not m[i] and streams[i].after < 0:
            ended(i, 0.0)
    sent = [0] * len(streams)
    while heap:
        t, _, i, completion = heapq.heappop(heap)
        if completion:
            inflight[i] -= 1
            finished[i] += 1
            closed[i] += 1
            if finished[i] == mid_k[i]:
                mid_t[i] = t
            refill(i, t)
            if finished[i] == m[i]:
                ended(i, t)
            continue
        s = streams[i]
        k = sent[i]
        sent[i] += 1
        base = (s.offset // s.size) * s.size if s.align and s.size else s.offset
        off = base + k * (s.spacing or s.size)
        if caches is None:
            end = model.submit(s.node, i, off, s.size, t)
        else:
            c, blk = caches[s.node], profile.stripe
            end = t
            for b in range(off // blk, (off + max(1, s.size) - 1) // blk + 1):
                r = c.ready(b)
                if r is None:
                    r = model.submit(s.node, i, b * blk, blk, t)
                    c.put(b, r)
                end = max(end, r)
        done[i] = max(done[i], end)
        heapq.heappush(heap, (end, seq, i, True))
        seq += 1
    times = []
    for i, s in enumerate(streams):
        if not m[i]:
            times.append(0.0)
            continue
        if s.n > m[i] and m[i] >= 4:
            # Extrapolate at the steady rate of the second half (the start-up transient,
            # every stream arriving at once, is not repeated).
            rate = (done[i] - mid_t[i]) / (m[i] - mid_k[i])
            t = done[i] - start[i] + (s.n - m[i]) * rate
        else:
            t = (done[i] - start[i]) * (s.n / m[i])
        times.append(t)
    c = model.counters()["total"]
    scale = sum(s.n for s in streams) / max(1, sum(m))
    out = {"requests": c["requests"] * scale, "bytes": c["bytes"] * scale,
           "seeks": c["seeks"] * scale, "sampled_fraction": q}
    if caches is not None:
        hits, misses = sum(x.hits for x in caches), sum(x.misses for x in caches)
        out["cache_hit_fraction"] = hits / max(1, hits + misses)
    return times, out
