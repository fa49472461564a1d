"""Platforms and workloads as data: ``lmdbio/lab/platforms/NAME.toml`` (or any TOML path)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType

from ..emulation import parse_compute_time, parse_model_bytes
from lmdbio.errors import ConfigurationError

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    tomllib = None

__all__ = ["Platform", "Workload", "load_platform", "list_platforms", "PLATFORM_DIR", "BATCH_READINGS"]

PLATFORM_DIR = Path(__file__).resolve().parent.parent / "platforms"
#: The two readings of a workload's batch: fixed global (strong scaling), fixed per process (weak).
BATCH_READINGS = ("global", "per-process")


@dataclass(frozen=True)
class Workload:
    """What is read and trained: record geometry, data set, batch, iterations, emulated training.

    Two readings of the batch: ``batch_size`` is the global batch, fixed over
    P (strong scaling: each process gets ``batch_size / P``, as the reference
    code's ``subbatch_size``), ``batch_per_process`` the batch of each process
    (weak scaling: the global batch grows with P). A workload may give both;
    ``batch`` ("global" or "per-process") says which one applies, and
    :meth:`reading` gives the workload under the other. ``records`` is the
    data set's size: a run of more than ``records`` records wraps into
    further epochs (0: as many as the run reads, no wrap).
    """

    name: str
    record_bytes: int
    key_bytes: int = 35
    records: int = 0
    batch_size: int = 0
    batch_per_process: int = 0
    iterations: int = 1
    compute_s_per_sample: float = 0.0
    model_bytes: int = 0
    #: Training FLOPs per sample (forward and backward); with a platform's ``core_flops`` it gives
    #: the compute time (:meth:`Platform.compute_s`) instead of ``compute_s_per_sample``.
    flops_per_sample: float = 0.0
    #: Which batch applies: "global" (batch_size) or "per-process" (batch_per_process).
    batch: str = ""
    #: ``{field: (low, high, why)}`` for the workload's estimates (its ``[workload.ranges]``).
    ranges: MappingProxyType = field(default_factory=lambda: MappingProxyType({}),
                                     compare=False, repr=False)
    sources: MappingProxyType = field(default_factory=lambda: MappingProxyType({}),
                                      compare=False, repr=False)

    def __post_init__(self):
        if not self.batch:
            object.__setattr__(self, "batch", "global" if self.batch_size else "per-process")

    def global_batch(self, nprocs: int) -> int:
        """The global batch at ``nprocs`` processes under this workload's reading."""
        return self.batch_size if self.batch == "global" else self.batch_per_process * nprocs

    def reading(self, batch: str) -> Workload:
        """This workload under the batch reading ``batch`` ("global" or "per-process")."""
        if batch not in BATCH_READINGS:
            raise ConfigurationError(f"batch reading must be one of {', '.join(BATCH_READINGS)}, "
                                     f"not {batch!r}")
        if (self.batch_size if batch == "global" else self.batch_per_process) <= 0:
            field_ = "batch_size" if batch == "global" else "batch_per_process"
            raise ConfigurationError(f"workload {self.name!r} has no {field_}: it cannot be read "
                                     f"with a {batch} batch")
        return replace(self, batch=batch)

    def epochs(self, nprocs: int) -> float:
        """Passes over the data set a run makes (0 when ``records`` is 0: no fixed data set)."""
        return self.iterations * self.global_batch(nprocs) / self.records if self.records else 0.0


@dataclass(frozen=True)
class Platform:
    """A cluster (or this machine) for the model: nodes, storage, network, CPU costs.

    ``ranks_per_node`` 0 puts every rank on one node; ``cores_per_node`` 0
    takes the calibration's core count (CPU-side costs always come from the
    calibration); ``net_alpha_s``/``net_beta_s`` 0 take
    the calibrated MPI ping-pong. ``cores_shared``: every (virtual) node runs
    on the same cores (this machine emulating several nodes).
    ``explicit_inflight``: requests one reader keeps in flight during a large
    explicit read (the effective depth, may be fractional); 0 takes it from
    the calibration (its ``pfs_inflight``, measured through an lmdbio.lab.pfs
    mount) for a PFS profile, and :data:`mechanisms.IN_FLIGHT` for the disk.
    """

    name: str
    ranks_per_node: int
    cores_per_node: int
    readers_per_node: int
    storage: str
    storage_time_scale: float
    cache: str
    net_alpha_s: float
    net_beta_s: float
    coalesce_bytes: int
    stagger_size: int
    workloads: tuple[Workload, ...]
    cores_shared: bool = False
    explicit_inflight: float = 0.0
    #: A cursor step touches the first page of the value it steps over (not only its leaf page):
    #: measured for lmdbio's walk by a microbenchmark (lmdbio.lab.model.walkread); unknown for Caffe's.
    walk_touches_values: bool = False
    #: The K-faulters curve (problem 1, measured): a faulters.csv path ('' = none).
    faulters: str = ""
    #: Requests and bytes of one cold explicit read of L bytes, measured through an lmdbio.lab.pfs
    #: mount (a requests_per_read.csv path, ``python -m lmdbio.lab.model.requests``; '' = the
    #: formula ``L / request``). Used for PFS profiles only.
    requests_per_read: str = ""
    #: The shared target's probe (a directory written by ``python -m lmdbio.lab.model.sharedprobe``):
    #: for a storage profile ``shared:*`` its measured requests per read, K-faulters curve and node
    #: device limits replace the formula, the throttled device's curve and the profile's guesses.
    shared_probe: str = ""
    #: What cached leaf pages cost a cold explicit read on the local disk (a leaf_cut.csv path,
    #: ``python -m lmdbio.lab.model.leafcut``; '' = each piece of DIO's cut reads a request of its
    #: own, one after another). Used for storage ``disk`` only.
    leaf_cut: str = ""
    #: DM's speculation as the fixed code issued it (a speculation summary.csv path with
    #: touched, missed and extra pages; '' = every page speculated, none missed).
    speculation: str = ""
    #: A node-level client cache of whole storage blocks (GPFS's pagepool), bytes; 0 = none.
    pagepool: int = 0
    #: One core's sustained FLOP rate for training (one rank per core); 0: the workloads'
    #: ``compute_s_per_sample`` (an emulation preset) applies instead.
    core_flops: float = 0.0
    #: A node's memory, bytes: a walk over a file smaller than it finds the pages it passed
    #: earlier in the same iteration in the page cache (0: unknown, nothing assumed cached).
    node_memory: int = 0
    #: A node's page cache keeps what it read across epochs (bounded by ``node_memory``): later
    #: epochs read the cached share from memory (:func:`lmdbio.lab.model.phases.epoch_reuse`).
    epoch_cache: bool = False
    #: Every process of a node reads the pages its own mmap faults touch (GPFS serving mmap apart
    #: from its pagepool, with no read shared between a node's processes); False: a node's
    #: processes share each page's read (Linux's page cache, measured on this kernel).
    mmap_per_process: bool = False
    #: The storage servers cache what one walker read, so the other walkers' reads of the same
    #: leaf pages in the iteration are served at the first walker's pace (a controller's cache).
    server_cache: bool = False
    #: ``((parameter, value), ...)``: storage-profile values that replace the profile's (an
    #: estimate at one end of its range).
    storage_overrides: tuple = ()
    #: ``{key: (low, high, why)}`` for the platform's estimates (its ``[ranges]``); ``compute``
    #: applies to every workload.
    ranges: MappingProxyType = field(default_factory=lambda: MappingProxyType({}),
                                     compare=False, repr=False)
    description: str = ""
    sources: MappingProxyType = field(default_factory=lambda: MappingProxyType({}),
                                      compare=False, repr=False)
    path: str = ""
    #: ``{estimate: why}``: estimates of the storage profile held at their central value here
    #: because they move no prediction of this platform's workloads (its ``[pinned]``).
    pinned: MappingProxyType = field(default_factory=lambda: MappingProxyType({}),
                                     compare=False, repr=False)

    def workload(self, name: str) -> Workload:
        for w in self.workloads:
            if w.name == name:
                return w
        raise ConfigurationError(f"platform {self.name!r} has no workload {name!r}; it has "
                                 f"{', '.join(w.name for w in self.workloads)}")

    def compute_s(self, workload: Workload) -> float:
        """Seconds of training per sample: the workload's FLOPs over a core's sustained rate when
        both are given, else the workload's ``compute_s_per_sample``."""
        if self.core_flops > 0 and workload.flops_per_sample > 0:
            return workload.flops_per_sample / self.core_flops
        return workload.compute_s_per_sample

    def with_(self, **kw) -> Platform:
        return replace(self, **kw)


def list_platforms() -> list[str]:
    """Names of the platform files shipped in ``lmdbio/lab/platforms/``."""
    return sorted(p.stem for p in PLATFORM_DIR.glob("*.toml"))


def _ranges(raw: dict, where: str) -> MappingProxyType:
    out = {}
    for key, r in dict(raw).items():
        if not isinstance(r, dict) or not {"low", "high", "why"} <= set(r):
            raise ConfigurationError(f"{where}: the range of {key!r} needs low, high and why")
        out[key] = (r["low"], r["high"], str(r["why"]))
    return MappingProxyType(out)


def _workload(raw: dict, where: str) -> Workload:
    try:
        name = str(raw["name"])
        w = Workload(
            name=name, record_bytes=int(raw["record_bytes"]), key_bytes=int(raw.get("key_bytes", 35)),
            records=int(raw.get("records", 0)), batch_size=int(raw.get("batch_size", 0)),
            batch_per_process=int(raw.get("batch_per_process", 0)),
            iterations=int(raw.get("iterations", 1)),
            compute_s_per_sample=parse_compute_time(raw.get("compute", 0.0)),
            model_bytes=parse_model_bytes(raw.get("model", 0)), batch=str(raw.get("batch", "")),
            flops_per_sample=float(raw.get("flops_per_sample", 0.0)),
            ranges=_ranges(raw.get("ranges", {}), f"{where}: workload {name!r}"),
            sources=MappingProxyType(dict(raw.get("sources", {}))))
    except KeyError as exc:
        raise ConfigurationError(f"{where}: a [[workload]] lacks {exc.args[0]!r}") from None
    if w.batch_size <= 0 and w.batch_per_process <= 0:
        raise ConfigurationError(f"{where}: workload {w.name!r} needs batch_size (global) or "
                                 "batch_per_process (weak scaling), or both with batch = ...")
    if w.batch_size > 0 and w.batch_per_process > 0 and not raw.get("batch"):
        raise ConfigurationError(f"{where}: workload {w.name!r} gives both batch_size and "
                                 "batch_per_process: say which applies with batch = \"global\" "
                                 "or \"per-process\"")
    if w.batch not in BATCH_READINGS:
        raise ConfigurationError(f"{where}: workload {w.name!r}: batch must be one of "
                                 f"{', '.join(BATCH_READINGS)}, not {w.batch!r}")
    w.reading(w.batch)   # the chosen reading has its batch
    if w.record_bytes <= 0 or w.iterations <= 0 or w.records < 0:
        raise ConfigurationError(f"{where}: workload {w.name!r} needs record_bytes > 0, "
                                 "iterations > 0 and records >= 0")
    return w


#: Platform fields without a default of their own, and the value a platform file may leave out.
_DEFAULTS = {"readers_per_node": 1, "storage_time_scale": 1.0, "cache": "cold", "net_alpha_s": 0.0,
             "net_beta_s": 0.0, "coalesce_bytes": 4 << 20, "stagger_size": 0}


def _memory(v) -> int:
    """``node_memory``: bytes, or "this machine" (its physical memory, os.sysconf)."""
    if v == "this machine":
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    if isinstance(v, str):
        raise ConfigurationError(f"node_memory must be bytes or \"this machine\", not {v!r}")
    return int(v)


def load_platform(name_or_path: str | os.PathLike) -> Platform:
    """A platform by name (``bebop``, ``this-machine``) or from a TOML file path."""
    if tomllib is None:  # pragma: no cover
        raise ConfigurationError("reading platform files needs Python 3.11 (tomllib)")
    p = Path(name_or_path)
    if not p.suffix:
        p = PLATFORM_DIR / f"{name_or_path}.toml"
    if not p.exists():
        raise ConfigurationError(f"no platform {str(name_or_path)!r}: give a TOML file or one of "
                                 f"{', '.join(list_platforms())} (lmdbio/lab/platforms/)")
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{p}: not valid TOML ({exc})") from None
    where = str(p)
    try:
        # Every field with a plain default is read as its type; the others below.
        kw = {f.name: type(f.default)(raw.get(f.name, f.default)) for f in fields(Platform)
              if isinstance(f.default, (bool, int, float, str)) and f.name not in ("node_memory", "path")}
        kw.update({k: type(d)(raw.get(k, d)) for k, d in _DEFAULTS.items()})
        plat = Platform(
            **kw, name=str(raw.get("name", p.stem)), ranks_per_node=int(raw["ranks_per_node"]),
            cores_per_node=int(raw["cores_per_node"]), storage=str(raw["storage"]),
            workloads=tuple(_workload(w, where) for w in raw.get("workload", [])),
            node_memory=_memory(raw.get("node_memory", 0)), ranges=_ranges(raw.get("ranges", {}), where),
            sources=MappingProxyType(dict(raw.get("sources", {}))), path=where,
            pinned=MappingProxyType({str(k): str(v) for k, v in dict(raw.get("pinned", {})).items()}))
    except KeyError as exc:
        raise ConfigurationError(f"{where}: lacks {exc.args[0]!r}") from None
    if plat.ranks_per_node < 0 or plat.cores_per_node < 0 or plat.readers_per_node < 1:
        raise ConfigurationError(f"{where}: ranks_per_node and cores_per_node must be >= 0 and "
                                 "readers_per_node >= 1")
    if plat.cache not in ("cold", "warm"):
        raise ConfigurationError(f"{where}: cache must be 'cold' or 'warm', not {plat.cache!r}")
    if not (math.isfinite(plat.explicit_inflight)
            and (plat.explicit_inflight == 0 or plat.explicit_inflight >= 1)):
        raise ConfigurationError(f"{where}: explicit_inflight must be 0 (from the calibration) or "
                                 f"a number >= 1, not {plat.explicit_inflight!r}")
    if not (plat.core_flops >= 0 and plat.node_memory >= 0):
        raise ConfigurationError(f"{where}: core_flops (FLOP/s) and node_memory (bytes) must be >= 0 "
                                 "(0: not given)")
    if plat.pagepool < 0:
        raise ConfigurationError(f"{where}: pagepool must be >= 0 bytes (0: no client cache)")
    if not (math.isfinite(plat.storage_time_scale) and plat.storage_time_scale > 0):
        raise ConfigurationError(f"{where}: storage_time_scale must be a positive number")
    return plat
