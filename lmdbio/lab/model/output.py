"""What ``lmdbio model predict`` writes, and the one-at-a-time sensitivity of its estimates:
``predictions.csv`` (with the bands), ``joint.csv``, ``verdict_map.csv``, ``meta.json``
(with the model's version and a hash of ``lmdbio/lab/model/``)."""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path

from .calibrate import Calibration, load_calibration
from .platform import Platform, load_platform
from .point import PHASES, explicit_depth, storage_profile

__all__ = ["estimate_ends", "sensitivity", "band_columns", "write_predictions", "MODEL_VERSION",
           "model_hash"]

#: The model's version: its structure (phases, switches, estimates) as the docs describe it.
MODEL_VERSION = "4.0"


def model_hash() -> str:
    """SHA-256 over the model's code (every ``*.py`` of ``lmdbio/lab/model/``, by name): predictions
    carry it, so a held-out check can tell whether they came from the code it compares."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def estimate_ends(platform: Platform):
    """``(name, end, value, why, platform at that end)`` for every estimate's low and high end
    (:func:`lmdbio.lab.model.estimates.estimates`); an end equal to the central value is
    skipped: it cannot move a prediction."""
    from .estimates import apply, estimates

    for e in estimates(platform):
        for end, v in (("low", e.low), ("high", e.high)):
            if v != e.central:
                yield e.name, end, v, e.why, apply(platform, {e.name: v})


def sensitivity(platform: Platform | str, procs, variants=("all",), workloads=None,
                cal: Calibration | None = None, budget: int = 20000) -> list[dict]:
    """:func:`predict` rows at each end of every estimate's range (one estimate at a time).

    Each row carries ``estimate``, ``end`` (low/high), ``estimate_value`` and
    the prediction's columns. The band of a quantity is its smallest and
    largest value over these rows and the central prediction: one estimate
    moved at a time, the others central (joint extremes are not explored).
    """
    plat = load_platform(platform) if not isinstance(platform, Platform) else platform
    cal = cal or load_calibration()
    from .predict import predict as _predict

    rows = []
    for name, end, value, _why, p in estimate_ends(plat):
        for r in _predict(p, procs, variants, workloads, cal, budget):
            rows.append({"estimate": name, "end": end, "estimate_value": value, **r})
    return rows


#: joint.csv keeps 6 significant digits and leaves out the words that name a sample's dominant
#: phase and mechanism: bands, deciders and Sobol indices read numbers only, and the words of
#: the central prediction are in predictions.csv (512 samples x 14 rows would pass 3 MB).
JOINT_FLOAT = "%.6g"
JOINT_WORDS = ("dominant_phase", "dominant_io_phase", "dominant_mechanism")


def joint_frame(frame):
    """The joint samples as joint.csv stores them (without :data:`JOINT_WORDS`)."""
    return frame.drop(columns=[c for c in JOINT_WORDS if c in frame.columns])


def band_columns(rows: list[dict], sens: list[dict]) -> list[dict]:
    """``rows`` with ``total_s_low``/``total_s_high`` (and per iteration): the extremes over ``sens``."""
    import pandas as pd

    if not sens:
        return rows
    s = pd.DataFrame(sens)
    keys = ["workload", "variant", "nprocs"]
    g = s.groupby(keys)
    lo, hi = g[["total_s", "per_iteration_s"]].min(), g[["total_s", "per_iteration_s"]].max()
    out = []
    for r in rows:
        k = (r["workload"], r["variant"], r["nprocs"])
        r = dict(r)
        for col in ("total_s", "per_iteration_s"):
            if k in lo.index:
                r[f"{col}_low"] = min(r[col], float(lo.loc[k, col]))
                r[f"{col}_high"] = max(r[col], float(hi.loc[k, col]))
            else:
                r[f"{col}_low"] = r[f"{col}_high"] = float("nan")
        out.append(r)
    return out


def write_predictions(rows: list[dict], out_dir, config: dict, platform: Platform,
                      cal: Calibration, cal_dir=None, sens: list[dict] | None = None,
                      joint: list[dict] | None = None, maps: list[dict] | None = None) -> Path:
    """``predictions.csv`` (tidy, one row per workload x batch reading x variant x P) and ``meta.json``.

    With ``joint`` (:func:`lmdbio.lab.model.uncertainty.joint` rows) also ``joint.csv``, the
    samples every band and verdict is taken from, and ``sobol.csv`` (:mod:`lmdbio.lab.model.sobol`);
    with ``maps`` (:func:`lmdbio.lab.model.uncertainty.verdict_map` rows) ``verdict_map.csv``;
    with ``sens`` (:func:`sensitivity`, one estimate at a time) predictions.csv gets
    ``total_s_low``/``total_s_high`` and ``sensitivity.csv`` holds the rows. A file a run does
    not write is removed: a stale band would not match these predictions.
    """
    import pandas as pd

    from lmdbio.lab.meta import write_results_meta
    from .estimates import BAND, estimates

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(band_columns(rows, sens or [])).to_csv(out / "predictions.csv", index=False)
    written = ["predictions.csv"]
    sobol = None
    if joint:
        from .sobol import sobol_table

        sobol = sobol_table(joint).to_dict("records")
    for name, data in (("sensitivity.csv", sens), ("joint.csv", joint), ("verdict_map.csv", maps),
                       ("sobol.csv", sobol)):
        if data:
            frame = pd.DataFrame(data)
            if name == "joint.csv":
                frame = joint_frame(frame)
            frame.to_csv(out / name, index=False, float_format=JOINT_FLOAT if name == "joint.csv" else None)
            written.append(name)
        elif (out / name).exists():
            (out / name).unlink()
    prof = storage_profile(platform, cal, platform.cache)
    meta = {"platform": {"file": platform.path, "name": platform.name,
                         "ranks_per_node": platform.ranks_per_node,
                         "cores_per_node": platform.cores_per_node,
                         "readers_per_node": platform.readers_per_node,
                         "storage": platform.storage, "cache": platform.cache,
                         "net_alpha_s": platform.net_alpha_s, "net_beta_s": platform.net_beta_s,
                         "explicit_inflight": explicit_depth(platform, cal)[0],
                         "explicit_inflight_from": explicit_depth(platform, cal)[1],
                         "sources": dict(platform.sources),
                         "workloads": [{**{fl.name: getattr(w, fl.name) for fl in fields(w)
                                           if fl.name not in ("sources", "ranges")},
                                        "ranges": {k: list(v) for k, v in w.ranges.items()},
                                        "sources": dict(w.sources)} for w in platform.workloads]},
            "default_batch": {w.name: w.batch for w in platform.workloads},
            "storage_profile": prof.as_dict() if prof is not None else None,
            "calibration": asdict(cal), "calibration_dir": str(cal_dir or ""),
            "files": written,
            "estimates": [{"estimate": e.name, "low": e.low, "high": e.high, "central": e.central,
                           "drawn": e.kind, "why": e.why} for e in estimates(platform)],
            "band": f"{int(100 * BAND[0])}-{int(100 * BAND[1])}% of the joint samples (joint.csv)",
            "phases": list(PHASES),
            "model": {"version": MODEL_VERSION, "sha256": model_hash(),
                      "hashed": "lmdbio/lab/model/*.py"},
            "note": "model parameters come from the platform file's sources and this machine's "
                    "microbenchmarks; nothing is fitted to the papers' speedups"}
    write_results_meta(out, config, **meta)
    return out
