"""Engine-side experiments the notebooks run on an :class:`~lmdbio.lab.cluster.MPICluster`.

Each ``func(comm, ...)`` here runs on a sub-communicator of the engines
(LMDB is opened on the engines only); the ``cluster``-taking helpers split a
list of points by process count and run them there.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lmdbio.errors import LmdbioError

if TYPE_CHECKING:
    from .cluster import MPICluster

__all__ = ["engine_info", "check_shared_memory", "ensure_dataset", "ensure_datasets", "page_types",
           "describe_dataset", "describe_datasets", "by_nprocs", "sweep", "reader_timeline",
           "sweep_timelines", "prov_model_table", "pfs_unavailable", "emulated_pfs",
           "throttle_unavailable", "throttle_iters", "throttled_device", "setting_table",
           "settings_results", "model_series"]


# --- engine-side checks (notebook 00) -----------------------------------------------------------

def engine_info(comm) -> dict:
    """Where this rank runs: host, pid, rank, CPU affinity, Python/MPI/LMDB versions, Slurm node."""
    import lmdb
    import mpi4py
    from mpi4py import MPI

    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return {
        "rank": comm.Get_rank(), "size": comm.Get_size(), "host": socket.gethostname(),
        "pid": os.getpid(), "cpus": ",".join(map(str, affinity)),
        "python": sys.version.split()[0], "mpi4py": mpi4py.__version__,
        "mpi_library": MPI.Get_library_version().splitlines()[0].strip(),
        "mpi_standard": "%d.%d" % MPI.Get_version(), "py_lmdb": lmdb.__version__,
        "liblmdb": ".".join(map(str, lmdb.version())),
        # On Slurm: the node as Slurm names it (two "nodes" may share a hostname).
        "slurm_node": os.environ.get("SLURMD_NODENAME", ""),
        "slurm_job": os.environ.get("SLURM_JOB_ID", ""),
    }


def check_shared_memory(comm, nbytes: int = 1 << 20) -> dict:
    """MPI-3 shared memory: each rank writes its rank into its slice, every rank reads all.

    This is the mechanism of LMDBIO-LMM (``MPI_Win_allocate_shared`` on the
    ``MPI_COMM_TYPE_SHARED`` communicator). Returns this rank's view: node
    size, whether all slices were visible, and the bandwidth of one
    memcpy-sized read of a neighbour's slice.
    """
    import numpy as np
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        # One segment owned by node rank 0 (as LMDBIO's reader owns the batch buffer).
        size = nbytes * node.Get_size() if node.Get_rank() == 0 else 0
        win = MPI.Win.Allocate_shared(size, 1, comm=node)
        try:
            buf, _ = win.Shared_query(0)
            whole = np.frombuffer(buf, dtype=np.uint8, count=nbytes * node.Get_size())
            mine = whole[node.Get_rank() * nbytes:(node.Get_rank() + 1) * nbytes]
            win.Fence()
            mine[:] = node.Get_rank() % 251
            win.Fence()
            node.Barrier()
            seen = [int(whole[r * nbytes]) for r in range(node.Get_size())]
            ok = seen == [r % 251 for r in range(node.Get_size())]
            nxt = (node.Get_rank() + 1) % node.Get_size()
            t0 = time.perf_counter()
            copy = whole[nxt * nbytes:(nxt + 1) * nbytes].copy()
            dt = time.perf_counter() - t0
            ok = ok and bool(copy[0] == nxt % 251)
            win.Fence()
        finally:
            win.Free()
        return {"rank": comm.Get_rank(), "node_rank": node.Get_rank(), "node_size": node.Get_size(),
                "host": socket.gethostname(), "all_slices_visible": ok,
                "copy_gb_per_s": nbytes / dt / 1e9 if dt > 0 else float("nan")}
    finally:
        node.Free()


# --- engine-side dataset tasks (notebook 01 and every notebook's setup) --------------------------

def ensure_dataset(path: str | os.PathLike, preset: str, records: int, **kwargs) -> dict:
    """Make the dataset at ``path`` unless one with ``records`` records is there already.

    Runs where it is called (call it on an engine: it opens LMDB). Returns
    ``{"path", "records", "bytes", "made"}``.
    """
    from lmdbio import format as fmt
    from lmdbio.datasets import make_dataset

    path = Path(path)
    made = False
    data = path / "data.mdb"
    if data.exists():
        try:
            have = fmt.read_meta(data).entries
        except LmdbioError:
            have = -1
        if have != records:
            make_dataset(path, preset, records, force=True, **kwargs)
            made = True
    else:
        make_dataset(path, preset, records, **kwargs)
        made = True
    if kwargs.get("provenance", True):
        from lmdbio.provenance import provenance_status, write_provenance

        # A sidecar from an older schema or an edited database is rewritten, not trusted.
        if provenance_status(path) != "present":
            write_provenance(path)
    return {"path": str(path), "records": records, "bytes": data.stat().st_size, "made": made}


def _ensure_on_rank(comm, specs: list[dict]) -> list[dict]:
    # Datasets are made by rank 0 of the sub-communicator; others wait.
    out = [ensure_dataset(**s) for s in specs] if comm.Get_rank() == 0 else None
    return comm.bcast(out, root=0)


def ensure_datasets(cluster: "MPICluster", specs: list[dict]) -> list[dict]:
    """Make each ``{"path", "preset", "records", ...}`` dataset on engine rank 0 (LMDB on engines only)."""
    return cluster.run(_ensure_on_rank, 1, specs)[0]


def page_types(path: str | os.PathLike):
    """Type of every page of ``data.mdb``: a DataFrame (pgno, type) with meta/branch/leaf/overflow/free.

    Branch pages are those reached from the root; leaf and overflow pages come
    from the record index; every other page (freed by copy-on-write at a
    commit, or never used) is ``free``.
    """
    import numpy as np
    import pandas as pd

    from lmdbio import format as fmt
    from lmdbio.recordindex import build_index

    f = fmt.db_file(path)
    index = build_index(f)
    meta = index.meta
    n = meta.last_pgno + 1
    kind = np.full(n, "free", dtype=object)
    kind[:2] = "meta"
    kind[index.leaf_pgnos] = "leaf"
    ov = index.overflow
    first = (index.offsets[ov] // meta.psize).astype(np.int64)
    count = fmt.overflow_pages(index.sizes[ov].astype(np.int64), meta.header_size, meta.psize)
    run = np.repeat(first, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
    kind[run] = "overflow"
    if meta.root is not None and meta.depth > 1:
        fd = os.open(f, os.O_RDONLY)
        try:
            level = [int(meta.root)]
            for _ in range(meta.depth - 1):
                kind[level] = "branch"
                nxt = []
                for pg in level:
                    nxt.extend(fmt.branch_children(fmt.read_page(fd, meta, pg), meta, pg).tolist())
                level = nxt
        finally:
            os.close(fd)
    return pd.DataFrame({"pgno": np.arange(n), "type": kind})


def describe_dataset(path: str | os.PathLike, name: str) -> dict:
    """Pages, record sizes and a summary of one dataset, as tables for the results files."""
    import pandas as pd

    from lmdbio.recordindex import build_index
    from lmdbio.info import describe

    pages = page_types(path)
    pages.insert(0, "dataset", name)
    index = build_index(path)
    records = pd.DataFrame({"dataset": name, "record": range(len(index)),
                            "offset": index.offsets, "size": index.sizes})
    info = describe(path)
    summary = {"dataset": name, "path": str(path), "entries": info["entries"],
               "depth": info["depth"], "page_size": info["page_size"],
               "file_bytes": info["file_size"], "value_bytes": info["value_bytes"],
               **{f"{k}_pages": v for k, v in info["pages"].items() if k in
                  ("branch", "leaf", "overflow", "free_or_other_db")}}
    return {"pages": pages, "records": records, "summary": summary}


def _describe_on_rank(comm, datasets: dict) -> dict | None:
    if comm.Get_rank() != 0:
        return None
    return {name: describe_dataset(path, name) for name, path in datasets.items()}


def describe_datasets(cluster: "MPICluster", datasets: dict) -> dict:
    """:func:`describe_dataset` for ``{name: path}`` on engine rank 0."""
    return cluster.run(_describe_on_rank, 1, datasets)[0]


# --- sweeps of bench points ---------------------------------------------------------------------

def _run_points(comm, points: list[dict]) -> list[dict]:
    from .bench import run_point

    rows: list[dict] = []
    for p in points:
        with _in_node(comm, p.get("storage")):
            rows.extend(run_point(comm, **p))
    return rows


@contextlib.contextmanager
def _in_node(comm, storage):
    """On a throttled device, this engine reads from its node's cgroup for the point, then leaves.

    Engines outlive the point, so they must not stay in a node's cgroup (its
    throttle would follow them, and the cgroup could not be removed).
    """
    if storage is None or not storage.is_throttle:
        yield
        return
    storage.enter_node(comm)
    try:
        yield
    finally:
        storage.leave_node()


def by_nprocs(cluster: "MPICluster", func, points: list[dict], progress: bool) -> list[dict]:
    """Run ``func(comm, points)`` once per process count, on that many engines."""
    by_p: dict[int, list[dict]] = {}
    for p in points:
        q = dict(p)
        by_p.setdefault(int(q.pop("nprocs")), []).append(q)
    rows: list[dict] = []
    for nprocs, pts in by_p.items():
        # Repeats interleaved: every variant's repeat r runs before any repeat r + 1, so a
        # slow spell of the machine hits all variants alike instead of one variant's repeats.
        pts.sort(key=lambda q: q.get("repeat", 0))
        t0 = time.monotonic()
        rows.extend(cluster.run_root(func, nprocs, pts))
        if progress:
            print(f"P={nprocs}: {len(pts)} points in {time.monotonic() - t0:.1f} s", flush=True)
    return rows


def sweep(cluster: "MPICluster", points: list[dict], *, progress: bool = True) -> list[dict]:
    """Run :func:`lmdbio.lab.bench.run_point` for each point dict (which holds ``nprocs``) on the engines.

    Points with the same ``nprocs`` run in one call on one sub-communicator,
    in the order given. The sidecars of PROV points are checked and stamped
    once first, untimed, as a user's prepared dataset is (``lmdbio index
    --verify``); their rows carry that cost as ``prov_verify_s``. Returns
    every point's rows (rank 0's gathered rows).
    """
    from .bench.settings import verify_provenance_ahead, with_prov_verify

    ahead = verify_provenance_ahead(points)
    return with_prov_verify(by_nprocs(cluster, _run_points, points, progress), ahead)


# --- engine-side experiments the bench does not cover -------------------------------------------

def reader_timeline(comm, dataset, variant: str, batch_size: int, iters: int, *, cache: str = "cold",
                    warmup: int = 1, ranks_per_node: int | None = None, readers_per_node: int = 1,
                    coalesce_bytes: int | None = None, stagger_size: int | None = None,
                    storage=None, repeat: int = 0) -> list[dict]:
    """Per-batch, per-phase Reader rows of ``iters`` timed batches, gathered on rank 0.

    Unlike :func:`lmdbio.lab.bench.run_point` (which sums phases over batches),
    this keeps every (rank, batch, phase) row with its monotonic start and end,
    for read timelines (STAG) and request-size sweeps (COAL's
    ``coalesce_bytes``). Timed by :func:`lmdbio.lab.bench.timed.time_batches`:
    ``warmup`` batches (rounded up to whole chunks), then the cache made
    ``cold`` (the file evicted on every node view) or ``warm`` (read once),
    then the timed batches. Every row carries ``variant``, ``nprocs``,
    ``coalesce_bytes``, ``stagger_size``, ``repeat``, the timed ``wall_s_total``
    (the slowest rank's), ``records`` and ``record_bytes`` (over all ranks) and
    ``resident_fraction`` (of the file, when the timed batches start).
    ``storage`` (a :class:`lmdbio.lab.bench.settings.Storage`, as
    :func:`emulated_pfs` sets it) reads through an emulated PFS's node views.
    """
    from mpi4py import MPI

    from .bench.cache import PageCache
    from .bench.settings import Storage
    from .bench.timed import ReaderSource, time_batches
    from lmdbio.reader import Reader

    storage = storage or Storage()
    page_cache = PageCache(comm, storage, dataset, cache)
    with Reader(storage.reader_path(dataset), batch_size, comm, variant, ranks_per_node,
                readers_per_node, coalesce_bytes=coalesce_bytes, stagger_size=stagger_size) as reader:
        timing = time_batches(comm, ReaderSource(reader), iters, warmup, cache=page_cache)
        rows = [dict(r) for r in timing.window(reader.stats())]
        is_reader = bool(reader.is_reader)
        opts = reader.options
    wall = comm.allreduce(timing.wall, op=MPI.MAX)
    records = comm.allreduce(timing.records)
    nbytes = comm.allreduce(timing.nbytes)
    point = {"variant": variant, "nprocs": comm.Get_size(), "cache": cache, "repeat": repeat,
             "batch_size": batch_size, "iters": iters,
             "coalesce_bytes": opts.coalesce_bytes, "stagger_size": opts.stagger_size,
             "ranks_per_node": ranks_per_node or 0, "readers_per_node": readers_per_node,
             "wall_s_total": wall, "records": records, "record_bytes": nbytes,
             "resident_fraction": page_cache.resident, "storage": storage.spec}
    for r in rows:
        r.update(point, is_reader=is_reader)
        for k, v in list(r.items()):
            if hasattr(v, "item"):
                r[k] = v.item()
    gathered = comm.gather(rows, root=0)
    return [r for rank_rows in gathered for r in rank_rows] if comm.Get_rank() == 0 else []


def _timelines(comm, points: list[dict]) -> list[dict]:
    rows: list[dict] = []
    for p in points:
        rows.extend(reader_timeline(comm, **p))
    return rows


def sweep_timelines(cluster: "MPICluster", points: list[dict], *, progress: bool = True) -> list[dict]:
    """:func:`reader_timeline` for each point dict (holding ``nprocs``), like :func:`sweep`."""
    return by_nprocs(cluster, _timelines, points, progress)


def prov_model_table(path: str | os.PathLike, commit_every: int | None = 1000):
    """PROV's arithmetic offsets next to the true ones from the index walk (a DataFrame).

    Columns: record, true_offset, model_offset (with the writer's commit
    interval), model_single_txn_offset (as if one transaction wrote all),
    commit_every, record_bytes, key_bytes.
    """
    import numpy as np
    import pandas as pd

    from lmdbio.recordindex import build_index
    from .prov_offsets import arithmetic_offsets

    index = build_index(path)
    meta = index.meta
    n = len(index)
    # The model needs one record size; Datums differ by a byte or two (the label's
    # varint), which changes no page count, so the largest stands for all.
    rec = int(index.sizes.max())
    key = len(index.keys(0, 1)[0])
    kw = dict(record_bytes=rec, psize=meta.psize, header_size=meta.header_size, key_bytes=key,
              first_leaf_page=int(index.leaf_pgnos[0]))
    with_commits = arithmetic_offsets(n, commit_every=commit_every, **kw)
    single = arithmetic_offsets(n, commit_every=None, **kw)
    return pd.DataFrame({"record": np.arange(n), "true_offset": index.offsets.astype(np.int64),
                         "model_offset": with_commits.astype(np.int64),
                         "model_single_txn_offset": single.astype(np.int64),
                         "commit_every": commit_every or 0, "record_bytes": rec, "key_bytes": key})


# --- the settings of a claim notebook: local disk, emulated GPFS, throttled, shared, the model-----------

#: Set to 1 to run the notebooks as on a machine without FUSE (their GPFS panels are replotted).
NO_PFS_ENV = "LMDBIO_NO_PFS"


def pfs_unavailable() -> str | None:
    """Why an emulated PFS cannot be mounted here (one sentence), or None when it can."""
    if os.environ.get(NO_PFS_ENV, "") not in ("", "0"):
        return f"${NO_PFS_ENV} is set (unset it to measure through the emulated GPFS)"
    try:
        from .pfs.mount import check_fuse

        check_fuse()
    except LmdbioError as exc:
        return str(exc)
    return None


def _with_ranks_per_node(points: list[dict], ranks_per_node: int | None) -> list[dict]:
    """Copies of the points; a point without its own ``ranks_per_node`` takes ``ranks_per_node``."""
    return [{**p, "ranks_per_node": p.get("ranks_per_node") or ranks_per_node} for p in points]


@contextlib.contextmanager
def emulated_pfs(datasets_root: str | os.PathLike, points: list[dict], profile: str = "gpfs-2017",
                 ranks_per_node: int | None = None):
    """Mount ``datasets_root`` as an emulated PFS; yield the points rewritten to read through it.

    Each point keeps its ``ranks_per_node`` (or takes ``ranks_per_node``):
    ranks ``[k*rpn, (k+1)*rpn)`` form virtual node ``k`` and read through
    that node's view, with its own page cache, so a cold point evicts every
    node. The mount has as many node views as the widest point needs and is
    gone after the block (also if the client dies).
    """
    from . import pfs
    from .bench.settings import Storage

    pts = _with_ranks_per_node(points, ranks_per_node)
    nodes = max(math.ceil(q["nprocs"] / q["ranks_per_node"]) if q.get("ranks_per_node") else 1
                for q in pts)
    root = Path(datasets_root).resolve()
    with pfs.mounted(root, profile=profile, nodes=nodes) as m:
        for q in pts:
            rel = str(Path(q["dataset"]).resolve().relative_to(root))
            q["storage"] = Storage(f"pfs:{profile}", m.mnt, rel, q.get("ranks_per_node"))
        yield pts


def throttle_iters(cfg: dict, dataset: str) -> int:
    """Timed iterations of a throttled-device point of ``dataset``: ``pfs_iters``,
    raised to the scale's ``throttle_iters[dataset]`` where that is larger."""
    return max(int(cfg["pfs_iters"]), int(cfg.get("throttle_iters", {}).get(dataset, 0)))


def throttle_unavailable(cfg: dict | None = None) -> str | None:
    """Why throttled loop devices cannot be used here (one sentence), or None when they can.

    With ``cfg`` (a notebook's settings), an empty ``throttle_procs`` is a reason too.
    """
    if cfg is not None and not cfg.get("throttle_procs"):
        return f"the {cfg.get('scale', '?')} scale runs no throttled points here (throttle_procs is empty)"
    from .storage import throttle_available

    ok, why = throttle_available()
    return None if ok else why


@contextlib.contextmanager
def throttled_device(datasets_root: str | os.PathLike, points: list[dict], profile: str = "gpfs-2017",
                     ranks_per_node: int | None = None):
    """Put the points' datasets on throttled loop devices; yield the points rewritten to read there.

    The throttled twin of :func:`emulated_pfs`: one read-only loop device,
    mount and blkio cgroup per virtual node of ``ranks_per_node`` ranks
    (:func:`lmdbio.lab.storage.throttled`), each node's budget a share of the
    profile's client; each rank joins its node's cgroup for the point. Only
    the datasets the points read go on the image. Everything is gone after
    the block.
    """
    from .bench.settings import Storage
    from .storage import throttled

    pts = _with_ranks_per_node(points, ranks_per_node)
    rpn = {q["ranks_per_node"] for q in pts}
    if len(rpn) != 1 or None in rpn:
        raise ValueError(f"throttled points need one ranks_per_node (it sets each node's share), got {rpn}")
    rpn = rpn.pop()
    nodes = max(math.ceil(q["nprocs"] / rpn) for q in pts)
    dirs = sorted({str(Path(q["dataset"]).resolve()) for q in pts})
    with throttled(dirs, nodes=nodes, profile=profile, ranks_per_node=rpn) as t:
        for q in pts:
            q["storage"] = Storage(f"throttle:{profile}", t.mnt, Path(q["dataset"]).resolve().name,
                                   rpn, t.state_file)
        yield pts


def setting_table(folder: str | os.PathLike):
    """One setting's throughput per variant and P: median, min and max over the repeats.

    Reads ``summary.csv`` (a sweep) or ``rows.csv`` (timelines: records over
    the point's wall time, per coalescing and stagger size).
    """
    import pandas as pd

    folder = Path(folder)
    if (folder / "summary.csv").exists():
        df = pd.read_csv(folder / "summary.csv")
        df = df[df["status"] == "ok"] if "status" in df else df
        keys = ["variant", "nprocs"]
    else:
        rows = pd.read_csv(folder / "rows.csv")
        keys = [k for k in ("variant", "nprocs", "coalesce_bytes", "stagger_size") if k in rows]
        point = keys + [k for k in ("cache", "repeat") if k in rows]
        df = rows.groupby(point, dropna=False).agg(records=("records", "first"),
                                                    wall=("wall_s_total", "max")).reset_index()
        df["records_per_s"] = df["records"] / df["wall"]
    cols = {"records_per_s": ["median", "min", "max", "size"]}
    if "speedup_vs_lmdb" in df:
        cols["speedup_vs_lmdb"] = ["median", "min", "max"]
    table = df.groupby(keys, dropna=False).agg(cols)
    table.columns = [f"{a}_{b}" if b != "size" else "repeats" for a, b in table.columns]
    return table


def settings_results(results: str | os.PathLike, name: str, *, ran: bool) -> Path:
    """The folder a setting's results are read from: ``results/name``, else the committed copy.

    ``results`` is the notebook's results folder (``results_root/NN_name``).
    When nothing was written there (``ran`` False and no results), the
    committed ``data/results/NN_name/name`` is used and a line says so
    (:func:`lmdbio.lab.claims.resolve` decides, as it does for the verdicts).
    """
    from .claims import resolve
    from .scales import REPO

    results = Path(results)
    d, source = resolve(results.parent, results.name, name, fallback=not ran)
    if source == "committed":
        print(f"{name}: replotted from the committed results in {d.relative_to(REPO)}")
    return d


def model_series(out_dir: str | os.PathLike, variants, workloads, cfg: dict, *,
                 results_root: str | os.PathLike | None = None) -> Path:
    """Predict ``variants`` x ``workloads`` at ``cfg["model_procs"]`` on ``cfg["model_platform"]``.

    Uses the calibration in ``results_root/model_calibration`` when there
    (notebook 11 writes it), else the committed one; writes
    ``out_dir/predictions.csv`` and ``meta.json`` (calibration and platform
    sources included). Pure Python: no MPI, no FUSE, seconds.
    """
    from .model import load_calibration, load_platform, predict, write_predictions
    from .scales import COMMITTED_RESULTS

    cal_dir = Path(results_root or COMMITTED_RESULTS) / "model_calibration"
    if not (cal_dir / "calibration.json").exists():
        cal_dir = COMMITTED_RESULTS / "model_calibration"
    cal = load_calibration(cal_dir)
    plat = load_platform(cfg["model_platform"])
    rows = predict(plat, cfg["model_procs"], list(variants), workloads=list(workloads), cal=cal,
                   budget=cfg["model_budget"])
    write_predictions(rows, out_dir, {**cfg, "variants": list(variants),
                                      "workloads": list(workloads)}, plat, cal, cal_dir)
    return Path(out_dir)
