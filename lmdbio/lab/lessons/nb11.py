"""Facts behind the prose of notebooks/11_scale_model.ipynb (see lmdbio.lab.lessons.prose)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .prose import claim_row, csv, word

#: Phrases whose numbers come from a source, not from this project's results: phrase -> source.
STATIC: dict[str, str] = {
    "at most 25%": "the validation criterion (lmdbio.lab.model.validate.CRITERION)",
    "spans more than 10x": "lmdbio.lab.claims.band_word (UNINFORMATIVE = 10)",
    "(lower bounds)": "lmdbio/lab/model/absolute.py: each bound with its source (bound_source)",
    "25%": "the validation criterion (lmdbio.lab.model.validate: median |relative error| <= 0.25)",
    "10 s and 100,000 s": "the poster's time axis (Poster 2018; lmdbio.lab.model.absolute.POSTER_AXIS_S)",
    "10 s to 100,000 s": "the poster's time axis (Poster 2018; lmdbio.lab.model.absolute.POSTER_AXIS_S)",
    "10-100,000 s": "the poster's time axis (Poster 2018; lmdbio.lab.model.absolute.POSTER_AXIS_S)",
    "100,000 s": "the top of the poster's time axis (Poster 2018; POSTER_AXIS_S)",
    "5-95%": "the band of the joint samples (lmdbio.lab.claims.MODEL_BAND)",
    "77x": "the poster's factor for C8 (Poster 2018; claims.CLAIMS paper_factor)",
    "10x": "claims.UNINFORMATIVE: a band wider than 10x is uninformative",
}

CIFAR = "cifar10-large-alexnet"


def _axis(root: Path) -> pd.DataFrame:
    """The poster-axis check of the model's CIFAR10-Large series (lmdbio.lab.model.absolute.axis_check)."""
    from ..model.absolute import axis_check

    return axis_check(csv(root, "model_prediction/absolute.csv"))


def _failed(root: Path) -> pd.DataFrame:
    a = _axis(root)
    return a[~a["inside"]].sort_values("worst_s", ascending=False)


def _default_batch(root: Path) -> str:
    meta = json.loads((Path(root) / "model_prediction" / "meta.json").read_text())
    return meta.get("default_batch", {}).get(CIFAR, "global")


def _criterion(root: Path, setting: str, cache: str) -> pd.Series:
    c = csv(root, "model_validation/criterion.csv")
    rows = c[c["setting"].str.startswith(setting) & (c["cache"] == cache)]
    if rows.empty:
        raise KeyError(f"no validation row for {setting}, {cache}")
    return rows.iloc[0]


def _short(variant: str) -> str:
    from ..claims import SHORT

    return SHORT.get(variant, variant)


def _failed_name(i: int):
    def f(root: Path) -> str:
        bad = _failed(root)
        return _short(bad["variant"].iloc[i]) if len(bad) > i else "none"
    return f


def _c8(root: Path) -> pd.Series:
    return claim_row(root, "C8", "model")


def _a1(root: Path, which: str) -> pd.Series:
    """A1 (the default batch reading) or A1-<other reading> of claims.csv."""
    return claim_row(root, "A1" if which == "default" else f"A1-{which}", "model")


def _meeting(setting: str, cache: str):
    return lambda root: int(_criterion(root, setting, cache)["variants_meeting"])


#: Fact name -> function of a results root (data/results, or a scratch run's results).
FACTS: dict = {
    # Validation (model_validation/criterion.csv): variants within the criterion per setting and cache.
    "variants": lambda root: int(_criterion(root, "local disk", "cold")["variants"]),
    "local_cold_meeting": _meeting("local disk", "cold"),
    "local_warm_meeting": _meeting("local disk", "warm"),
    "throttled_meeting": _meeting("throttled", "cold"),
    "shared_meeting": _meeting("shared", "cold"),
    "local_cold_worst_pct": lambda root: 100 * float(_criterion(root, "local disk", "cold")["worst_median_abs_error"]),
    # The worst cold local variant's short name (lmdbio-lmm-dio -> LMM-DIO).
    "local_cold_worst_label": lambda root: str(
        _criterion(root, "local disk", "cold")["worst_variant"]).removeprefix("lmdbio-").upper(),
    "local_cold_worst_signed_pct": lambda root: 100 * float(
        _criterion(root, "local disk", "cold")["worst_median_signed_error"]),
    # Whether the model predicts the local points too slow (both caches' worst variants over-predict).
    "local_direction": lambda root: word(
        all(float(_criterion(root, "local disk", c)["worst_median_signed_error"]) > 0 for c in ("cold", "warm")),
        "slow", "mixed"),
    # The poster's axis (model_prediction/absolute.csv, axis_check) and claims.csv's A1 rows.
    "default_batch": _default_batch,
    "series": lambda root: int(_axis(root).groupby("batch").size().max()),
    "default_failed": lambda root: int((~_axis(root).query("batch == @_default_batch(@root)")["inside"]).sum()),
    "per_process_failed": lambda root: int((~_axis(root).query("batch == 'per-process'")["inside"]).sum()),
    "default_max_s": lambda root: float(_axis(root).query("batch == @_default_batch(@root)")["max_s"].max()),
    "failed_1": _failed_name(0),
    "failed_2": _failed_name(1),
    "failed_batch": lambda root: str(_failed(root)["batch"].iloc[0]),
    "failed_procs": lambda root: ", ".join(f"{int(p):,}" for p in
                                           sorted({int(p) for s in _failed(root)["outside_procs"]
                                                   for p in s.split()})),
    "first_failed_p": lambda root: min(int(p) for s in _failed(root)["outside_procs"] for p in s.split()),
    "worst_s": lambda root: float(_failed(root)["worst_s"].iloc[0]),
    "worst_p": lambda root: int(_failed(root)["worst_nprocs"].iloc[0]),
    "worst_factor": lambda root: float(_failed(root)["worst_factor"].iloc[0]),
    "a1_verdict": lambda root: str(_a1(root, "default")["verdict"]),
    "a1_pp_verdict": lambda root: str(_a1(root, "per-process")["verdict"]),
    # The model's C8 row of claims.csv.
    "c8_verdict": lambda root: str(_c8(root)["verdict"]),
    "c8_value": lambda root: float(_c8(root)["value"]),
    "c8_low": lambda root: float(_c8(root)["band_low"]),
    "c8_high": lambda root: float(_c8(root)["band_high"]),
    "c8_magnitude": lambda root: str(_c8(root)["magnitude"]),
    "c8_p": lambda root: int(_c8(root)["nprocs"]),
}


def _problem(root: Path) -> int:
    """The paper problem (1-5) of the mechanism that dominates the worst point off the axis."""
    import re

    m = re.match(r"\((\d)\)", str(_failed(root)["worst_mechanism"].iloc[0]))
    if m is None:
        raise ValueError(f"no problem number in {_failed(root)['worst_mechanism'].iloc[0]!r}")
    return int(m[1])


def _validated_max_p(root: Path) -> int:
    """The most processes of any measured point the model was validated on."""
    return int(csv(root, "model_validation/summary.csv")["nprocs"].max())


def _validated_points(root: Path, setting: str) -> pd.DataFrame:
    """The measured points of one validation setting (``local disk``, ``shared storage target``...)."""
    s = csv(root, "model_validation/summary.csv")
    return s[s["setting"] == setting]


FACTS.update({
    "worst_problem": _problem,
    "validated_max_p": _validated_max_p,
    "local_max_p": lambda root: int(_validated_points(root, "local disk")["nprocs"].max()),
    "cores": lambda root: int(json.loads((Path(root) / "model_validation" / "meta.json").read_text())
                              ["host"]["cores"]),
    "extrapolation": lambda root: int(_c8(root)["nprocs"]) / _validated_max_p(root),
    "memcpy_gbps": lambda root: 1 / json.loads((Path(root) / "model_calibration" / "calibration.json")
                                               .read_text())["values"]["memcpy_byte_s"] / 1e9,
})


def _probe_gbs(root: Path) -> pd.Series:
    """GB/s of the same-sitting disk probes the local cold points were predicted with."""
    s = csv(root, "model_validation/summary.csv")
    s = s[(s["setting"] == "local disk") & (s["cache"] == "cold")
          & (s.get("disk_bw_source", pd.Series("", index=s.index)) == "same-sitting probe")]
    if s.empty:
        raise KeyError("no local cold point was predicted with a same-sitting disk probe")
    return s["disk_bw"] / 1e9


FACTS.update({
    "probe_median_gbs": lambda root: float(_probe_gbs(root).median()),
    "probe_low_gbs": lambda root: float(_probe_gbs(root).min()),
    "probe_high_gbs": lambda root: float(_probe_gbs(root).max()),
    "cal_disk_gbs": lambda root: json.loads((Path(root) / "model_calibration" / "calibration.json")
                                            .read_text())["values"]["disk_bw"] / 1e9,
    # The local cold variants within the criterion if every point used calibration's disk_bw.
    "local_cold_meeting_cal_disk": lambda root: int(
        _criterion(root, "local disk", "cold")["variants_meeting_calibrated_disk"]),
})
