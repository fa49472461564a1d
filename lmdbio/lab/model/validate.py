"""Validation: predict measured sweeps the model was not fitted to, and report the errors.

Reads ``summary.csv`` files written by ``lmdbio bench``, predicts every
(dataset, variant, P, cache, storage) point on the ``this-machine``
platform, and compares the measured time of the timed loop (``wall_s``,
median of the repeats; their min and max are kept) with the predicted
iterations x per-iteration time. No measured point is used for
calibration: calibrate runs its own microbenchmarks.

Each point has a ``setting`` (:func:`setting_of`):

- ``local disk`` (``bench_issue6``): independent of the storage model. A cold
  point's disk bandwidth is the one the sweep's disk probe measured just
  before it (``disk_probe_bw``, a cold read of a scratch file: a
  microbenchmark of the same minute, never the point's own time), because
  the disk drifts between sittings; sweeps without a probe use
  calibration's ``disk_bw``. ``disk_bw`` and ``disk_bw_source`` say which;
- ``throttled block device`` (``throttled/``, storage ``throttle:NAME``): a
  real, rate-limited device per virtual node; predicted with a profile made
  from the throttle's own limits (:func:`throttled_profile`), independent of
  the storage model's FIFO targets and seeks;
- ``shared storage target`` (``shared/``, storage ``shared:NAME``, when present): every
  virtual node reads one rate-limited loop device through a direct-I/O node device of its
  own (``lmdbio.lab.storage.shared``); predicted with one rate-limited target for the whole run
  (:func:`shared_profile`), independent of the storage model's FIFO targets and seeks;
- ``time-dilated emulated GPFS`` (``dilated/``, when present): the emulator
  at a larger ``time_scale``; it still charges reads to the same storage
  model, so it is labelled as sharing it;
- ``emulated GPFS (shares the storage model)`` (``pfs_sweep``): the emulator
  runs the very StorageModel the prediction uses; kept, but not independent.

"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from lmdbio.options import VARIANTS
from .calibrate import Calibration
from .platform import Platform, Workload, load_platform
from .predict import PHASES, predict_point
from ..paths import REPO
from .criterion import CRITERION, INDEPENDENT

__all__ = ["DEFAULT_SOURCES", "SETTINGS", "INDEPENDENT", "CRITERION", "find_summaries", "setting_of",
           "throttled_profile", "shared_profile", "validate", "error_table", "gap_of", "criterion_table", "write_validation"]

_R = REPO / "data" / "results"
DEFAULT_SOURCES = (_R / "bench_issue6", _R / "pfs_sweep", _R / "throttled", _R / "dilated", _R / "shared")
SETTINGS = ("local disk", "throttled block device", "shared storage target",
            "time-dilated emulated GPFS (shares the storage model)", "emulated GPFS (shares the storage model)")


def find_summaries(sources=DEFAULT_SOURCES) -> list[Path]:
    """Every ``summary.csv`` under the given directories (missing ones are skipped)."""
    found = []
    for s in sources:
        s = Path(s)
        if s.is_file() and s.name == "summary.csv":
            found.append(s)
        elif s.is_dir():
            found += sorted(s.rglob("summary.csv"))
    return found


def _find_key(obj, key):
    if isinstance(obj, dict):
        if key in obj and isinstance(obj[key], (int, float)):
            return obj[key]
        for v in obj.values():
            r = _find_key(v, key)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj:
            r = _find_key(v, key)
            if r is not None:
                return r
    return None


def setting_of(storage: str, path: Path) -> str:
    """The validation setting of a summary's point (see the module docstring)."""
    if storage.startswith("throttle:"):
        return "throttled block device"
    if storage.startswith("shared:"):
        return "shared storage target"
    if storage.startswith("pfs:"):
        if "dilated" in Path(path).parts:
            return "time-dilated emulated GPFS (shares the storage model)"
        return "emulated GPFS (shares the storage model)"
    return "local disk"


def throttled_profile(name: str, meta: dict, ranks_per_node: int):
    """A storage Profile for the throttled block device: each node its own rate-limited queue.

    From the throttle's own limits (``lmdbio.lab.storage.throttle``; the sweep's
    time scale from its meta.json): a request takes ``max(1 / read_iops,
    bytes / read_bps)`` on its node's queue; no seeks (the budget is per
    request); the device's readahead window; nothing shared between nodes.
    """
    from ..pfs.model import Profile
    from ..storage.throttle import load_throttle_profile

    scale = _find_key(meta, "time_scale")
    tp = load_throttle_profile(name, time_scale=scale)
    bps, iops = tp.node_limits(max(1, int(ranks_per_node)))
    ra = int(tp.read_ahead_kb) * 1024
    return Profile(name=f"throttle:{name}", targets=1, stripe=1 << 40, latency_s=1.0 / iops,
                   target_bw=float(bps), seek_s=0.0, node_link_bw=None,
                   read_size=1280 << 10, readahead=ra, time_scale=1.0,
                   description="throttled loop device per virtual node (lmdbio.lab.storage.throttled)",
                   per_node_targets=True, rate_limited=True)


def shared_profile(name: str, meta: dict, nprocs: int, probe=None):
    """A storage Profile for the shared target: one rate-limited queue that every node draws on.

    From the target's own budget (``lmdbio.lab.storage.shared``, the run's share
    at P ranks and the sweep's time scale from its meta.json): a request
    takes ``max(1 / read_iops, bytes / read_bps)`` on the one queue; no seeks
    (the target serves interleaved streams as fast as one). With ``probe``
    (:func:`lmdbio.lab.model.sharedprobe.load_probe`) the node devices'
    readahead window and largest request as the probe read them from sysfs;
    without, the profile's window and the loop driver's 1280 KiB.
    """
    from ..pfs.model import Profile
    from ..storage.shared import load_shared_profile

    sp = load_shared_profile(name, time_scale=_find_key(meta, "time_scale"))
    bps, iops = sp.limits(max(1, int(nprocs)))
    ra = probe.node_read_ahead if probe is not None else int(sp.read_ahead_kb) * 1024
    size = probe.node_max_request if probe is not None else 1280 << 10
    return Profile(name=f"shared:{name}", targets=1, stripe=1 << 40, latency_s=1.0 / iops,
                   target_bw=float(bps), seek_s=0.0, node_link_bw=None, read_size=size,
                   readahead=ra, time_scale=1.0,
                   description="one shared rate-limited target (lmdbio.lab.storage.shared)",
                   rate_limited=True)


def _storage_of(row, meta: dict) -> tuple[str, float | None]:
    """``("disk", None)`` for a local-disk sweep, ``(profile, time_scale)`` for an emulated one."""
    st = str(row.get("storage", "") or "")
    if st.startswith("pfs:"):
        return st[4:], _find_key(meta, "time_scale")
    return "disk", None


def validate(summaries, platform: Platform | str = "this-machine", cal: Calibration | None = None,
             budget: int = 20000):
    """A DataFrame, one row per measured point: measured and predicted seconds and the error."""
    import pandas as pd

    from .calibrate import load_calibration

    plat = load_platform(platform) if not isinstance(platform, Platform) else platform
    cal = cal or load_calibration()
    known = {w.name: w for w in plat.workloads}
    out = []
    for path in summaries:
        path = Path(path)
        df = pd.read_csv(path)
        meta_f = path.with_name("meta.json")
        meta = json.loads(meta_f.read_text()) if meta_f.exists() else {}
        df = df[(df["status"] == "ok") & df["variant"].isin(VARIANTS)]
        if "storage" not in df.columns:
            df = df.assign(storage="local")
        df["storage"] = df["storage"].fillna("local").astype(str)
        if "warmup" not in df.columns:
            df = df.assign(warmup=0)
        keys = ["dataset_name", "variant", "nprocs", "cache", "storage", "batch_size", "iters",
                "warmup", "ranks_per_node", "readers_per_node"]
        if "time_scale" in df.columns:   # a time-dilated sweep may vary the scale per row
            keys.append("time_scale")
        df["ranks_per_node"] = df["ranks_per_node"].fillna(0).astype(int)
        agg = df.groupby(keys, dropna=False).agg(
            measured_s=("wall_s", "median"), measured_min_s=("wall_s", "min"),
            measured_max_s=("wall_s", "max"), repeats=("wall_s", "size"),
            records=("records", "mean"), record_bytes=("record_bytes", "mean"),
            **({"pfs_requests": ("pfs_requests", "median"), "pfs_bytes": ("pfs_bytes", "median")}
               if "pfs_requests" in df.columns else {}),
            **({"disk_probe_bw": ("disk_probe_bw", "median")}
               if "disk_probe_bw" in df.columns else {})).reset_index()
        for r in agg.to_dict("records"):
            storage, scale = _storage_of(r, meta)
            if r.get("time_scale") == r.get("time_scale") and r.get("time_scale") is not None:
                scale = float(r["time_scale"])
            setting = setting_of(str(r["storage"]), path)
            p = plat.with_(ranks_per_node=int(r["ranks_per_node"] or 0),
                           readers_per_node=int(r["readers_per_node"] or 1),
                           storage=storage, storage_time_scale=scale or 1.0)
            if setting == "throttled block device":
                p = p.with_(storage=throttled_profile(str(r["storage"]).split(":", 1)[1], meta,
                                                      int(r["ranks_per_node"] or 1)))
            elif setting == "shared storage target":
                from .point import probe_at

                probe = probe_at(plat.shared_probe) if plat.shared_probe else None
                p = p.with_(storage=shared_profile(str(r["storage"]).split(":", 1)[1], meta,
                                                   int(r["nprocs"]), probe))
            elif storage != "disk" and scale is None:
                from ..pfs.model import load_profile
                p = p.with_(storage_time_scale=load_profile(storage).time_scale)
            base = known.get(str(r["dataset_name"]))
            rec_bytes = int(round(r["record_bytes"] / max(1.0, r["records"])))
            w = Workload(name=str(r["dataset_name"]), record_bytes=rec_bytes,
                         key_bytes=base.key_bytes if base else 35,
                         records=base.records if base else 0, batch_size=int(r["batch_size"]),
                         iterations=int(r["iters"]))
            # A local cold point's disk: the bandwidth the sweep's probe measured just before it
            # (the median over its repeats; lmdbio.lab.bench.cache.DiskProbe), else calibration's.
            probe_bw = float(r.get("disk_probe_bw", float("nan")))
            use_probe = setting == "local disk" and r["cache"] == "cold" and probe_bw > 0
            cal_p = replace(cal, disk_bw=probe_bw) if use_probe else cal
            pred = predict_point(p, w, str(r["variant"]), int(r["nprocs"]), cal_p,
                                 cache=str(r["cache"]), budget=budget)
            # The sweep times the loop only: setup (DIO's index pass) is outside it.
            predicted = pred["per_iteration_s"] * int(r["iters"])
            # The same point with calibration's disk: how much the verdict rests on the disk estimate.
            cal_disk = predicted if not use_probe else predict_point(
                p, w, str(r["variant"]), int(r["nprocs"]), cal, cache=str(r["cache"]),
                budget=budget)["per_iteration_s"] * int(r["iters"])
            out.append({"setting": setting, "dataset": r["dataset_name"], "variant": r["variant"],
                        "nprocs": int(r["nprocs"]), "cache": r["cache"], "storage": r["storage"],
                        "ranks_per_node": int(r["ranks_per_node"] or 0),
                        "measured_s": float(r["measured_s"]), "predicted_s": predicted,
                        "rel_error": (predicted - r["measured_s"]) / r["measured_s"],
                        "measured_min_s": float(r["measured_min_s"]),
                        "measured_max_s": float(r["measured_max_s"]),
                        "repeats": int(r["repeats"]), "iterations": int(r["iters"]),
                        **{f"pred_{x}_s": pred[f"{x}_s"] * int(r["iters"]) for x in PHASES},
                        "explicit_inflight": pred["explicit_inflight"],
                        # Storage traffic of the timed iterations: the bench takes the storage's
                        # counters just inside the timed loop's barriers (lmdbio.lab.bench.timed).
                        "pred_storage_requests": pred["storage_requests"] * int(r["iters"]),
                        "pred_storage_bytes": pred["storage_bytes"] * int(r["iters"]),
                        "measured_storage_requests": float(r.get("pfs_requests", float("nan"))),
                        "measured_storage_bytes": float(r.get("pfs_bytes", float("nan"))),
                        "dominant_mechanism": pred["dominant_mechanism"],
                        "disk_bw": cal_p.disk_bw if setting == "local disk" else float("nan"),
                        "disk_bw_source": (("same-sitting probe" if use_probe else "calibration")
                                           if setting == "local disk" else ""),
                        "rel_error_calibrated_disk": (cal_disk - r["measured_s"]) / r["measured_s"],
                        "source": str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)})
    return pd.DataFrame(out)


def error_table(df):
    """Median and worst |relative error| per setting, cache (cold, warm, and ``both``) and variant
    (and over all points).

    ``median_repeat_spread`` is the median over points of (max - min) / median
    of the measured repeats: the run-to-run noise of the measurements.
    """
    import pandas as pd

    d = df.assign(abs_error=df["rel_error"].abs())
    if "measured_min_s" in d and "measured_max_s" in d:
        d["spread"] = (d["measured_max_s"] - d["measured_min_s"]) / d["measured_s"]
    else:
        d["spread"] = float("nan")

    if {"pred_storage_requests", "measured_storage_requests"} <= set(d.columns):
        d["requests_ratio"] = d["pred_storage_requests"] / d["measured_storage_requests"]
        d["bytes_ratio"] = d["pred_storage_bytes"] / d["measured_storage_bytes"]
    else:
        d["requests_ratio"] = d["bytes_ratio"] = float("nan")

    def row(storage, variant, g, cache="both"):
        r = {"storage": storage, "cache": cache, "variant": variant, "points": len(g),
             "median_abs_error": float(g["abs_error"].median()),
             "worst_abs_error": float(g["abs_error"].max()),
             "median_signed_error": float(g["rel_error"].median()),
             # How much the repeats of one point differ: the noise the errors sit in.
             "median_repeat_spread": float(g["spread"].median()),
             # Where the emulator counted its requests: the model's count and bytes against them,
             # and the time per request that is left (predicted / measured seconds per request).
             "requests_ratio": float(g["requests_ratio"].median()),
             "bytes_ratio": float(g["bytes_ratio"].median()),
             "time_per_request_ratio": float(((1 + g["rel_error"]) / g["requests_ratio"]).median())}
        r["gap"] = gap_of(r)
        return r
    if "setting" not in d.columns:
        d = d.assign(setting=[setting_of(str(x), Path(str(src))) for x, src in zip(d["storage"], d["source"])])
    rows = [row(st, v, g, c) for (st, c, v), g in d.groupby(["setting", "cache", "variant"])]
    rows += [row(st, v, g) for (st, v), g in d.groupby(["setting", "variant"])]
    rows += [row("all", v, g) for v, g in d.groupby("variant")]
    t = pd.DataFrame(rows).rename(columns={"storage": "setting"})
    t["meets_criterion"] = t["median_abs_error"] <= CRITERION
    t["independent"] = t["setting"].isin(INDEPENDENT)
    order = {v: i for i, v in enumerate(VARIANTS)}
    return t.sort_values(["setting", "cache", "variant"], key=lambda s: s.map(order) if s.name == "variant"
                         else s).reset_index(drop=True)


def gap_of(r: dict) -> str:
    """Which part of an error table row's median error the storage counters put it on.

    Empty where the error meets the criterion. Where the emulator counted its
    requests: "request count" when the model's count is off by more than the
    criterion, else "time per request" (queueing and seeks between streams:
    the estimates seek_s and the explicit-read depth), naming the ratios;
    "no storage counters" elsewhere.
    """
    if not r["median_abs_error"] > CRITERION:
        return ""
    q, t = r["requests_ratio"], r["time_per_request_ratio"]
    if q != q:
        return "no storage counters: CPU or storage not separated"
    if abs(q - 1) > CRITERION:
        return f"request count (model/measured {q:.2f}, bytes {r['bytes_ratio']:.2f})"
    return (f"time per request (model/measured {t:.2f}, requests {q:.2f}): queueing and seeks "
            "between streams (estimates seek_s, explicit-read depth)")


def criterion_table(df):
    """Per setting and cache (cold, warm apart): the variants meeting the criterion, the worst
    variant (largest median |error|), the worst point of any variant, and what the model predicts
    dominates the worst variant's points."""
    import pandas as pd

    d = df if "setting" in df.columns else df.assign(setting="?")
    rows = []
    for (st, cache), g in d.groupby(["setting", "cache"], sort=False):
        t = error_table(g)
        t = t[(t["setting"] != "all") & (t["cache"] == cache)]
        w = t.loc[t["median_abs_error"].idxmax()]
        pts = g[g["variant"] == w["variant"]]
        worst = g.loc[g["rel_error"].abs().idxmax()]
        rows.append({"setting": st, "cache": cache, "independent": st in INDEPENDENT,
                     "variants": len(t), "variants_meeting": int(t["meets_criterion"].sum()),
                     "worst_variant": w["variant"], "worst_median_abs_error": w["median_abs_error"],
                     "worst_median_signed_error": w["median_signed_error"],
                     "worst_point": (f"{worst['variant']} P={worst['nprocs']} {worst['dataset']}: measured "
                                     f"{worst['measured_s']:.3g} s, predicted {worst['predicted_s']:.3g} s "
                                     f"({100 * worst['rel_error']:+.0f}%)"),
                     "predicted_dominant": (pts["dominant_mechanism"].mode().iloc[0] if len(pts) else ""),
                     "disk_bw": _disk_bw_words(g),
                     # Where a probe set the disk: the variants meeting the criterion with
                     # calibration's disk_bw instead (NaN where no probe was used).
                     "variants_meeting_calibrated_disk": _meeting_calibrated_disk(g)})
    return pd.DataFrame(rows)


def _meeting_calibrated_disk(g) -> float:
    """Variants of a group within the criterion when its probed points use calibration's disk."""
    if "disk_bw_source" not in g.columns or not (g["disk_bw_source"] == "same-sitting probe").any():
        return float("nan")
    e = g.assign(err=g["rel_error_calibrated_disk"].abs()).groupby("variant")["err"].median()
    return float((e <= CRITERION).sum())


def _disk_bw_words(g) -> str:
    """Which disk bandwidth a local-disk group's cold predictions used, in words ('' elsewhere)."""
    if "disk_bw_source" not in g.columns:
        return ""
    d = g[(g["disk_bw_source"].fillna("").astype(str) != "") & (g["cache"] == "cold")]   # warm reads no disk
    if d.empty:
        return ""
    parts = []
    for src, h in d.groupby("disk_bw_source", sort=False):
        bw = h["disk_bw"] / 1e9
        parts.append(f"{src} {bw.median():.2f} GB/s" if bw.min() == bw.max() else
                     f"{src} median {bw.median():.2f} GB/s ({bw.min():.2f}-{bw.max():.2f}) over {len(h)} points")
    return "; ".join(parts)


def write_validation(df, out_dir, config: dict, cal_dir=None) -> Path:
    """``summary.csv`` (one row per point), ``errors.csv`` (per variant and setting),
    ``criterion.csv`` (per setting: the worst variant), ``criterion_all.csv`` and
    ``criterion_counts.csv`` (every cell, the held-out sweeps included:
    :mod:`lmdbio.lab.model.criterion`) and ``meta.json``."""
    from lmdbio.lab.meta import write_results_meta

    from .criterion import write as write_criterion

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "summary.csv", index=False)
    err = error_table(df)
    err.to_csv(out / "errors.csv", index=False)
    criterion_table(df).to_csv(out / "criterion.csv", index=False)
    write_criterion(df, out)
    write_results_meta(
        out, config, calibration_dir=str(cal_dir or ""),
        files=["summary.csv", "errors.csv", "criterion.csv", "criterion_all.csv", "criterion_counts.csv"],
        criterion=f"median |relative error| <= {CRITERION} per variant on each independent setting "
                  f"({', '.join(INDEPENDENT)}); the emulated GPFS shares the storage model",
        note="measured_s is the median over repeats of the timed loop's wall time; "
             "no point here was used to calibrate the model")
    return out

