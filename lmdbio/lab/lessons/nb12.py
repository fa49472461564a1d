"""Facts behind the prose of notebooks/12_beyond.ipynb (see lmdbio.lab.lessons.prose)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .prose import claim_row, csv, word  # noqa: F401

TARGETS = "issue #22's targets (lmdbio.lab.beyond.TARGETS; not a paper's claim)"
#: Phrases whose numbers come from a source, not from this project's results: phrase -> source.
STATIC: dict[str, str] = {
    "where the shard mode pays for its reads":
        ("lmdbio/shuffle.py's shard mode (a rank's share is a slice of the window); the mode table below "
         "computes share_distance"),
    ">= 0.8": TARGETS,
    ">= 3x": TARGETS,
    "target's 3x": TARGETS,
    ">= 90%": TARGETS,
    "below 10%": TARGETS,
    "1 ms per request": "the gpfs-2017 profile (lmdbio/lab/pfs/profiles.toml)",
    "1.5 times": "the overlap experiment's compute (lmdbio.lab.beyond: 1.5 x the I/O time of a batch)",
}

B = "12_beyond"

_TARGET_ROWS: dict[str, pd.DataFrame] = {}


def _targets(root: Path) -> pd.DataFrame:
    """``lmdbio.lab.beyond.verdicts`` of the results: one row per target, setting and P."""
    from .. import beyond

    root = Path(root)
    gpfs = root / B / "gpfs"
    rate_gpfs = csv(root, f"{B}/gpfs/rate.csv") if (gpfs / "rate.csv").exists() else None
    overlap = csv(root, f"{B}/gpfs/overlap.csv") if (gpfs / "overlap.csv").exists() else None
    return beyond.verdicts(csv(root, f"{B}/rate.csv"), rate_gpfs, overlap, csv(root, f"{B}/decode.csv"))


def _target(target: str, setting: str, which: str):
    """A target's row at the smallest (``which="min"``) or largest P of a setting."""
    def row(root: Path) -> pd.Series:
        t = _targets(root)
        t = t[(t["target"] == target) & (t["setting"] == setting)]
        if t.empty:
            raise KeyError(f"no {target} row in setting {setting}")
        return t.sort_values("nprocs").iloc[0 if which == "min" else -1]
    return row


def _quality(root: Path, mode: str, col: str):
    q = csv(root, f"{B}/shuffle_quality.csv").set_index("mode")
    return q.loc[mode, col]


def _epochs_ok(root: Path) -> tuple[int, int]:
    e = csv(root, f"{B}/epoch.csv")
    short = e[e["last_batch"] == "short"]
    return int(short["exactly_once"].sum()), len(short)


FACTS: dict = {
    "epochs_exact": lambda root: _epochs_ok(root)[0],
    "epochs_short": lambda root: _epochs_ok(root)[1],
    "epochs_word": lambda root: word(_epochs_ok(root)[0] == _epochs_ok(root)[1], "every", "not every"),
}
for _t, _s, _w in [("shuffle-vs-unshuffled", "local", "min"), ("shuffle-vs-unshuffled", "local", "max"),
                   ("shuffle-vs-get", "local", "min"), ("shuffle-vs-get", "local", "max"),
                   ("shard-vs-unshuffled", "local", "max"), ("shard-vs-get", "local", "max"),
                   ("shuffle-vs-unshuffled", "gpfs", "max"), ("shuffle-vs-get", "gpfs", "max"),
                   ("shard-vs-unshuffled", "gpfs", "max"), ("shard-vs-get", "gpfs", "max"),
                   ("prefetch", "gpfs", "min"), ("prefetch", "gpfs", "max"),
                   ("decode-vs-raw", "local", "min"), ("decode-vs-raw", "local", "max")]:
    _name = f"{_t.replace('-', '_')}_{_s}_{_w}"
    _row = _target(_t, _s, _w)
    FACTS[_name] = (lambda r: lambda root: float(r(root)["value"]))(_row)
    FACTS[_name + "_verdict"] = (lambda r: lambda root: str(r(root)["verdict"]))(_row)
    FACTS[_name + "_p"] = (lambda r: lambda root: int(r(root)["nprocs"]))(_row)
    if _t == "prefetch":   # the target is 1 - the I/O share: the share left to I/O, in percent
        FACTS[_name + "_share_pct"] = (lambda r: lambda root: 100 * (1 - float(r(root)["value"])))(_row)

for _m in ("file", "window", "shard", "elastic", "uniform"):
    _k = _m.replace("-", "_")
    for _c in ("entropy_score", "class_share_median", "class_share_worst", "bytes_ratio", "requests_ratio"):
        FACTS[f"{_k}_{_c}"] = (lambda m, c: lambda root: float(_quality(root, m, c)))(_m, _c)
    FACTS[f"{_k}_class_share_median_pct"] = (lambda m: lambda root: 100 * float(
        _quality(root, m, "class_share_median")))(_m)
FACTS["classes"] = lambda root: int(_quality(root, "file", "classes"))
FACTS["uniform_share_vs_classes"] = lambda root: word(
    float(_quality(root, "uniform", "class_share_median")) > 1 / int(_quality(root, "file", "classes")),
    "more", "less")
FACTS["window_mixes_like_uniform"] = lambda root: word(
    float(_quality(root, "window", "class_share_median"))
    <= 1.5 * float(_quality(root, "uniform", "class_share_median")), "as well as", "worse than")


def _cores(root) -> int:
    import json

    return int(json.loads((Path(root) / B / "meta.json").read_text())["host"]["cores"])


FACTS["cores"] = _cores
# the shuffled epoch against per-record lmdb-get at the largest local P
FACTS["shuffle_vs_get_local_max_word"] = lambda root: word(
    FACTS["shuffle_vs_get_local_max"](root) < 1, "slower", "faster")


def _dali_decode_rounds(root) -> int:
    """Rounds in which DALI's decoding series has a rate (0: DALI did not run there)."""
    d = csv(root, f"{B}/decode.csv")
    return int(d.loc[d["series"] == "dali-caffe", "records_per_s"].notna().sum())


FACTS["dali_entropy_score"] = lambda root: float(_quality(root, "dali-caffe", "entropy_score"))
FACTS["dali_class_share_median_pct"] = lambda root: 100 * float(_quality(root, "dali-caffe", "class_share_median"))
FACTS["dali_class_share_worst_pct"] = lambda root: 100 * float(_quality(root, "dali-caffe", "class_share_worst"))
FACTS["dali_initial_fill"] = lambda root: int(
    csv(root, f"{B}/shuffle_quality.csv").set_index("mode").loc["dali-caffe", "note"]
    .split("initial_fill=")[1].split(",")[0])
FACTS["dali_decode_rounds"] = _dali_decode_rounds
FACTS["window_blocks"] = lambda root: int(_quality(root, "window", "window"))
FACTS["block_records"] = lambda root: int(_quality(root, "window", "block"))
FACTS["records_per_class"] = lambda root: int(_quality(root, "file", "records")) // int(_quality(root, "file", "classes"))


def _verdicts(root, setting: str) -> set:
    t = _targets(root)
    return set(t.loc[t["setting"] == setting, "verdict"])


FACTS["gpfs_targets_word"] = lambda root: word(_verdicts(root, "gpfs") == {"yes"}, "hold", "do not all hold")
FACTS["local_targets_word"] = lambda root: word(_verdicts(root, "local") == {"no"}, "every", "not every")
