"""The papers' claims: one registry, each with a quantity, a criterion and the paper's own factor."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

import pandas as pd

from ..scales import COMMITTED_RESULTS
from .bands import model_claim
from .values import (
    cold_summary,
    dominant_measured,
    measured_throughput,
    read_repeats,
    timeline_ratio,
    timeline_throughput,
)
from .verdicts import FULL, MODEL_DIR

__all__ = ["Claim", "CIFAR", "IMAGENET", "CLAIMS", "TRAINING", "BY_ID", "SHARED_NOT_MEASURED",
           "claim", "claim_ids", "setting_dir", "resolve", "CHECKS"]


@dataclass(frozen=True)
class Claim:
    """One of the papers' claims: where it is shown, what is measured, when it holds, the paper's factor.

    ``measured(setting, folder, results_root)`` returns a DataFrame with
    ``QCOLS`` (``lo``/``hi``: the smallest and largest repeat) or None when the
    folder has no results; ``model(folder, threshold)`` the same for the model
    (``lo``/``hi``: the band over the estimates). The verdict compares them with
    ``threshold`` at the largest P; ``paper_factor`` is the paper's own number
    for :func:`magnitude` (None where the paper states none).
    """

    id: str
    notebook: str
    paper: str
    statement: str
    quantity_name: str
    short: str
    threshold: float
    measured: Callable = field(repr=False)
    model: Callable = field(repr=False)
    paper_factor: float | None = None
    dataset: str = ""
    ylabel: str = ""   # the figures' y axis (default: ``short``)

    @property
    def criterion(self) -> str:
        return f"{self.short} >= {self.threshold:g} at the largest P, cold"

    def quantity(self, setting: str, d: Path, results_root=None) -> pd.DataFrame | None:
        if setting == "model":
            return self.model(d, self.threshold)
        if setting == "shared" and self.id in SHARED_NOT_MEASURED:
            return None
        return self.measured(setting, d, results_root)


def _dataset(setting: str, dataset: str | None) -> str | None:
    """The records a setting's points are taken from: the claim's, except in the shared setting,
    whose sweep reads one dataset (its rows and meta.json say which)."""
    return None if setting == "shared" else dataset


def _throughput(slow: str, fast: str, dataset: str, col: str = "records_per_s"):
    def q(setting: str, d: Path, root):
        rep = read_repeats(root, setting) if root is not None else None
        if rep is not None:
            r = measured_throughput(rep, slow, fast, col, dataset)
            if r is not None and len(r):
                return r
        return measured_throughput(cold_summary(d), slow, fast, col, _dataset(setting, dataset))
    return q


def _io_share(setting: str, d: Path, root):
    """LMDB's I/O (read + wait) share of one emulated training iteration."""
    s = cold_summary(d)
    if s is None:
        return None
    s = s[(s["variant"] == "lmdb") & (s["dataset_name"] == "imagenet")]
    parts = s[["read_s", "wait_s", "comm_s", "compute_s"]]
    s = s.assign(share=(s["read_s"] + s["wait_s"]) / parts.sum(axis=1))
    g = s.groupby("nprocs")["share"]
    out = pd.DataFrame({"value": g.median(), "lo": g.min(), "hi": g.max(), "repeats": g.size()}).reset_index()
    out["decides"] = ""
    out["context"] = [f"LMDB: {dominant_measured(s[s.nprocs == p])}" for p in out["nprocs"]]
    return out


def _prov_run(setting: str, d: Path, root):
    """DIO/PROV I/O time of a whole run, setup included (the index pass PROV removes)."""
    s = cold_summary(d)
    if s is None or "setup_s" not in s.columns:
        return None
    s = s.assign(run_inv=1.0 / (s["setup_s"] + s["wall_s"]))
    r = measured_throughput(s, "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov", "run_inv", "cifar10")
    if r is not None and len(r):
        sd = s[s["dataset_name"] == "cifar10"] if "dataset_name" in s.columns else s
        r["context"] = [f"DIO's setup {100 * _share(sd, 'lmdbio-lmm-dio', p):.0f}% of its run, "
                        f"PROV's {100 * _share(sd, 'lmdbio-lmm-dio-prov', p):.0f}%" for p in r["nprocs"]]
    return r


def _share(s, v, p):
    x = s[(s.variant == v) & (s.nprocs == p)]
    return float((x["setup_s"] / (x["setup_s"] + x["wall_s"])).median()) if len(x) else float("nan")


def _coal(setting: str, d: Path, root):
    """COAL at the reference default (4 MiB, or the largest size below it) over no COAL."""
    base, coal = "lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal"
    rep = read_repeats(root, setting) if root is not None else None
    if rep is not None:
        r = measured_throughput(rep, base, coal, "records_per_s", "cifar10")
        if r is not None and len(r):
            return r
    pts = timeline_throughput(d)
    if pts is None:   # a bench sweep (the shared setting): COAL at the Reader's default, 4 MiB
        return measured_throughput(cold_summary(d), base, coal, "records_per_s", _dataset(setting, "cifar10"))
    sizes = sorted(pts.loc[pts["variant"] == coal, "coalesce_bytes"].dropna().unique())
    if not sizes:
        return None
    size = max([s for s in sizes if s <= 4 << 20] or sizes[:1])
    return timeline_ratio(pts[pts["variant"] == base],
                           pts[(pts["variant"] == coal) & (pts["coalesce_bytes"] == size)], base, coal)


def _stag(setting: str, d: Path, root):
    """STAG over the same stack without it, the largest P, cold."""
    base, stag = "lmdbio-lmm-dio-prov-coal", FULL
    rep = read_repeats(root, setting) if root is not None else None
    if rep is not None:
        r = measured_throughput(rep, base, stag, "records_per_s", "imagenet")
        if r is not None and len(r):
            return r
    pts = timeline_throughput(d)
    if pts is None:   # a bench sweep (the shared setting): STAG's default group, half the readers
        return measured_throughput(cold_summary(d), base, stag, "records_per_s", _dataset(setting, "imagenet"))
    return timeline_ratio(pts[pts["variant"] == base], pts[pts["variant"] == stag], base, stag)


def _training(setting: str, d: Path, root):
    """Full LMDBIO over LMDB in emulated training time (compute, allreduce and I/O)."""
    s = cold_summary(d)
    if s is None:
        return None
    s = s.assign(inv_wall=1.0 / s["wall_s"])
    return measured_throughput(s, "lmdb", FULL, "inv_wall", "imagenet")


CIFAR, IMAGENET = "cifar10-large-alexnet", "imagenet-caffenet"


CLAIMS: tuple[Claim, ...] = (
    Claim("C1", "02_lmdb_analysis", "TOPC 2019",
          "With LMDB, I/O takes up to 90% of training time",
          "LMDB's I/O share of an emulated training iteration (ImageNet records, AlexNet compute)",
          "I/O share", 0.5, _io_share, model_claim((IMAGENET, CIFAR), "lmdb", None, "io_s"),
          paper_factor=0.9, dataset="imagenet", ylabel="I/O share of an iteration"),
    Claim("C2", "03_lmm", "HPCC 2017",
          "LMDBIO-LMM (one reader per node) is up to 20x faster than LMDB",
          "LMM/LMDB read throughput (ImageNet records)",
          "LMM/LMDB", 1.2, _throughput("lmdb", "lmdbio-lmm", "imagenet"),
          model_claim((IMAGENET, CIFAR), "lmdb", "lmdbio-lmm", "io_s"), paper_factor=20.0, dataset="imagenet"),
    Claim("C3", "04_dm", "ICPADS 2017",
          "LMDBIO-DM (cursor handed around a ring) is 2x faster than LMDBIO-LMM",
          "DM/LMM read throughput, one reader per rank (CIFAR-10 records)",
          "DM/LMM", 1.2, _throughput("lmdbio-lmm", "lmdbio-lmm-dm", "cifar10"),
          model_claim((CIFAR, IMAGENET), "lmdbio-lmm", "lmdbio-lmm-dm", "io_s"), paper_factor=2.0, dataset="cifar10"),
    Claim("C4", "05_dio", "TOPC 2019",
          "Direct I/O removes mmap's page-fault overheads (problem 3) and is faster",
          "DIO/LMM read throughput (ImageNet records)",
          "DIO/LMM", 1.2, _throughput("lmdbio-lmm", "lmdbio-lmm-dio", "imagenet"),
          model_claim((IMAGENET, CIFAR), "lmdbio-lmm", "lmdbio-lmm-dio", "io_s"), dataset="imagenet"),
    Claim("C5", "06_prov", "TOPC 2019",
          "Provenance removes DIO's sequential index pass",
          "PROV/DIO throughput of a whole run, reader setup included (CIFAR-10 records)",
          "PROV/DIO, setup included", 1.2, _prov_run,
          model_claim((CIFAR, IMAGENET), "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov", "io_s"), dataset="cifar10",
          ylabel="PROV/DIO, setup included"),
    Claim("C6", "07_coal", "TOPC 2019",
          "Coalescing several iterations into MiB-sized requests raises throughput (problem 4)",
          "COAL (about 4 MiB requests)/no COAL read throughput (CIFAR-10 records)",
          "COAL/no COAL", 1.2, _coal,
          model_claim((CIFAR, IMAGENET), "lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal", "io_s"),
          dataset="cifar10"),
    Claim("C7", "08_stag", "TOPC 2019",
          "Staggering the readers' I/O in groups reduces storage contention (problem 5)",
          "STAG/no STAG read throughput, one reader per rank (ImageNet records)",
          "STAG/no STAG", 1.2, _stag,
          model_claim((IMAGENET, CIFAR), "lmdbio-lmm-dio-prov-coal", FULL, "io_s"), dataset="imagenet"),
    Claim("C8", "09_scaling", "Poster 2018",
          "The full LMDBIO stack is 77x faster than LMDB at 9,216 processes (CIFAR10-Large)",
          "LMDBIO-LMM-DIO-PROV-COAL-STAG/LMDB read throughput (CIFAR-10 records)",
          "full stack/LMDB", 10.0, _throughput("lmdb", FULL, "cifar10"),
          model_claim(CIFAR, "lmdb", FULL, "total_s"), paper_factor=77.0, dataset="cifar10"),
    Claim("C8-imagenet", "09_scaling", "TOPC 2019",
          "The full LMDBIO stack is up to 65x faster than LMDB at 9,216 processes (ImageNet)",
          "LMDBIO-LMM-DIO-PROV-COAL-STAG/LMDB read throughput (ImageNet records)",
          "full stack/LMDB", 10.0, _throughput("lmdb", FULL, "imagenet"),
          model_claim(IMAGENET, "lmdb", FULL, "total_s"), paper_factor=65.0, dataset="imagenet"),
)


#: Not a claim of its own: the training view of C1 and C8 that notebook 10 shows.
TRAINING = Claim("T", "10_training", "TOPC 2019",
                 "LMDBIO brings Caffe's total training time down (up to 65x on 9,216 cores)",
                 "LMDB/full LMDBIO emulated training time (ImageNet records, AlexNet compute)",
                 "LMDB/full stack training time", 1.2, _training,
                 model_claim(IMAGENET, "lmdb", FULL, "total_s"), paper_factor=65.0, dataset="imagenet",
                 ylabel="training time LMDB / full stack")


BY_ID = {c.id: c for c in (*CLAIMS, TRAINING)}


#: The claims the shared setting cannot judge, and why: the shared sweep (``make bench-shared``)
#: times reading alone (no compute or allreduce) on CIFAR-10 records.
SHARED_NOT_MEASURED = {
    "C1": ("LMDB's I/O share of a training iteration needs the emulated compute and allreduce "
           "(ImageNet records, AlexNet compute); the shared sweep times reading alone (compute_time 0) "
           "on CIFAR-10 records"),
    "C8-imagenet": "the shared sweep reads CIFAR-10 records only; C8 judges the full stack over LMDB on them",
    "T": ("the training time needs the emulated compute and allreduce on ImageNet records; the shared "
          "sweep times reading alone (compute_time 0) on CIFAR-10 records"),
}


def claim(claim_id: str) -> Claim:
    """The claim ``C1`` .. ``C8``, ``C8-imagenet`` (or ``T``, notebook 10's training view)."""
    try:
        return BY_ID[claim_id]
    except KeyError:
        raise KeyError(f"no claim {claim_id!r}; the claims are {', '.join(BY_ID)}") from None


def claim_ids(ids) -> set:
    """Claim ids with their per-dataset variants (``C8`` also selects ``C8-imagenet``)."""
    if isinstance(ids, str):
        ids = [ids]
    want = set(ids)
    known = (*BY_ID, *CHECKS)
    unknown = sorted(w for w in want if not any(c == w or c.split("-")[0] == w for c in known))
    if unknown:
        raise ValueError(f"no claim or check named {', '.join(map(repr, unknown))}; "
                         f"the ids are {', '.join(sorted({c.split('-')[0] for c in known}))}")
    return {c for c in known if c in want or c.split("-")[0] in want}


def setting_dir(results_root: str | Path, notebook: str, setting: str) -> Path:
    """Where a setting's results are: ``NN_name/``, ``NN_name/gpfs/`` or ``model_prediction/``.

    The model setting is ``model_prediction/`` (``lmdbio model predict``: predictions and the
    band of joint.csv), except in a notebook run's own results root, where a claim
    notebook's model cell wrote ``NN_name/model/`` this run (no band: its verdict says so).
    """
    if setting == "model":
        own = Path(results_root) / notebook / "model"
        if (notebook and Path(results_root).resolve() != COMMITTED_RESULTS.resolve()
                and (own / "meta.json").exists()):
            return own
        return Path(results_root) / MODEL_DIR
    base = Path(results_root) / notebook
    return base if setting == "local" else base / setting


def resolve(results_root, notebook: str, setting: str, fallback: bool = True) -> tuple[Path, str]:
    """A setting's results folder and where it is: ``"here"``, or ``"committed"`` when
    ``results_root`` has none and ``fallback`` allows the repository's copy."""
    d = setting_dir(results_root, notebook, setting)
    if (d / "meta.json").exists() or not fallback:
        return d, "here"
    return setting_dir(COMMITTED_RESULTS, notebook, setting), "committed"


#: The model's own checks (rows of claims.csv, model setting): id -> statement.
CHECKS = {"A1": "The model's CIFAR10-Large series lie on the poster's time axis (10-100,000 s) at every P, "
                "global batch (the reference code's reading)",
          "A1-per-process": "The model's CIFAR10-Large series lie on the poster's time axis (10-100,000 s) "
                            "at every P, batch per process (weak scaling)"}
