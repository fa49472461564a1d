"""Engine-side experiments beyond the papers (notebook 12): epochs, shuffled epochs, prefetch, decoding.

Each ``func(comm, ...)`` is collective on a sub-communicator of the engines
(LMDB is opened there only) and returns its rows on rank 0, ``[]``
elsewhere; :func:`sweep` runs a list of point dicts (each with ``nprocs``
and ``experiment``, one of :data:`EXPERIMENTS`) on an
:class:`~lmdbio.lab.cluster.MPICluster`, like :func:`lmdbio.lab.experiments.sweep`.
A point's ``storage`` (set by :func:`lmdbio.lab.experiments.emulated_pfs`)
makes it read through the emulated PFS's node views. :func:`verdicts`
judges the issue's targets from the results with :func:`lmdbio.lab.claims.direction`.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .cluster import MPICluster

__all__ = ["EXPERIMENTS", "TARGETS", "SHARE", "epoch_check", "epoch_rate", "overlap", "decode_rate", "sweep",
           "verdicts"]


def _storage(storage):
    from .bench.settings import Storage

    return storage or Storage()


# --- epochs: every record exactly once, checked from the keys ------------------------------------

def _file_records(path) -> tuple[list[bytes], np.ndarray]:
    """Every key of the file in order and the CRC-32 of its value (one cursor walk, rank 0)."""
    from lmdbio.lmdbenv import acquire

    h = acquire(path)
    try:
        with h.env.begin(buffers=True) as txn:
            keys, crcs = [], []
            for k, v in txn.cursor():
                keys.append(bytes(k))
                crcs.append(zlib.crc32(v))
    finally:
        h.release()
    return keys, np.asarray(crcs, np.uint32)


def _mode(shuffle: bool | str) -> str:
    """The results' ``shuffle_mode`` column: ``"window"``, ``"shard"`` or ``""`` (file order)."""
    from lmdbio.pipeline import EpochPlan

    return EpochPlan(shuffle).mode or ""


def epoch_check(comm, dataset, variant: str, batch_size: int, *, last_batch: str = "short",
                shuffle: bool | str = False, epochs: int = 2, seed: int = 0, storage=None,
                **_) -> list[dict]:
    """Read ``epochs`` whole epochs; on rank 0 check the delivered records against the file.

    Each rank records the position and a CRC-32 of every record it was
    given; rank 0 maps positions to the file's keys (its own cursor walk) and
    checks, per epoch: how many records were delivered, how many distinct
    keys, which keys are missing or repeated, and whether every value is the
    one stored under its key. ``exactly_once`` is all of these at once.
    ``epoch_correlation`` is the correlation of each record's position in
    this epoch's delivered order with epoch 0's (1: the same order).
    """
    from lmdbio.reader import Reader
    from .shuffle_quality import position_correlation

    storage = _storage(storage)
    per_epoch = []
    with Reader(storage.reader_path(dataset), batch_size, comm, variant, storage.ranks_per_node,
                shuffle=shuffle, seed=seed, last_batch=last_batch, measure=False) as r:
        for e in range(epochs):
            idx, crc = [], []
            for b in r.epoch(e):
                idx.append(np.array(b.indices, np.int64))
                crc.append(np.fromiter((zlib.crc32(v) for v in b), np.uint32, len(b)))
            per_epoch.append((idx, crc))
        used = r.variant
    gathered = comm.gather(per_epoch, root=0)
    if comm.rank != 0:
        return []
    keys, file_crc = _file_records(storage.rank_file(comm, dataset))
    n = len(keys)
    rows, first = [], None
    for e in range(epochs):
        nb = len(gathered[0][e][0])
        # The global order: batch by batch, rank by rank (each rank's share is a block of it).
        idx = np.concatenate([gathered[q][e][0][t] for t in range(nb) for q in range(comm.size)])
        crc = np.concatenate([gathered[q][e][1][t] for t in range(nb) for q in range(comm.size)])
        delivered = [keys[i] for i in idx]
        distinct = len(set(delivered))
        last = sum(len(gathered[q][e][0][-1]) for q in range(comm.size))
        first = idx if first is None else first
        rows.append({
            "variant": variant, "variant_used": used, "nprocs": comm.size, "shuffle": bool(shuffle),
            "shuffle_mode": _mode(shuffle),
            "last_batch": last_batch, "epoch": e, "records": n, "batch_size": batch_size,
            "batches": nb, "last_batch_records": last, "delivered": len(idx), "distinct_keys": distinct,
            "missing": n - distinct, "repeated": len(idx) - distinct,
            "value_mismatches": int((file_crc[idx] != crc).sum()),
            "exactly_once": bool(len(idx) == n == distinct and (file_crc[idx] == crc).all()),
            "epoch_correlation": (position_correlation(first, idx)
                                  if len(idx) == len(first) == n == distinct else float("nan")),
        })
    return rows


# --- throughput of an epoch's batches: shuffled, unshuffled, per-record gets ----------------------

def _first_batch(r) -> None:
    """Read one batch of epoch 0 (it builds the locators' tables of every record) and stop."""
    it = r.epoch(0)
    next(it)
    it.close()


def epoch_rate(comm, dataset, variant: str, batch_size: int, iters: int, *, shuffle: bool | str,
               cache: str = "warm", repeat: int = 0, storage=None, coalesce_bytes: int | None = None,
               from_start: bool = False, **_) -> list[dict]:
    """Records/s of ``iters`` batches of a (shuffled) epoch, past its start: one row on rank 0.

    One batch of epoch 0 is read untimed (it builds the locator's table of
    every record); epoch 1 is started and its first chunk (``k`` batches) read
    untimed too: starting an epoch computes its order once (tens of ms for a
    shuffled 60,000-record epoch), a per-epoch cost that would dominate a
    short window. Then the cache is made ``warm`` (the file read) or ``cold``
    (evicted on every node view) and the next ``iters`` batches are timed
    between barriers (fewer where the epoch ends first). ``from_start``: the
    clock starts before epoch 1 does, so its first chunk (and the window
    stage's first window) is timed like every later one.
    """
    from mpi4py import MPI

    from .bench.cache import PageCache
    from .bench.timed import ReaderSource, time_batches
    from lmdbio.reader import Reader

    storage = _storage(storage)
    page_cache = PageCache(comm, storage, dataset, cache)
    with Reader(storage.reader_path(dataset), batch_size, comm, variant, storage.ranks_per_node,
                shuffle=shuffle, measure=False, coalesce_bytes=coalesce_bytes) as r:
        _first_batch(r)
        used, k = r.variant, r.coalesce
        with ReaderSource(r, epoch=1) as epoch:
            timing = time_batches(comm, epoch, iters, 0 if from_start else k, cache=page_cache)
    wall = comm.allreduce(timing.wall, op=MPI.MAX)
    records = comm.allreduce(timing.records)
    if comm.rank != 0:
        return []
    return [{"variant": variant, "variant_used": used, "coalesce": k, "shuffle": bool(shuffle),
             "shuffle_mode": _mode(shuffle),
             "nprocs": comm.size, "cache": cache, "storage": storage.spec, "batch_size": batch_size,
             "iters": iters, "repeat": repeat, "records": records, "wall_s": wall,
             "records_per_s": records / wall}]


# --- overlap: the I/O share of an iteration with prefetch ----------------------------------------

def _iterate(comm, r, page_cache, iters: int, train=None) -> dict:
    """Times of ``iters`` batches of epoch 1 on this rank, the cache made ``page_cache``'s first:
    ``wall``, ``wait`` (in ``next()``), ``compute``, ``allreduce``, and ``steady_wall`` /
    ``steady_wait`` from batch ``k`` on (after the epoch's first chunk, which no prefetch can
    read ahead of: it is asked for at once)."""
    from .bench.timed import ReaderSource, time_batches

    with ReaderSource(r, epoch=1) as epoch:
        t = time_batches(comm, epoch, iters, cache=page_cache, train=train)
    batches = t.batches
    k = min(r.coalesce, iters - 1)
    t_end = t.total["t_end"]
    return {"wall_s": t.wall, "io_wait_s": t.read_s, "compute_s": t.compute_s,
            "comm_s": t.comm_s, "steady_batches": iters - k,
            "steady_wall_s": t_end - batches[k]["t_start"],
            "steady_io_wait_s": sum(b["read_s"] for b in batches[k:])}


def overlap(comm, dataset, variant: str, batch_size: int, iters: int, depths=(0, 1, 2), *,
            compute_factor: float = 1.5, compute_time=None, model_bytes=0, cache: str = "cold",
            repeat: int = 0, storage=None, coalesce_bytes: int | None = None, **_) -> list[dict]:
    """The I/O share of a training iteration (wait in ``next()`` / wall) per prefetch depth.

    Compute is emulated per batch by ``sleep``. Without ``compute_time``, it
    is ``compute_factor`` times the I/O time of a batch, measured first by
    an epoch with no compute and depth 0 (the mean wait per batch, slowest
    rank; with COAL one batch in k waits for the chunk); with it (seconds
    per sample or a preset, :mod:`lmdbio.lab.emulation`), it is that, followed
    by an allreduce of ``model_bytes``. Every run reads ``iters`` batches of
    epoch 1, after one batch of epoch 0, from a ``cache`` made after it.
    One row per (rank, depth) on rank 0, the calibration run as depth -1:
    ``io_share`` over all ``iters`` batches, and ``io_share_steady`` past the
    epoch's first chunk (``k`` batches read at once when the epoch starts,
    which no prefetch hides: a per-epoch cost a short window would inflate).
    """
    from mpi4py import MPI

    from .bench.cache import PageCache
    from .bench.timed import sleep_step
    from .emulation import TrainingEmulator
    from lmdbio.reader import Reader

    storage = _storage(storage)
    path = storage.reader_path(dataset)
    page_cache = PageCache(comm, storage, dataset, cache)

    def run(d, train=None):
        with Reader(path, batch_size, comm, variant, storage.ranks_per_node, prefetch=d,
                    measure=False, coalesce_bytes=coalesce_bytes) as r:
            _first_batch(r)
            out = _iterate(comm, r, page_cache, iters, train)
            return out, r.variant, r.coalesce

    rows = []
    compute_s = 0.0
    if compute_time is None:
        t, used, k = run(0)
        compute_s = compute_factor * comm.allreduce(t["io_wait_s"] / iters, op=MPI.MAX)
        rows.append({"depth": -1, **t})
    for d in depths:
        if compute_time is None:
            t, used, k = run(d, sleep_step(compute_s) if compute_s else None)
        else:
            with TrainingEmulator(comm, compute_time, model_bytes) as em:
                t, used, k = run(d, em.step)
        rows.append({"depth": d, **t})
    gathered = comm.gather(rows, root=0)
    if comm.rank != 0:
        return []
    out = []
    for rank, mine in enumerate(gathered):
        for t in mine:
            out.append({"variant": variant, "variant_used": used, "coalesce": k, "nprocs": comm.size,
                        "rank": rank, "cache": cache, "storage": storage.spec,
                        "batch_size": batch_size, "iters": iters, "repeat": repeat,
                        "compute_per_batch_s": (compute_s if compute_time is None
                                                else t["compute_s"] / iters), **t,
                        "io_share": t["io_wait_s"] / t["wall_s"],
                        "io_share_steady": t["steady_io_wait_s"] / t["steady_wall_s"],
                        "au": t["compute_s"] / t["wall_s"]})
    return out


# --- decoding: raw read vs decoded batches vs DALI -----------------------------------------------

def decode_rate(comm, dataset, variant: str, batch_size: int, iters: int, rounds: int = 3,
                storage=None, **_) -> list[dict]:
    """Records/s of ``read_batch()`` (raw), ``read_batch().as_datum_array()`` (decoded) and DALI's
    ``fn.readers.caffe`` on CPU (one thread per rank, where DALI imports), warm.

    Every series runs ``iters`` batches per round, in turn, ``rounds`` times
    (a slow spell of the machine hits all alike); one row per (series,
    round) on rank 0: records over the slowest rank's wall. Where DALI is
    missing, its rows say why in ``error``.
    """
    from mpi4py import MPI

    from .bench.cache import PageCache
    from .bench.timed import ReaderSource, time_batches
    from lmdbio.errors import LmdbioError
    from lmdbio.reader import Reader

    storage = _storage(storage)
    PageCache(comm, storage, dataset, "warm").prepare()
    rows = []
    with Reader(storage.reader_path(dataset), batch_size, comm, variant, storage.ranks_per_node,
                measure=False) as r:
        sources = {"raw": ReaderSource(r), "decoded": ReaderSource(r, decode=True)}
        pipe, why = None, ""
        try:
            from .bench.dali import DaliCaffe

            pipe = DaliCaffe(comm, storage.reader_path(dataset).replace("{node}", "0"), batch_size,
                             threads=1)
            sources["dali-caffe"] = pipe
        except LmdbioError as exc:
            why = str(exc)
        why = comm.bcast(why, root=0)
        for source in sources.values():   # warm the reader, the decoder and DALI
            for _ in range(min(iters, 8)):
                source.read_batch()
        for rnd in range(rounds):
            for name, source in sources.items():
                wall = comm.allreduce(time_batches(comm, source, iters).wall, op=MPI.MAX)
                rows.append({"series": name, "round": rnd, "wall_s": wall,
                             "records_per_s": iters * batch_size / wall, "error": ""})
        used = r.variant
        if pipe is not None:
            pipe.close()
    if comm.rank != 0:
        return []
    if why:
        rows += [{"series": "dali-caffe", "round": q, "wall_s": float("nan"),
                  "records_per_s": float("nan"), "error": why} for q in range(rounds)]
    return [{"variant": variant, "variant_used": row["series"] if row["series"] == "dali-caffe" else used,
             "nprocs": comm.size, "batch_size": batch_size, "iters": iters, "storage": storage.spec, **row}
            for row in rows]


#: ``experiment`` of a point -> the function that runs it.
EXPERIMENTS = {"epoch": epoch_check, "rate": epoch_rate, "overlap": overlap, "decode": decode_rate}


def _run(comm, points: list[dict]) -> list[dict]:
    rows: list[dict] = []
    for p in points:
        q = dict(p)
        name = q.pop("experiment")
        for row in EXPERIMENTS[name](comm, **q):
            rows.append({"experiment": name, **row})
    return rows


def sweep(cluster: MPICluster, points: list[dict], *, progress: bool = True):
    """Run each point (``nprocs``, ``experiment`` and that function's arguments); a DataFrame per
    experiment name (``{"epoch": df, ...}``)."""
    import pandas as pd

    from .experiments import by_nprocs

    rows = by_nprocs(cluster, _run, points, progress)
    return {name: pd.DataFrame([r for r in rows if r["experiment"] == name]).drop(columns="experiment")
            for name in dict.fromkeys(r["experiment"] for r in rows)}


# --- the targets, judged from the results ------------------------------------------------

#: (id, what is compared, threshold): each quantity must be >= its threshold.
TARGETS = {
    "prefetch": ("1 - I/O share of an iteration past the epoch's first chunk, prefetch d = 2", 0.9),
    "shuffle-vs-unshuffled": ("shuffled / unshuffled epoch records/s", 0.8),
    "shuffle-vs-get": ("shuffled epoch / shuffled lmdb-get records/s", 3.0),
    "shard-vs-unshuffled": ("shuffled (shard mode) / unshuffled epoch records/s", 0.8),
    "shard-vs-get": ("shuffled epoch (shard mode) / shuffled lmdb-get records/s", 3.0),
    "decode-vs-raw": ("decoded / raw records/s, warm", 0.8),
    "decode-vs-dali": ("decoded / DALI fn.readers.caffe records/s, warm", 3.0),
}


#: The overlap target's share: past the epoch's first chunk (see :func:`overlap`), mean over ranks.
SHARE = "io_share_steady"


def _ratio_rows(df, by: list[str], fast, slow, col="records_per_s", pair="repeat"):
    """Per ``by`` group: ratio of medians of ``fast`` over ``slow`` rows, min and max of the
    per-``pair`` ratios (repeats or rounds), and their count."""
    out = []
    for key, g in df.groupby(by):
        f = g[fast(g)].set_index(pair)[col]
        s = g[slow(g)].set_index(pair)[col]
        both = (f / s).dropna()
        if both.empty:
            continue
        out.append({**dict(zip(by, key if isinstance(key, tuple) else (key,))),
                    "value": f.median() / s.median(), "lo": both.min(), "hi": both.max(),
                    "repeats": len(both)})
    return out


def verdicts(rate=None, rate_gpfs=None, overlap_gpfs=None, decode=None):
    """The issue's targets against the results: one row per (target, setting, P) with the value
    (ratio of medians), the smallest and largest repeat, and the verdict of
    :func:`lmdbio.lab.claims.direction` (yes only when every repeat clears the threshold)."""
    import pandas as pd

    from .claims import direction

    rows = []

    def add(target, setting, found):
        what, threshold = TARGETS[target]
        for r in found:
            rows.append({"target": target, "setting": setting, "nprocs": int(r["nprocs"]),
                         "quantity": what, "threshold": threshold, "value": r["value"],
                         "lo": r["lo"], "hi": r["hi"], "repeats": int(r["repeats"]),
                         "verdict": direction(r["lo"], r["hi"], threshold)})

    for setting, df in (("local", rate), ("gpfs", rate_gpfs)):
        if df is None or df.empty:
            continue
        # The window mode (shuffle=True; results from before the shard mode have no column),
        # and the shard mode where measured; lmdb-get reads either order record by record.
        mode = df["shuffle_mode"].fillna("") if "shuffle_mode" in df else \
            df["shuffle"].map({True: "window", False: ""})
        get = (df["variant"] == "lmdb-get") & df["shuffle"]
        for name, m in (("shuffle", "window"), ("shard", "shard")):
            ours = df[(df["variant"] != "lmdb-get") & (mode.isin([m, ""]))]
            add(f"{name}-vs-unshuffled", setting, _ratio_rows(
                ours, ["nprocs"], lambda g: g["shuffle"], lambda g: ~g["shuffle"]))
            add(f"{name}-vs-get", setting, _ratio_rows(
                df[((df["variant"] != "lmdb-get") & (mode == m)) | get], ["nprocs"],
                lambda g: g["variant"] != "lmdb-get", lambda g: g["variant"] == "lmdb-get"))
    if overlap_gpfs is not None and not overlap_gpfs.empty:
        o = overlap_gpfs[overlap_gpfs["depth"] == 2]
        per = o.groupby(["nprocs", "repeat"])[SHARE].mean().reset_index()
        found = [{"nprocs": p, "value": 1 - g[SHARE].median(), "lo": 1 - g[SHARE].max(),
                  "hi": 1 - g[SHARE].min(), "repeats": len(g)} for p, g in per.groupby("nprocs")]
        add("prefetch", "gpfs", found)
    if decode is not None and not decode.empty:
        add("decode-vs-raw", "local", _ratio_rows(
            decode, ["nprocs"], lambda g: g["series"] == "decoded", lambda g: g["series"] == "raw",
            pair="round"))
        add("decode-vs-dali", "local", _ratio_rows(
            decode, ["nprocs"], lambda g: g["series"] == "decoded",
            lambda g: g["series"] == "dali-caffe", pair="round"))
    cols = ["target", "setting", "nprocs", "quantity", "threshold", "value", "lo", "hi", "repeats",
            "verdict"]
    return pd.DataFrame(rows, columns=cols)
