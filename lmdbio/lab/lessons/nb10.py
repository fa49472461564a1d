"""Facts behind the prose of notebooks/10_training.ipynb (see lmdbio.lab.lessons.prose).

T (LMDB's training time over the full stack's) is notebook 10's quantity:
``lmdbio.lab.claims.TRAINING``, the view of C1 and C8 that this notebook
shows; it is judged here and not written to ``claims.csv``. The prefetch
series is ``10_training/prefetch/overlap.csv`` (a row per rank, depth and
repeat), summarised as its figure does: the mean over ranks of each repeat,
then the median of the repeats.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .prose import claim_row, cores, csv, word

NB = "10_training"


def t_series(root: Path) -> dict:
    """T in every setting with data: ``{setting: DataFrame(nprocs, value, lo, hi, ...)}``."""
    from .. import claims

    return claims.series(claims.claim("T"), root)


def t_rows(root: Path) -> pd.DataFrame:
    """T's verdict rows (one per setting; the model's for ImageNet), as the closing cell shows them."""
    from .. import claims

    return claims.evaluate(root, [claims.claim("T")]).set_index("setting")


def _t_local(p: int):
    def f(root):
        s = t_series(root)["local"].set_index("nprocs")
        return float(s.loc[p, "value"])
    return f


def _t_word(p: int):
    return lambda root: word(_t_local(p)(root) < 1, "slower", "faster")


FULL = "lmdbio-lmm-dio-prov-coal-stag"


def _summary_ms(variant: str, col: str, p="max"):
    """``col`` of ``variant`` at P (``"max"``: the largest) in ms per rank (mean of the repeats, as
    the training figure)."""
    def f(root):
        s = csv(root, f"{NB}/summary.csv")
        s = s[(s["variant"] == variant) & (s["nprocs"] == (s["nprocs"].max() if p == "max" else p))]
        return 1e3 * float(s[col].mean())
    return f


def _trend(variants, col: str, up: str, down: str):
    """``up`` when ``col`` grows from P = 1 to the largest P for every variant, ``down`` when it
    falls for every one, else ``mixed``."""
    def f(root):
        rising = {_summary_ms(v, col, "max")(root) > _summary_ms(v, col, 1)(root) for v in variants}
        return up if rising == {True} else down if rising == {False} else "mixed"
    return f


def _t(setting: str, col: str = "value"):
    def f(root):
        v = t_rows(root).loc[setting, col]
        return v if col in ("verdict", "magnitude") else float(v)
    return f


def prefetch(root: Path) -> pd.DataFrame:
    """Per (P, depth): wall, I/O wait, compute and allreduce seconds (the figure's summary)."""
    o = csv(root, f"{NB}/prefetch/overlap.csv")
    d = o[o["depth"] >= 0].groupby(["nprocs", "depth", "repeat"])[
        ["wall_s", "io_wait_s", "compute_s", "comm_s"]].mean()
    return d.groupby(["nprocs", "depth"]).median()


def _pf(p, depth, col):
    def f(root):
        d = prefetch(root)
        pp = int(d.index.get_level_values(0).max()) if p == "max" else p
        dd = int(d.index.get_level_values(1).max()) if depth == "max" else depth
        return float(d.loc[(pp, dd), col])
    return f


def _pf_change(p):
    """Percent change of the wall time with the deepest prefetch against none, at P (positive: slower)."""
    def f(root):
        return 100 * (_pf(p, "max", "wall_s")(root) / _pf(p, 0, "wall_s")(root) - 1)
    return f


#: Phrases whose numbers come from a source, not from this project's results: phrase -> source.
STATIC: dict[str, str] = {
    "middle 90%": "the model's band: 5-95% of the joint samples (lmdbio.lab.model.uncertainty)",
    "90%": "TOPC 2019: I/O up to 90% of training time with LMDB",
    "65x": "TOPC 2019: Caffe's total time with LMDBIO, up to 65x lower on 9,216 cores",
    "0.33 ms per sample": "lmdbio/lab/emulation.py: compute_time='alexnet', an assumed V100-class rate",
    "10 ms per batch": "the demo's and notebooks/solutions/10_prefetch_depth.py's COMPUTE_S, a parameter",
}

#: Fact name -> function of a results root (data/results, or a scratch run's results).
FACTS: dict = {
    **{f"t_local_p{p}": _t_local(p) for p in (1, 2, 4, 8)},
    **{f"t_word_p{p}": _t_word(p) for p in (1, 2, 4, 8)},
    "t_n_slower": lambda root: int((t_series(root)["local"]["value"] < 1).sum()),
    "t_n_p": lambda root: int(len(t_series(root)["local"])),
    "t_local": _t("local"), "t_gpfs": _t("gpfs"), "t_throttled": _t("throttled"), "t_model": _t("model"),
    "t_model_lo": _t("model", "band_low"), "t_model_hi": _t("model", "band_high"),
    "t_local_verdict": _t("local", "verdict"), "t_gpfs_verdict": _t("gpfs", "verdict"),
    "t_throttled_verdict": _t("throttled", "verdict"), "t_model_verdict": _t("model", "verdict"),
    "t_gpfs_magnitude": _t("gpfs", "magnitude"), "t_throttled_magnitude": _t("throttled", "magnitude"),
    "t_model_magnitude": _t("model", "magnitude"),
    "t_lo_maxp": lambda root: float(t_series(root)["local"].iloc[-1]["lo"]),
    "t_hi_maxp": lambda root: float(t_series(root)["local"].iloc[-1]["hi"]),
    "wait_full_ms_maxp": _summary_ms(FULL, "wait_s"),
    "wait_lmdb_ms_maxp": _summary_ms("lmdb", "wait_s"),
    # per rank, P = 1 against the largest P: compute and reading fall, the allreduce grows
    "compute_lmdb_ms_p1": _summary_ms("lmdb", "compute_s", 1),
    "compute_lmdb_ms_maxp": _summary_ms("lmdb", "compute_s"),
    "read_lmdb_ms_p1": _summary_ms("lmdb", "read_s", 1),
    "read_lmdb_ms_maxp": _summary_ms("lmdb", "read_s"),
    "read_full_ms_p1": _summary_ms(FULL, "read_s", 1),
    "read_full_ms_maxp": _summary_ms(FULL, "read_s"),
    "comm_lmdb_ms_p1": _summary_ms("lmdb", "comm_s", 1),
    "comm_lmdb_ms_maxp": _summary_ms("lmdb", "comm_s"),
    "read_word": _trend(("lmdb", FULL), "read_s", "grows", "falls"),
    "comm_word": _trend(("lmdb", FULL), "comm_s", "grows", "falls"),
    "cores": lambda root: cores(root, NB),
    # the model's central estimate against its own band (a ratio need not fall inside it)
    "t_model_vs_band": lambda root: word(_t("model")(root) < _t("model", "band_low")(root), "below",
                                         word(_t("model")(root) > _t("model", "band_high")(root),
                                              "above", "inside")),
    "t_max_p": lambda root: int(t_series(root)["local"]["nprocs"].max()),
    # prefetch: deepest depth against none, at P = 1 and at the largest P
    "pf_depth": lambda root: int(prefetch(root).index.get_level_values(1).max()),
    "pf_max_p": lambda root: int(prefetch(root).index.get_level_values(0).max()),
    "pf_change_p1_pct": lambda root: abs(_pf_change(1)(root)),
    "pf_word_p1": lambda root: word(_pf_change(1)(root) > 0, "slower", "faster"),
    **{f"pf_change_p{p}_pct": (lambda at: lambda root: abs(_pf_change(at)(root)))(p) for p in (2, 4)},
    **{f"pf_word_p{p}": (lambda at: lambda root: word(_pf_change(at)(root) > 0, "slower", "faster"))(p)
       for p in (2, 4)},
    "pf_n_faster": lambda root: sum(_pf_change(int(p))(root) < 0
                                    for p in prefetch(root).index.get_level_values(0).unique()),
    "pf_n_p": lambda root: int(prefetch(root).index.get_level_values(0).nunique()),
    "pf_change_maxp_pct": lambda root: abs(_pf_change("max")(root)),
    "pf_word_maxp": lambda root: word(_pf_change("max")(root) > 0, "slower", "faster"),
    "pf_wait_d0_maxp_ms": lambda root: 1e3 * _pf("max", 0, "io_wait_s")(root),
    "pf_wait_d_maxp_ms": lambda root: 1e3 * _pf("max", "max", "io_wait_s")(root),
    "pf_comm_d0_maxp_ms": lambda root: 1e3 * _pf("max", 0, "comm_s")(root),
    "pf_comm_d_maxp_ms": lambda root: 1e3 * _pf("max", "max", "comm_s")(root),
    "pf_comm_word_maxp": lambda root: word(_pf("max", "max", "comm_s")(root) > _pf("max", 0, "comm_s")(root),
                                           "grows", "shrinks"),
    # C1 and C8, judged in notebooks 02 and 09, at the largest P on local disk
    "c1_local": lambda root: float(claim_row(root, "C1", "local")["value"]),
    "c1_gpfs": lambda root: float(claim_row(root, "C1", "gpfs")["value"]),
}
