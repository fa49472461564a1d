"""Statistics over bench rows: per-repeat summary, the one speedup definition, targets, report."""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["POINT_KEYS", "SUMMARY_COLUMNS", "failed_row", "summarize", "medians",
           "ratio_of_medians", "targets", "limit_violations", "format_report", "training_report",
           "MEMORY_COLUMNS"]

RAW = "raw"
#: Columns that identify a point (a row of summary.csv is a point x repeat).
POINT_KEYS = ("dataset", "variant", "nprocs", "cache", "batch_size", "iters", "warmup",
              "compute_time", "model_bytes", "ranks_per_node", "readers_per_node", "storage")
#: Columns of summary.csv, in order.
SUMMARY_COLUMNS = (
    "dataset", "dataset_name", "variant", "variant_used", "nprocs", "cache", "storage", "repeat",
    "batch_size", "iters", "warmup", "compute_time", "model_bytes", "ranks_per_node",
    "readers_per_node", "status",
    "records_per_s", "mb_per_s", "speedup_vs_lmdb", "speedup_vs_lmdb_get", "fraction_of_limit",
    "cpu_s_per_gb", "setup_s", "first_batch_s", "epoch_records_per_s",
    "wall_s", "records", "record_bytes", "cpu_s", "read_s", "compute_s", "comm_s", "wait_s", "au",
    "resident_fraction", "file_resident_fraction", "start_resident_fraction", "evict_ok",
    "pfs_requests", "pfs_bytes", "pfs_mean_request_bytes", "pfs_queue_wait_s",
    "pfs_pieces", "pfs_seeks", "disk_probe_bw",
    "prov_check", "prov_check_s", "prov_verify_s",
    "variant_reason", "error",
    "compute_step_s", "metric_exclude_steps", "train_au", "train_samples_per_s", "train_mb_per_s",
    "rss_anon_bytes", "rss_file_bytes", "rss_shmem_bytes",
)
#: Resident memory columns of the total rows (lmdbio.metrics.memory); the summary has each
#: one's largest value over ranks.
MEMORY_COLUMNS = ("rss_anon_bytes", "rss_file_bytes", "rss_shmem_bytes")
# Reader phases that are waiting for someone else, not reading.
_WAIT_PHASES = ("wait", "stagger_wait", "ring_wait")
_TEXT = ("status", "error", "variant_used", "variant_reason", "storage", "prov_check")
# What the point columns default to in results written before they existed.
_DEFAULTS = {"storage": "local", "ranks_per_node": 0}


def failed_row(point: dict, error: str, repeat: int = 0) -> dict:
    """The one row that stands for a point that did not finish."""
    row = {k: point.get(k) for k in POINT_KEYS}
    row["storage"] = row.get("storage") or "local"
    ds = str(point.get("dataset", ""))
    row.update(dataset_name=Path(ds).name, repeat=repeat, status="failed", error=error,
               level="", phase="", rank=-1)
    return row


def _fill_defaults(df):
    for col, v in _DEFAULTS.items():
        if col not in df:
            df[col] = v
        else:
            df[col] = df[col].fillna(v)
    return df


def summarize(points_df):
    """One row per point x repeat from the tidy rows of points.csv (a DataFrame).

    Columns are :data:`SUMMARY_COLUMNS`. ``cpu_s_per_gb`` is user+system
    seconds over the timed loop, summed over ranks, per 10^9 record bytes
    delivered. The breakdown columns are means over ranks: ``read_s`` (time
    inside the reader minus its waits), ``compute_s``, ``comm_s``, ``wait_s``
    (reader waits + the closing barrier); ``au`` = compute_s / wall_s.
    ``setup_s`` is the reader's construction (longest rank), ``first_batch_s``
    adds its first batch, ``epoch_records_per_s`` = records / (setup_s + wall_s).
    ``speedup_vs_lmdb``, ``speedup_vs_lmdb_get`` and ``fraction_of_limit`` are
    :func:`ratio_of_medians` against ``lmdb``, ``lmdb-get`` and ``raw`` (the
    same on every repeat row of a point).

    The training-loop report (DLIO's and MLPerf Storage's metrics) comes from
    each rank's window that leaves out its first ``metric_exclude_steps``
    timed steps (:meth:`~lmdbio.lab.bench.timed.Timing.training_window`):
    ``train_au`` is the mean over ranks of compute / window wall,
    ``train_samples_per_s`` and ``train_mb_per_s`` (10^6 bytes) are the sums
    over ranks of the window's records and bytes per second of its wall.
    ``compute_step_s`` is the emulated compute per step and rank
    (``compute_time`` x ``batch_size`` / ``nprocs``). ``rss_anon_bytes``,
    ``rss_file_bytes`` and ``rss_shmem_bytes`` are the largest over ranks at
    the end of the timed loop (:func:`lmdbio.metrics.memory`).
    """
    import pandas as pd

    df = _fill_defaults(points_df.copy())
    if "status" not in df:
        df["status"] = "ok"
    keys = list(POINT_KEYS) + ["repeat"]
    out = []
    for key, g in df.groupby(keys, sort=False, dropna=False):
        first = g.iloc[0]
        row = dict(zip(keys, key))
        row["dataset_name"] = first.get("dataset_name", Path(str(row["dataset"])).name)
        failed = g[g["status"] != "ok"]
        if len(failed):
            row["status"] = "failed"
            row["error"] = str(failed.iloc[0].get("error", ""))
            out.append(row)
            continue
        _fill_ok_row(row, g)
        out.append(row)
    summary = pd.DataFrame(out)
    for col in SUMMARY_COLUMNS:
        if col not in summary:
            summary[col] = "" if col in _TEXT else math.nan
    for ref, col in (("lmdb", "speedup_vs_lmdb"), ("lmdb-get", "speedup_vs_lmdb_get"),
                     (RAW, "fraction_of_limit")):
        summary[col] = ratio_of_medians(summary, ref).to_numpy()
    return summary[list(SUMMARY_COLUMNS)]


def _fill_ok_row(row: dict, g) -> None:
    """The columns of a point x repeat that ran (:func:`summarize`), from its rows ``g``."""
    first = g.iloc[0]
    wall = float(first["point_wall_s"])
    total = g[(g["level"] == "step") & (g["phase"] == "total")]
    nranks = max(1, len(total))

    def ssum(level, phases):
        m = (g["level"] == level) & g["phase"].isin(phases)
        return float(g.loc[m, "wall_s"].sum())

    reader_wait = ssum("reader", _WAIT_PHASES)
    rec_bytes = float(first["record_bytes"])
    cpu = float((total["user_s"].fillna(0) + total["sys_s"].fillna(0)).sum())
    setup = float(first.get("setup_s", math.nan))
    row.update(
        status="ok", error="", wall_s=wall, records=int(first["records"]),
        record_bytes=int(rec_bytes),
        records_per_s=first["records"] / wall if wall > 0 else math.nan,
        mb_per_s=rec_bytes / wall / 1e6 if wall > 0 else math.nan,
        cpu_s=cpu, cpu_s_per_gb=cpu / (rec_bytes / 1e9) if rec_bytes else math.nan,
        read_s=(ssum("step", ["io"]) - reader_wait) / nranks,
        compute_s=ssum("step", ["compute"]) / nranks,
        comm_s=ssum("step", ["comm"]) / nranks,
        wait_s=(reader_wait + ssum("step", ["barrier"])) / nranks,
        setup_s=setup, first_batch_s=float(first.get("first_batch_s", math.nan)),
        epoch_records_per_s=first["records"] / (setup + wall) if setup + wall > 0 else math.nan,
    )
    for col in ("resident_fraction", "file_resident_fraction", "start_resident_fraction",
                "pfs_requests", "pfs_bytes", "pfs_mean_request_bytes", "pfs_queue_wait_s",
                "pfs_pieces", "pfs_seeks", "disk_probe_bw"):
        row[col] = first.get(col, math.nan)
    row["evict_ok"] = first.get("evict_ok", True)
    row.update(_prov_check(g), prov_verify_s=first.get("prov_verify_s", math.nan))
    row["variant_used"] = first.get("variant_used", row["variant"])
    reason = first.get("variant_reason", "")
    row["variant_reason"] = "" if isinstance(reason, float) else reason
    row["au"] = row["compute_s"] / wall if wall > 0 else math.nan
    row.update(_training_loop(total))
    row["compute_step_s"] = (float(row["compute_time"]) * float(row["batch_size"])
                             / float(row["nprocs"]))
    for col in MEMORY_COLUMNS:
        row[col] = float(total[col].max()) if col in total else math.nan


def _training_loop(total) -> dict:
    """``train_au``, ``train_samples_per_s``, ``train_mb_per_s`` from the ranks' total rows."""
    if "metric_wall_s" not in total or not total["metric_wall_s"].notna().any():
        return {"metric_exclude_steps": math.nan, "train_au": math.nan,
                "train_samples_per_s": math.nan, "train_mb_per_s": math.nan}
    w = total["metric_wall_s"].astype(float)
    return {"metric_exclude_steps": int(total["metric_exclude_steps"].iloc[0]),
            "train_au": float((total["metric_compute_s"] / w).mean()),
            "train_samples_per_s": float((total["metric_records"] / w).sum()),
            "train_mb_per_s": float((total["metric_bytes"] / w).sum()) / 1e6}


def _prov_check(g) -> dict:
    """PROV's sidecar check at setup: ``prov_check`` ``stamp`` (every reader skipped it), ``full``
    (the readers checked it) or empty (no sidecar read), and ``prov_check_s`` (slowest rank)."""
    if "prov_stamp_used" not in g:
        return {"prov_check": "", "prov_check_s": math.nan}
    used = g["prov_stamp_used"].dropna()
    if not len(used):
        return {"prov_check": "", "prov_check_s": math.nan}
    return {"prov_check": "stamp" if (used > 0).all() else "full",
            "prov_check_s": float(g["prov_check_s"].max())}


def _match_keys(summary) -> list[str]:
    return [k for k in POINT_KEYS if k != "variant" and k in summary]


def medians(summary, metrics=("records_per_s", "cpu_s_per_gb")):
    """Median of ``metrics`` over the successful repeats of each point (incl. variant)."""
    ok = _fill_defaults(summary[summary["status"] == "ok"].copy())
    keys = _match_keys(ok) + ["variant"]
    return ok.groupby(keys, dropna=False)[list(metrics)].median().reset_index()


def ratio_of_medians(summary, ref: str, metric: str = "records_per_s", invert: bool = False):
    """THE speedup: median ``metric`` over repeats of a row's point / that of ``ref`` at the same point.

    "The same point" is every column of :data:`POINT_KEYS` except the
    variant: the same dataset, cache, P, batch, emulation, storage... Returns
    a Series aligned with ``summary`` (NaN where the row failed or ``ref``
    has no successful repeat there). ``invert`` divides the other way round,
    for metrics where less is better (times: ``ref / row``).
    """
    import numpy as np
    import pandas as pd

    summary = _fill_defaults(summary.copy())
    match = _match_keys(summary)
    med = medians(summary, (metric,))
    own = summary[match + ["variant"]].merge(med, on=match + ["variant"], how="left")[metric]
    refs = med[med["variant"] == ref].drop(columns="variant").rename(columns={metric: "_ref"})
    base = summary[match].merge(refs, on=match, how="left")["_ref"]
    ratio = (base / own) if invert else (own / base)
    ratio = np.array(ratio, dtype=float)
    ratio[(summary["status"] != "ok").to_numpy()] = np.nan
    return pd.Series(ratio, index=summary.index, name=f"{metric}_vs_{ref}")


def targets(summary):
    """Per (dataset, cache, nprocs, storage): the best LMDBIO variant against raw, lmdb, lmdb-get.

    Ratios of medians over repeats (:func:`ratio_of_medians`). Columns:
    ``best_variant`` (highest median records/s among ``lmdbio-*`` and
    ``auto``), ``fraction_of_limit``, ``speedup_vs_lmdb``,
    ``speedup_vs_lmdb_get`` and ``cpu_vs_raw`` (its median CPU s/GB over
    raw's). Nothing here asserts them.
    """
    import pandas as pd

    keys = ["dataset_name", "cache", "nprocs", "storage"]
    cols = keys + ["best_variant", "records_per_s", "fraction_of_limit", "speedup_vs_lmdb",
                   "speedup_vs_lmdb_get", "cpu_vs_raw", "epoch_fraction_of_limit"]
    ok = _fill_defaults(summary[summary["status"] == "ok"].copy())
    if ok.empty:
        return pd.DataFrame(columns=cols)
    med = ok.groupby(keys + ["variant"])[["records_per_s", "cpu_s_per_gb",
                                          "epoch_records_per_s"]].median().reset_index()
    out = []
    for key, g in med.groupby(keys):
        cand = g[g["variant"].str.startswith("lmdbio-") | (g["variant"] == "auto")]
        if cand.empty:
            continue
        by = g.set_index("variant")
        def ref(v, col, by=by):
            return float(by.loc[v, col]) if v in by.index else math.nan
        best = cand.loc[cand["records_per_s"].idxmax()]
        out.append({**dict(zip(keys, key)), "best_variant": best["variant"],
                    "records_per_s": best["records_per_s"],
                    "fraction_of_limit": best["records_per_s"] / ref(RAW, "records_per_s"),
                    "speedup_vs_lmdb": best["records_per_s"] / ref("lmdb", "records_per_s"),
                    "speedup_vs_lmdb_get": best["records_per_s"] / ref("lmdb-get", "records_per_s"),
                    "cpu_vs_raw": best["cpu_s_per_gb"] / ref(RAW, "cpu_s_per_gb"),
                    "epoch_fraction_of_limit":
                        best["epoch_records_per_s"] / ref(RAW, "epoch_records_per_s")})
    return pd.DataFrame(out, columns=cols)


def limit_violations(summary, tolerance: float = 0.10):
    """Points where a variant's median beats raw's by more than ``tolerance`` (should be none)."""
    s = summary.copy()
    s["fraction_of_limit"] = ratio_of_medians(s, RAW).to_numpy()
    bad = s[(s["status"] == "ok") & (s["variant"] != RAW) & (s["fraction_of_limit"] > 1 + tolerance)]
    keys = [k for k in ("dataset_name", "cache", "nprocs", "storage", "variant") if k in bad]
    return bad.groupby(keys, dropna=False)["fraction_of_limit"].first().reset_index()


def _spread(values, fmt: str) -> str:
    """``median [min-max]`` of ``values`` with ``fmt``; the median alone for one value."""
    v = values.dropna().astype(float)
    if not len(v):
        return "n/a"
    med = fmt.format(v.median())
    return med if len(v) == 1 else f"{med} [{fmt.format(v.min())}-{fmt.format(v.max())}]"


def training_report(summary) -> str:
    """The training-loop table of points with emulated compute: one row per point (P, variant).

    DLIO's and MLPerf Storage's metrics, each as ``median [min-max]`` over
    the successful repeats: AU in percent, samples/s and MB/s (see
    :func:`summarize`). Empty where no point emulated compute or the
    summary predates these columns.
    """
    import pandas as pd

    need = ("train_au", "train_samples_per_s", "train_mb_per_s", "compute_step_s")
    if any(c not in summary for c in need):
        return ""
    ok = _fill_defaults(summary[(summary["status"] == "ok")
                                & (summary["compute_time"].astype(float) > 0)].copy())
    if ok.empty:
        return ""
    keys = ["dataset_name", "storage", "cache", "nprocs", "variant"]
    rows = []
    for key, g in ok.groupby(keys, sort=True):
        rows.append({**dict(zip(keys, key)), "repeats": len(g), "steps": int(g["iters"].iloc[0]),
                     "compute/step s": "{:.3g}".format(g["compute_step_s"].median()),
                     "AU %": _spread(g["train_au"] * 100, "{:.1f}"),
                     "samples/s": _spread(g["train_samples_per_s"], "{:,.0f}"),
                     "MB/s": _spread(g["train_mb_per_s"], "{:,.1f}")})
    excluded = sorted({int(x) for x in ok["metric_exclude_steps"].dropna()})
    steps = "/".join(map(str, excluded)) or "n/a"
    head = (f"Training loop, DLIO / MLPerf Storage style, median [min-max] over repeats; each "
            f"rank's first {steps} timed step(s) left out\n(DLIO's exclude_start_steps). AU = "
            "compute / wall (mean over ranks); samples/s and MB/s (10^6 bytes) summed over ranks:")
    return head + "\n" + pd.DataFrame(rows).to_string(index=False)


def format_report(summary) -> str:
    """The summary as fixed-width tables, medians over repeats (failures listed apart)."""
    import pandas as pd

    cols = ["records_per_s", "mb_per_s", "speedup_vs_lmdb", "speedup_vs_lmdb_get",
            "fraction_of_limit", "cpu_s_per_gb", "setup_s", "first_batch_s",
            "epoch_records_per_s", "read_s", "wait_s", "au", "resident_fraction"]
    summary = _fill_defaults(summary.copy())
    if summary["pfs_requests"].notna().any():
        cols += ["pfs_requests", "pfs_mean_request_bytes", "pfs_queue_wait_s"]
    ok = summary[summary["status"] == "ok"]
    keys = ["dataset_name", "storage", "cache", "nprocs", "variant"]
    lines = []
    if len(ok):
        table = ok.groupby(keys, sort=True)[cols].median()
        table.insert(0, "repeats", ok.groupby(keys, sort=True).size())
        best = targets(summary)
        with pd.option_context("display.max_rows", None, "display.width", 250,
                               "display.max_columns", None, "display.float_format", "{:,.3g}".format):
            lines.append("Medians over repeats (speedups and fraction_of_limit: ratios of medians):")
            lines.append(table.to_string())
            if len(best):
                lines.append("")
                lines.append("Best LMDBIO variant per point (fraction_of_limit vs raw, speedups "
                             "vs lmdb and lmdb-get, CPU s/GB vs raw):")
                lines.append(best.to_string(index=False))
            loop = training_report(ok)
            if loop:
                lines += ["", loop]
            auto = ok[(ok["variant"] == "auto")]
            if len(auto):
                lines.append("")
                lines.append("auto chose:")
                for (ds, st, c, p), g in auto.groupby(["dataset_name", "storage", "cache", "nprocs"]):
                    r = g.iloc[0]
                    lines.append(f"  {ds} {st} {c} P={p}: {r['variant_used']} ({r['variant_reason']})")
    failed = summary[summary["status"] != "ok"]
    for _, r in failed.iterrows():
        err = " | ".join(str(r.get("error", "")).strip().splitlines()[-3:])
        lines.append(f"FAILED {r['dataset_name']} {r['cache']} P={r['nprocs']} {r['variant']} "
                     f"repeat {r['repeat']}: {err}")
    bad = summary[(summary["status"] == "ok") & (summary["evict_ok"].astype(str) == "False")]
    if len(bad):
        lines.append(f"WARNING: {len(bad)} cold point(s) started with data still cached "
                     "(evict_ok=False); see resident_fraction")
    local = summary[summary["storage"] == "local"]
    over = limit_violations(local) if len(local[local["status"] == "ok"]) else []
    if len(over):
        lines.append(f"WARNING: {len(over)} point(s) on local storage beat the raw limit by more "
                     "than 10%: noise (too few iterations or repeats) or a wrong measurement")
    return "\n".join(lines) if lines else "(no results)"
