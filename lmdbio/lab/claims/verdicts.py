"""The verdicts and their words: one definition of each, used by every table."""

from __future__ import annotations

import math

from lmdbio import registry

__all__ = ["SETTINGS", "SETTING_LABELS", "COLUMNS", "DETAILS", "NOT_MEASURED", "VERDICTS", "FULL",
           "NO_FACTOR", "FACTOR_TOLERANCE", "MODEL_DIR", "REPEATS_DIR", "QCOLS", "SHORT",
           "direction", "band_verdict", "magnitude", "UNINFORMATIVE", "NOT_JUDGED", "num",
           "band_word", "fmt", "outside_band"]


SETTINGS = ("local", "gpfs", "throttled", "shared", "model")


SETTING_LABELS = {"local": "local disk, measured", "gpfs": "emulated GPFS, measured",
                  "throttled": "throttled block device, measured",
                  "shared": "shared throttled target, measured",
                  "model": "papers' scale, model"}


COLUMNS = ["claim", "setting", "measured", "criterion", "verdict", "why"]


DETAILS = ["magnitude", "band_low", "band_high", "paper_factor", "dataset", "repeats", "decides",
           "paper", "notebook", "quantity", "nprocs", "value", "threshold", "source"]


#: A shared-setting row whose quantity needs an experiment the shared sweep does not run.
NOT_MEASURED = "not measured"


#: Every verdict a row can have ("no data": the setting has no results).
VERDICTS = ("yes", "no", "inconclusive", "open", "not judged by the model", NOT_MEASURED, "no data")


FULL = "lmdbio-lmm-dio-prov-coal-stag"


#: The magnitude where the paper states no factor (not "n/a": pandas would read it back as NaN).
NO_FACTOR = "no paper factor"


#: A factor within this of the paper's is "reproduced".
FACTOR_TOLERANCE = 2.0


#: Where the model setting's predictions are, under a results root.
MODEL_DIR = "model_prediction"


#: Where repeated measurements are, under a results root (optional).
REPEATS_DIR = "repeats"


QCOLS = ["nprocs", "value", "lo", "hi", "repeats", "decides", "context"]


#: The papers' variants by their short names (:func:`lmdbio.registry.short_name`): "LMDB", the
#: optimization each adds to the one before it ("DM", "COAL"), "full stack".
SHORT = {v: registry.short_name(v) for v in registry.series()}


def direction(lo: float, hi: float, threshold: float) -> str:
    """A measured setting's verdict from the smallest and largest repeat of its quantity."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "no data"
    if lo >= threshold:
        return "yes"
    if hi < threshold:
        return "no"
    return "inconclusive"


def band_verdict(low: float, high: float, threshold: float) -> str:
    """The model's verdict from its lowest and highest joint sample: yes/no only when every
    sample is on one side of the threshold, else open."""
    v = direction(low, high, threshold)
    return "open" if v == "inconclusive" else v


def magnitude(value: float, paper_factor: float | None, tolerance: float = FACTOR_TOLERANCE) -> str:
    """The value against the paper's own factor: reproduced (within ``tolerance``x), smaller, larger."""
    if paper_factor is None or not (paper_factor > 0) or not math.isfinite(value):
        return NO_FACTOR
    if value < paper_factor / tolerance:
        return "smaller"
    if value > paper_factor * tolerance:
        return "larger"
    return "reproduced"


#: A model band wider than this (high / low) says little: its band word is "uninformative".
UNINFORMATIVE = 10.0


NOT_JUDGED = "not judged by the model"


def num(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"


def band_word(lo: float, hi: float, paper_factor: float | None) -> str:
    """A model band against the paper's factor: ``smaller``/``larger`` when the whole band lies
    below f/2 / above 2f (however wide: it contradicts the paper either way), else
    ``uninformative`` when it spans more than 10x, else ``consistent`` (it overlaps [f/2, 2f])."""
    if paper_factor is None or not (paper_factor > 0) or not (math.isfinite(lo) and math.isfinite(hi)):
        return NO_FACTOR
    if hi < paper_factor / FACTOR_TOLERANCE:
        return "smaller"
    if lo > paper_factor * FACTOR_TOLERANCE:
        return "larger"
    if lo > 0 and hi / lo > UNINFORMATIVE:
        return "uninformative"
    return "consistent"


def fmt(v: float, threshold: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    return f"{v:.2f}" if threshold < 2 else f"{v:.1f}"


def outside_band(value: str, below: bool) -> str:
    """Why a model value (every estimate at its central value) can lie outside its own band."""
    return (f"the central estimates give {value}, {'below' if below else 'above'} the band (the "
            "middle 90% of the joint samples): a ratio that is not linear in its estimates need not "
            "fall inside it at their central values")
