"""Storage model of a parallel file system: striped FIFO targets, seeks, per-node links.

Pure Python and deterministic: the FUSE emulator (``lmdbio.lab.pfs.fs``) charges
every read to it in real time, and the scale model reuses it in simulated
time. Assumptions, stated once:

- A file is striped round-robin over ``targets`` servers in ``stripe``-byte
  units; file ``f`` starts on target ``f % targets``. A request is split into
  one piece per stripe unit it touches (GPFS reads whole blocks, Lustre
  sends one RPC per stripe-sized chunk).
- Each target is a FIFO server, in the order requests are submitted. A piece
  of ``b`` bytes occupies it for ``latency + b / target_bw`` seconds.
- Seek: when a target serves a piece of another stream than its previous
  piece, and the piece does not continue that previous piece in the
  target's own byte space, it first pays ``seek`` seconds. One stream
  reading at random pays no seek (its per-request cost is ``latency``);
  interleaved streams do, unless their pieces happen to follow on.
- Optional per-node link of ``node_link_bw``: a node's requests cross it one
  after another (FIFO), overlapped with the targets' service; a request
  cannot complete before its bytes have crossed the link.
- A request completes when its last piece (and its link transfer) does.
- Two options for storage that is not a shared PFS (the throttled block
  device): ``per_node_targets`` gives every node its own ``targets``
  (nothing shared between nodes), and ``rate_limited`` makes a piece take
  ``max(latency, bytes / bw)`` (a token-bucket limit on requests and bytes
  per second) instead of their sum. Both are off in profiles.toml.
- Not modelled: client caches (the kernel's page cache does that in the
  emulator), write traffic, server-side caches, and the kernel waking every
  waiting reader per I/O completion (see the scale model).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field, replace
from importlib import resources
from types import MappingProxyType

from lmdbio.errors import ConfigurationError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

__all__ = ["Profile", "PROFILES", "load_profile", "profile_ranges", "StorageModel", "simulate", "size_bin"]


def _read_profiles() -> dict:
    text = resources.files(__package__).joinpath("profiles.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


_RAW = _read_profiles()
#: Names of the profiles in ``profiles.toml``.
PROFILES: tuple[str, ...] = tuple(_RAW)


@dataclass(frozen=True)
class Profile:
    """One storage system, already scaled by ``time_scale`` (times in seconds of this machine).

    Attributes:
        name: profile name (``local``, ``gpfs-2017``, ``lustre``).
        targets: number of servers a file is striped over.
        stripe: stripe unit in bytes.
        latency_s: per-piece network and server cost, seconds.
        target_bw: bytes per second one target delivers (``inf``: no cost).
        seek_s: penalty when a target switches streams non-sequentially.
        node_link_bw: bytes per second of one node's link, or None.
        read_size: largest read request the kernel sends (FUSE ``max_read``).
        readahead: the mount's readahead window in bytes (0: none).
        time_scale: factor applied to every time (1 = the real system).
        sources: where each value comes from ("source: ..." or "estimate: ...").
    """

    name: str
    targets: int
    stripe: int
    latency_s: float
    target_bw: float
    seek_s: float
    node_link_bw: float | None
    read_size: int
    readahead: int
    time_scale: float
    sources: MappingProxyType = field(default_factory=lambda: MappingProxyType({}),
                                      compare=False, hash=False, repr=False)
    description: str = ""
    per_node_targets: bool = False
    rate_limited: bool = False

    def scaled(self, time_scale: float) -> Profile:
        """The same system at another ``time_scale`` (ratios kept)."""
        if not (isinstance(time_scale, (int, float)) and math.isfinite(time_scale) and time_scale > 0):
            raise ConfigurationError(f"time_scale must be a positive number, got {time_scale!r}")
        f = float(time_scale) / self.time_scale
        return replace(self, latency_s=self.latency_s * f, seek_s=self.seek_s * f,
                       target_bw=self.target_bw / f,
                       node_link_bw=None if self.node_link_bw is None else self.node_link_bw / f,
                       time_scale=float(time_scale))

    def as_dict(self) -> dict:
        """JSON-friendly description (for meta.json): values, scale and sources."""
        return {"name": self.name, "targets": self.targets, "stripe": self.stripe,
                "latency_s": self.latency_s, "target_bw": _json_num(self.target_bw),
                "seek_s": self.seek_s, "node_link_bw": self.node_link_bw,
                "read_size": self.read_size, "readahead": self.readahead,
                "time_scale": self.time_scale, "description": self.description,
                "sources": dict(self.sources)}


def _json_num(x: float):
    return None if math.isinf(x) else x


_INT_KEYS = ("targets", "stripe", "read_size", "readahead")
_FLOAT_KEYS = ("latency_s", "target_bw", "seek_s", "time_scale")


def load_profile(name: str, time_scale: float | None = None) -> Profile:
    """The profile ``name`` from ``profiles.toml``, at its own or the given ``time_scale``.

    The file holds the real system's values (time_scale 1) and a default
    scale; the returned Profile is scaled (latency and seek times ``s``,
    bandwidths divided by ``s``).
    """
    if isinstance(name, Profile):
        return name if time_scale is None else name.scaled(time_scale)
    if name not in _RAW:
        raise ConfigurationError(f"unknown storage profile {name!r}; choose one of {', '.join(PROFILES)}")
    raw = dict(_RAW[name])
    try:
        kw = {k: int(raw[k]) for k in _INT_KEYS}
        kw.update({k: float(raw[k]) for k in _FLOAT_KEYS})
    except KeyError as exc:
        raise ConfigurationError(f"profile {name!r} in profiles.toml lacks {exc.args[0]!r}") from None
    link = raw.get("node_link_bw")
    if kw["targets"] < 1 or kw["stripe"] < 1 or kw["read_size"] < 4096 or kw["readahead"] < 0:
        raise ConfigurationError(f"profile {name!r}: targets, stripe must be >= 1, read_size >= 4096, "
                                 "readahead >= 0")
    if kw["latency_s"] < 0 or kw["seek_s"] < 0 or not kw["target_bw"] > 0 or not kw["time_scale"] > 0:
        raise ConfigurationError(f"profile {name!r}: times must be >= 0, bandwidth and time_scale > 0")
    base = Profile(name=name, node_link_bw=None if link is None else float(link),
                   sources=MappingProxyType(dict(raw.get("sources", {}))),
                   description=str(raw.get("description", "")), **{**kw, "time_scale": 1.0})
    return base.scaled(kw["time_scale"] if time_scale is None else time_scale)


def profile_ranges(name: str) -> dict:
    """``{parameter: (low, high, why)}`` for a profile's estimates (its ``[NAME.ranges]`` table).

    The ends the scale model also runs at; the emulator uses only the
    central values. A parameter outside the profile, or a range without
    ``low``, ``high`` and ``why``, is a ConfigurationError.
    """
    if name not in _RAW:
        raise ConfigurationError(f"unknown storage profile {name!r}; choose one of {', '.join(PROFILES)}")
    out = {}
    for key, r in dict(_RAW[name].get("ranges", {})).items():
        if key not in _INT_KEYS + _FLOAT_KEYS + ("node_link_bw",):
            raise ConfigurationError(f"profile {name!r}: a range for {key!r}, which is not a parameter")
        if not isinstance(r, dict) or not {"low", "high", "why"} <= set(r):
            raise ConfigurationError(f"profile {name!r}: the range of {key!r} needs low, high and why")
        out[key] = (r["low"], r["high"], str(r["why"]))
    return out


def size_bin(size: int) -> int:
    """Histogram bin of a request size: the next power of two, at least 4 KiB."""
    return 1 << max(12, (max(int(size), 1) - 1).bit_length())


def _node_counter() -> dict:
    return {"requests": 0, "bytes": 0, "queue_wait_s": 0.0, "service_s": 0.0, "hist": {}}


def _target_counter() -> dict:
    return {"requests": 0, "bytes": 0, "queue_wait_s": 0.0, "busy_s": 0.0, "seeks": 0, "hist": {}}


class StorageModel:
    """Shared storage seen by ``nodes`` client nodes: submit requests, get completion times.

    ``submit`` must be called in arrival order (non-decreasing ``t``) for the
    FIFO order to be the arrival order; it is thread-safe.
    """

    def __init__(self, profile: Profile | str, nodes: int = 1):
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        if not (isinstance(nodes, int) and nodes >= 1):
            raise ValueError(f"nodes must be a positive integer, got {nodes!r}")
        self.nodes = nodes
        p = self.profile
        ntargets = p.targets * (nodes if p.per_node_targets else 1)
        self._free = [0.0] * ntargets            # when each target becomes idle
        self._last: list[tuple | None] = [None] * ntargets  # (stream, file, local end)
        self._link_free = [0.0] * nodes
        self._lock = threading.Lock()
        self._node_c = [_node_counter() for _ in range(nodes)]
        self._target_c = [_target_counter() for _ in range(ntargets)]

    def pieces(self, offset: int, size: int, file: int = 0) -> list[tuple[int, int, int]]:
        """Split a request into ``(target, target_offset, bytes)`` pieces, one per stripe unit."""
        p = self.profile
        out = []
        pos, end = offset, offset + size
        while pos < end:
            unit = pos // p.stripe
            n = min(end, (unit + 1) * p.stripe) - pos
            target = (unit + file) % p.targets
            local = (unit // p.targets) * p.stripe + pos % p.stripe
            out.append((target, local, n))
            pos += n
        return out

    def submit(self, node: int, stream: int, offset: int, size: int, t: float, file: int = 0) -> float:
        """Charge a read of ``size`` bytes at ``offset`` arriving at time ``t``; its completion time.

        Args:
            node: client node (0 .. nodes-1); selects the link and counters.
            stream: who reads (a file handle, a process): seeks happen between streams.
            offset, size: byte range of the read in the file.
            t: arrival time in seconds (any clock, non-decreasing across calls).
            file: file number: where its striping starts (``file % targets``).
        """
        if not 0 <= node < self.nodes:
            raise ValueError(f"node {node} out of range 0..{self.nodes - 1}")
        if offset < 0 or size < 0:
            raise ValueError(f"offset and size must be >= 0, got {offset}, {size}")
        p = self.profile
        with self._lock:
            done = t
            wait = 0.0
            for target, local, n in self.pieces(offset, size, file):
                if p.per_node_targets:
                    target += node * p.targets
                start = max(t, self._free[target])
                last = self._last[target]
                seek = 0.0
                if last is not None and last[0] != stream and (last[1] != file or last[2] != local):
                    seek = p.seek_s
                    self._target_c[target]["seeks"] += 1
                transfer = n / p.target_bw if n else 0.0
                service = seek + (max(p.latency_s, transfer) if p.rate_limited else p.latency_s + transfer)
                self._free[target] = start + service
                self._last[target] = (stream, file, local + n)
                tc = self._target_c[target]
                tc["requests"] += 1
                tc["bytes"] += n
                tc["queue_wait_s"] += start - t
                tc["busy_s"] += service
                b = size_bin(n)
                tc["hist"][b] = tc["hist"].get(b, 0) + 1
                wait = max(wait, start - t)
                done = max(done, start + service)
            if p.node_link_bw is not None and size:
                lstart = max(t, self._link_free[node])
                self._link_free[node] = lstart + size / p.node_link_bw
                wait = max(wait, lstart - t)
                done = max(done, self._link_free[node])
            nc = self._node_c[node]
            nc["requests"] += 1
            nc["bytes"] += size
            nc["queue_wait_s"] += wait
            nc["service_s"] += done - t
            b = size_bin(size)
            nc["hist"][b] = nc["hist"].get(b, 0) + 1
        return done

    def simulate(self, requests) -> list[float]:
        """Completion times of ``(node, stream, offset, size, t[, file])`` requests in arrival order."""
        return [self.submit(*r) for r in requests]

    def counters(self) -> dict:
        """Counters per node and per target, and totals, as a JSON-friendly dict.

        Each entry has ``requests``, ``bytes``, ``mean_request_bytes``,
        ``queue_wait_s`` (summed time spent waiting for a busy target or
        link) and ``hist`` (request count per size bin, ``{"4096": n, ...}``,
        upper bounds). Nodes add ``service_s`` (summed response time);
        targets count pieces as requests and add ``busy_s`` and ``seeks``.
        """
        with self._lock:
            def fmt(c):
                d = {k: v for k, v in c.items() if k != "hist"}
                d["mean_request_bytes"] = c["bytes"] / c["requests"] if c["requests"] else 0.0
                d["hist"] = {str(k): v for k, v in sorted(c["hist"].items())}
                return d

            nodes = [fmt(c) for c in self._node_c]
            targets = [fmt(c) for c in self._target_c]
            req = sum(c["requests"] for c in self._node_c)
            nbytes = sum(c["bytes"] for c in self._node_c)
            total = {"requests": req, "bytes": nbytes,
                     "mean_request_bytes": nbytes / req if req else 0.0,
                     "queue_wait_s": sum(c["queue_wait_s"] for c in self._node_c),
                     "service_s": sum(c["service_s"] for c in self._node_c),
                     "pieces": sum(c["requests"] for c in self._target_c),
                     "seeks": sum(c["seeks"] for c in self._target_c)}
            return {"profile": self.profile.name, "time_scale": self.profile.time_scale,
                    "nodes": nodes, "targets": targets, "total": total}

    def reset_counters(self) -> None:
        """Zero the counters (queues and seek state are kept)."""
        with self._lock:
            self._node_c = [_node_counter() for _ in range(self.nodes)]
            self._target_c = [_target_counter() for _ in range(self.profile.targets)]


def simulate(profile: Profile | str, requests, nodes: int = 1) -> list[float]:
    """Completion times of requests ``(node, stream, offset, size, t[, file])`` on a fresh model."""
    return StorageModel(profile, nodes).simulate(requests)
