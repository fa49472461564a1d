"""Drive the storage model of lmdbio.pfs with the request streams a variant issues.

A *stream* is one reader's requests in one phase of an iteration: ``n``
requests of ``size`` bytes at consecutive offsets from ``offset`` (or
``spacing`` apart), at most ``depth`` in flight (1: each waits for the
previous, as page faults do). A fractional depth ``d`` (a measured
effective depth, e.g. 1.5) is simulated, not divided: the stream keeps
its slots alternating between ``floor(d)`` and ``ceil(d)``: after its
``k``-th completion it may refill up to ``ceil(d)`` requests for a fraction
``f = d - floor(d)`` of the ``k`` (spread evenly), else up to ``floor(d)``. All streams of a phase start together; each
is submitted to :class:`lmdbio.pfs.model.StorageModel` in time order
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
from dataclasses import dataclass

from ..pfs.model import Profile, StorageModel

__all__ = ["Stream", "run_phase", "disk_profile"]


@dataclass(frozen=True)
class Stream:
    node: int
    n: float              # requests in the iteration (may be fractional: amortized)
    size: int             # bytes per request
    offset: int = 0       # file offset of the first request
    spacing: int = 0      # distance between request starts (0: size, i.e. sequential)
    depth: float = 1      # requests in flight (an effective depth may be fractional)
    align: bool = True    # start on a multiple of ``size`` (whole blocks, as GPFS reads them)


def disk_profile(latency_s: float, bw: float, readahead: int, max_request: int) -> Profile:
    """This machine's disk as a one-target storage profile (values from calibrate)."""
    return Profile(name="disk", targets=1, stripe=max(4096, max_request), latency_s=latency_s,
                   target_bw=bw, seek_s=0.0, node_link_bw=None, read_size=max(4096, max_request),
                   readahead=readahead, time_scale=1.0,
                   description="this machine's disk, measured by lmdbio model calibrate")


def run_phase(profile: Profile, nodes: int, streams: list[Stream], budget: int = 20000
              ) -> tuple[list[float], dict]:
    """Seconds each stream takes when all start at once; plus the model's total counters."""
    if not streams:
        return [], {}
    pieces = sum(s.n * max(1, math.ceil(s.size / profile.stripe)) for s in streams)
    q = min(1.0, budget / pieces) if pieces > 0 else 1.0
    m = [max(1, math.ceil(s.n * q - 1e-9)) if s.n > 0 else 0 for s in streams]
    model = StorageModel(profile, nodes)
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

    for i in range(len(streams)):
        refill(i, 0.0)
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
            continue
        s = streams[i]
        k = sent[i]
        sent[i] += 1
        base = (s.offset // s.size) * s.size if s.align and s.size else s.offset
        off = base + k * (s.spacing or s.size)
        end = model.submit(s.node, i, off, s.size, t)
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
            t = done[i] + (s.n - m[i]) * rate
        else:
            t = done[i] * (s.n / m[i])
        times.append(t)
    c = model.counters()["total"]
    scale = sum(s.n for s in streams) / max(1, sum(m))
    return times, {"requests": c["requests"] * scale, "bytes": c["bytes"] * scale,
                   "seeks": c["seeks"] * scale, "sampled_fraction": q}
