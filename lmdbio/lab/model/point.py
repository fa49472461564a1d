"""One prediction point's setting: the readers, the batch, the storage the readers see.

:func:`point` derives everything a variant's phases need from the platform,
the workload, the variant and the process count (:class:`Point`); the
mechanism functions of :mod:`lmdbio.lab.model.phases` read it and add their
seconds to its phases. The measured curves a platform names (faulters,
requests per read, speculation, leaf cut, the shared probe) are loaded once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

from lmdbio.errors import ConfigurationError
from lmdbio.options import parse_variant
from . import mechanisms as mech
from .calibrate import Calibration
from .platform import Platform, Workload
from .streams import disk_profile, run_phase

__all__ = ["PHASES", "Point", "point", "storage_profile", "explicit_depth", "shared_probe_of", "probe_at",
           "phase_time", "speculation_of", "requests_curve", "leaf_cut_of"]

PHASES = ("locate", "read", "distribute", "wait", "compute", "communicate")


def storage_profile(platform: Platform, cal: Calibration, cache: str):
    """The storage the readers see: None for a warm page cache."""
    if cache == "warm":
        return None
    if platform.storage == "disk":
        return disk_profile(cal.disk_latency_s, cal.disk_bw, cal.disk_readahead, cal.disk_max_request)
    from ..pfs.model import load_profile

    prof = load_profile(platform.storage, time_scale=platform.storage_time_scale)
    if platform.storage_overrides:
        # Values at the real system's scale, as profiles.toml holds them: scale them like the rest.
        f = prof.time_scale
        scale = {"latency_s": f, "seek_s": f, "target_bw": 1 / f, "node_link_bw": 1 / f}
        prof = replace(prof, **{k: (type(getattr(prof, k) if getattr(prof, k) is not None else 1.0)(v)
                                    * scale.get(k, 1)) for k, v in platform.storage_overrides})
    return prof


def explicit_depth(platform: Platform, cal: Calibration) -> tuple[float, str]:
    """Requests in flight for a large explicit read on this platform, and where it comes from.

    The platform's ``explicit_inflight`` when set; else, for an emulated PFS
    profile, the calibration's measured ``pfs_inflight``; else (the local
    disk, or a calibration without the PFS measurement) :data:`mech.IN_FLIGHT`.
    """
    if platform.explicit_inflight:
        return float(platform.explicit_inflight), f"platform {platform.name}: explicit_inflight"
    if platform.storage != "disk":
        d = getattr(cal, "pfs_inflight", float("nan"))
        if math.isfinite(d) and d >= 1.0:
            return float(d), ("calibration: pfs_inflight, a cold 4 MiB pread through an lmdbio.lab.pfs "
                              "mount (calibration.json: pfs_inflight_source)")
        if math.isfinite(d) and d > 0:
            return 1.0, f"calibration: pfs_inflight {d:.3f} < 1, taken as 1"
        return float(mech.IN_FLIGHT), ("estimate: mechanisms.IN_FLIGHT (the calibration has no "
                                       "pfs_inflight: " + cal.pfs_inflight_source + ")")
    return float(mech.IN_FLIGHT), "estimate: mechanisms.IN_FLIGHT (FUSE/block-layer async readahead)"


@lru_cache(maxsize=8)
def _faulters(path: str):
    return mech.load_faulters(path) if path else ()


@lru_cache(maxsize=8)
def requests_curve(path: str):
    """The measured requests-per-read curve at ``path`` (() for none: the formula)."""
    from .requests import load_curve

    return load_curve(path) if path else ()


@lru_cache(maxsize=8)
def leaf_cut_of(path: str):
    """The measured cached / plain time factor of ``path`` as a function of the read's bytes."""
    from .leafcut import load, ratio_at

    table = load(path)
    return lambda nbytes: ratio_at(nbytes, table)


@lru_cache(maxsize=8)
def probe_at(path: str):
    """The shared target's probe stored at ``path`` (loaded once per path)."""
    from .sharedprobe import load_probe

    return load_probe(path)


def shared_probe_of(platform: Platform):
    """The shared target's probe (:class:`~lmdbio.lab.model.sharedprobe.Probe`) when the
    platform's storage is a ``shared:*`` profile and names one; else None."""
    name = str(getattr(platform.storage, "name", platform.storage))
    if not (name.startswith("shared:") and platform.shared_probe):
        return None
    return probe_at(platform.shared_probe)


@lru_cache(maxsize=8)
def speculation_of(path: str) -> dict:
    """DM's measured speculation at ``path``; without one, every page advised in time, nothing extra."""
    return mech.load_speculation(path) if path else {"miss": 0.0, "issued": 1.0, "served": 1.0}


def phase_time(profile, nodes, streams, budget, pagepool: int = 0) -> tuple[float, dict]:
    """The slowest stream's seconds through the storage model, and its request counters."""
    if profile is None or not streams:
        return 0.0, {}
    times, counters = run_phase(profile, nodes, streams, budget, cache_bytes=pagepool)
    return max(times), counters


def _family(o) -> str:
    """The variant family whose fixed ``read_batch()`` cost the calibration measured."""
    if not o.localized:
        return "lmdb"
    return {"ring": "lmdbio-lmm-dm", "walk": "lmdbio-lmm", "index": "lmdbio-lmm-dio"}.get(
        o.locate, "lmdbio-lmm-dio-prov")


@dataclass
class Point:
    """A point's setting (derived once) and the phases its mechanisms add up."""

    platform: Platform
    workload: Workload
    cal: Calibration
    o: object
    cache: str
    budget: int
    P: int
    n_node: int          # ranks on a node
    nodes: int
    cores: int
    rpl: int             # records per leaf page
    ppr: float           # pages per record
    f: float             # file bytes per record
    B: int               # the global batch
    N: int               # records in the data set
    profile: object      # the storage model's profile; None: a warm page cache
    inflight: float
    pfs: bool
    probe: object
    faulters: tuple
    alpha: float
    beta: float
    rdr: int             # readers per node
    R: int               # readers
    members: int         # members per reader (LMM)
    g: float             # records a reader reads per batch
    waiters: int
    k: int               # batches COAL reads at once
    family: str
    ph: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    info: dict = field(default_factory=dict)
    reader_cpu: float = 0.0      # a reader's CPU per iteration
    setup: float = 0.0           # seconds paid once per run
    ring_wait: float = 0.0
    steps: int = 0               # cursor steps per iteration
    walk_cpu: float = 0.0        # their CPU

    @property
    def b(self) -> float:
        return self.B / self.P

    @property
    def s(self) -> int:
        return self.workload.record_bytes

    @property
    def cold(self) -> bool:
        return self.profile is not None

    @property
    def ra(self) -> int:
        return self.profile.readahead if self.profile is not None else 0

    @property
    def rsize(self) -> int:
        return self.profile.read_size if self.profile is not None else 1 << 20

    @property
    def cap(self):
        return self.probe.node_max_request if self.probe is not None else None

    @property
    def curve(self):
        # The requests-per-read curve and DM's speculation were measured through the emulated PFS
        # (a FUSE mount): used for PFS profiles, not for the local disk or the throttled device.
        return requests_curve(self.platform.requests_per_read) if self.pfs else ()

    @property
    def spec_file(self) -> str:
        return self.platform.speculation if self.pfs else ""

    @property
    def hide(self) -> float:
        """The share of the CPU between cold reads that readahead hides: measured on the local disk."""
        overlap = getattr(self.cal, "disk_read_overlap", None)
        return overlap if self.platform.storage == "disk" and overlap is not None else 1.0

    def add_counters(self, c: dict, per_iter: float = 1.0) -> None:
        self.info["storage_requests"] += c.get("requests", 0.0) * per_iter
        self.info["storage_bytes"] += c.get("bytes", 0.0) * per_iter

    def time(self, nodes: int, streams) -> tuple[float, dict]:
        """:func:`phase_time` through this point's storage and client cache."""
        return phase_time(self.profile, nodes, streams, self.budget, self.platform.pagepool)


def point(platform: Platform, workload: Workload, variant: str, nprocs: int, cal: Calibration,
          cache: str | None = None, budget: int = 20000) -> Point:
    """The setting of one point: readers, groups, the batch, the storage and the network."""
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive integer, got {nprocs!r}")
    o = parse_variant(variant, coalesce_bytes=platform.coalesce_bytes,
                      stagger_size=platform.stagger_size or None)
    cache = cache or platform.cache
    P = nprocs
    rpn = platform.ranks_per_node or P
    n_node, nodes = min(P, rpn), math.ceil(P / rpn)
    geo = mech.geometry(workload.record_bytes, workload.key_bytes)
    B = workload.global_batch(P)
    if B < P:
        raise ConfigurationError(f"global batch {B} is smaller than {P} processes")
    # The data set: fixed (its records), or as many records as the run reads.
    N = workload.records or workload.iterations * B
    probe = shared_probe_of(platform)
    faulters = _faulters(probe.faulters_csv if probe is not None else platform.faulters)
    alpha = (platform.net_alpha_s or cal.mpi_alpha_s) if nodes > 1 else cal.mpi_alpha_s
    beta = (platform.net_beta_s or cal.mpi_beta_s) if nodes > 1 else cal.mpi_beta_s
    if o.localized:
        rdr = min(platform.readers_per_node, n_node)
        R, members, g, waiters = nodes * rdr, n_node // rdr - 1, B / (nodes * rdr), rdr
    else:
        rdr, R, members, g, waiters = n_node, P, 0, B / P, n_node
    k = mech.coalesce_factor(g * workload.record_bytes, o.coalesce_bytes, max(1, N // B)) \
        if o.coalesce_bytes else 1
    pt = Point(platform=platform, workload=workload, cal=cal, o=o, cache=cache, budget=budget, P=P,
               n_node=n_node, nodes=nodes, cores=platform.cores_per_node or cal.cores,
               rpl=geo["records_per_leaf"], ppr=geo["pages_per_record"], f=geo["file_bytes_per_record"],
               B=B, N=N, profile=storage_profile(platform, cal, cache),
               inflight=explicit_depth(platform, cal)[0],
               pfs=isinstance(platform.storage, str) and platform.storage != "disk", probe=probe,
               faulters=faulters, alpha=alpha, beta=beta, rdr=rdr, R=R, members=members, g=g,
               waiters=waiters, k=k, family=_family(o))
    pt.info = {"explicit_inflight": pt.inflight, "readers": R, "group_records": g, "coalesce": k,
               "records_per_leaf": pt.rpl, "pages_per_record": pt.ppr, "storage_requests": 0.0,
               "storage_bytes": 0.0}
    return pt
