"""The model setting: predictions and their band over the joint samples of every estimate."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Callable

import numpy as np
import pandas as pd

from .verdicts import SHORT, num

__all__ = ["MODEL_BAND", "FLOOR_BW", "WORKLOAD_OF", "DATASET_OF", "default_batch", "model_frames",
           "band_frame", "decider_words", "model_claim"]


#: The model's band: 5-95% of the joint samples (lmdbio.lab.model.uncertainty).
MODEL_BAND = (0.05, 0.95)


#: Aggregate read bandwidth of the papers' storage at its most generous (lmdbio.lab.model.absolute):
#: the floor below which no I/O of one iteration can go.
FLOOR_BW = 23e9


#: The papers' workloads in the model, by the dataset name the claims use.
WORKLOAD_OF = {"cifar10": "cifar10-large-alexnet", "imagenet": "imagenet-caffenet"}


DATASET_OF = {w: d for d, w in WORKLOAD_OF.items()}


def _io_s(p: pd.DataFrame) -> pd.Series:
    # I/O time: the setup and every iteration's phases other than compute and the allreduce.
    return p["setup_s"] + p["iterations"] * (p["per_iteration_s"] - p["compute_s"] - p["communicate_s"])


def default_batch(d: Path, workload: str) -> str | None:
    """The batch reading the verdicts use (meta.json's ``default_batch``; None: not recorded)."""
    f = d / "meta.json"
    try:
        import json
        return json.loads(f.read_text()).get("default_batch", {}).get(workload)
    except (OSError, ValueError, AttributeError):
        return None


def model_frames(d: Path, workload: str) -> tuple[pd.DataFrame, pd.DataFrame | None] | None:
    """The central predictions and the joint samples of one workload, under its default batch."""
    f = d / "predictions.csv"
    if not f.exists():
        return None
    p = pd.read_csv(f)
    batch = default_batch(d, workload)

    def pick(df):
        df = df[df["workload"] == workload]
        if "cache" in df.columns:
            df = df[df["cache"] == "cold"]
        if "batch" in df.columns:
            df = df[df["batch"] == (batch or df["batch"].iloc[0])] if len(df) else df
        return df.assign(io_s=_io_s(df))
    p = pick(p)
    s = pick(pd.read_csv(d / "joint.csv")) if (d / "joint.csv").exists() else None
    return p, s


def band_frame(central: pd.DataFrame, joint: pd.DataFrame | None, value: Callable[..., pd.Series]
          ) -> pd.DataFrame:
    """value per P (central) and over the joint samples: the 5-95% band, every sample's extremes,
    and per P a frame of the samples (their estimate columns and the value) for the deciders.
    ``value(df, index=...)`` pivots ``df`` by ``index`` (``"nprocs"``, or sample and P)."""
    c = value(central).rename("value")
    out = c.to_frame()
    out["lo"] = out["hi"] = out["smin"] = out["smax"] = out["value"]
    out["samples"] = 0
    out["decides"] = ""
    out["frames"] = [None] * len(out)
    if joint is not None and len(joint):
        xcols = [k for k in joint.columns if k.startswith("x:")]
        # One pivot over (sample, P) for every sample at once.
        per = value(joint, index=["sample", "nprocs"]).rename("v").reset_index().dropna()
        xs = joint.drop_duplicates("sample").set_index("sample")[xcols]
        for p, g in per.groupby("nprocs"):
            if p not in out.index or not len(g):
                continue
            v = g["v"].to_numpy(float)
            out.at[p, "lo"], out.at[p, "hi"] = (float(np.quantile(v, MODEL_BAND[0])),
                                                 float(np.quantile(v, MODEL_BAND[1])))
            # The central values are one more configuration: a verdict must hold there too.
            c0 = float(out.at[p, "value"])
            out.at[p, "smin"], out.at[p, "smax"] = min(float(v.min()), c0), max(float(v.max()), c0)
            out.at[p, "samples"] = len(v)
            out.at[p, "frames"] = xs.loc[g["sample"]].assign(value=v).reset_index(drop=True)
        out["co"] = ""
        if "co_central" in joint.columns:
            # The co-central settings (lmdbio.lab.model.uncertainty.co_centrals), each P's value at each.
            label = joint.drop_duplicates("sample").set_index("sample")["co_central"].fillna("")
            co = per[per["sample"].map(label).astype(bool)]
            for p, g in co.groupby("nprocs"):
                if p in out.index:
                    out.at[p, "co"] = "; ".join(f"{label[sm]} {num(x)}" for sm, x in zip(g["sample"], g["v"]))
    return out


def decider_words(frame: pd.DataFrame | None, threshold: float | None = None) -> str:
    """The estimates the samples' value follows most (Spearman's rho of log value), strongest first."""
    from ..model.uncertainty import deciders

    if frame is None or len(frame) < 3:
        return ""
    return "; ".join(f"{n} (rho {r:+.2f})" for n, r in deciders(frame, "value", top=3))


def _same_runs(central: pd.DataFrame, joint: pd.DataFrame | None, slow: str, fast: str) -> set:
    """The process counts where ``fast`` and ``slow`` have the same I/O time in every sample and
    the central prediction (one pivot per frame)."""
    same = None
    for f in [central] + ([joint] if joint is not None else []):
        keys = ["sample", "nprocs"] if "sample" in f.columns else ["nprocs"]
        t = f.pivot_table(index=keys, columns="variant", values="io_s")
        if slow not in t or fast not in t:
            return set()
        eq = pd.Series(np.isclose(t[slow], t[fast], rtol=1e-12, atol=0), index=t.index)
        here = set(eq.groupby(level="nprocs").all().loc[lambda x: x].index)
        same = here if same is None else same & here
    return same or set()


def _structural_ratio(central: pd.DataFrame, joint: pd.DataFrame | None, slow: str, fast: str, at: int,
                      same: set | None = None) -> str:
    """Why ``fast`` and ``slow`` are one run by construction at ``at`` (every sample and the central
    equal), or ''. COAL with k = 1 is PROV: one reader's batch share is already >= the coalesce size.
    ``same`` is :func:`_same_runs`, when the caller asks for several ``at``."""
    if at not in (same if same is not None else _same_runs(central, joint, slow, fast)):
        return ""
    c = central[(central["nprocs"] == at) & (central["variant"] == fast)]
    k = int(c["coalesce"].iloc[0]) if "coalesce" in c.columns and len(c) else 0
    why = f"{SHORT.get(fast, fast)} and {SHORT.get(slow, slow)} are the same run at P={at:,} in every sample"
    if k == 1 and "group_records" in c.columns:
        why += (f" (COAL's k = 1: one reader's {c['group_records'].iloc[0]:,.0f} records per batch already "
                "reach the coalesce size)")
    return why


def _structural_share(central: pd.DataFrame, joint: pd.DataFrame | None, slow: str, at: int,
                      threshold: float) -> str:
    """Why the I/O share is fixed by the setup at ``at``, or '': when even the storage's aggregate
    bandwidth (the floor, 23 GB/s) gives every sample the same side of the threshold."""
    frames = [central] + ([joint] if joint is not None else [])
    sides, floors = set(), []
    for f in frames:
        g = f[(f["nprocs"] == at) & (f["variant"] == slow)]
        if not {"global_batch", "record_bytes"} <= set(g.columns) or g.empty:
            return ""
        floor = g["global_batch"] * g["record_bytes"] / FLOOR_BW
        share = floor / (floor + g["compute_s"] + g["communicate_s"])
        sides |= set((share >= threshold).tolist())
        floors.append(float(share.min()))
    if len(sides) != 1 or sides != {True}:
        return ""
    g = central[(central["nprocs"] == at) & (central["variant"] == slow)].iloc[0]
    return (f"fixed by the setup: at P={at:,} one iteration's {g['global_batch'] * g['record_bytes'] / 1e9:.3g} GB "
            f"take {g['global_batch'] * g['record_bytes'] / FLOOR_BW:.3g} s even at the storage's aggregate "
            f"23 GB/s, against {g['compute_s'] + g['communicate_s']:.3g} s of compute and allreduce: a share "
            f">= {min(floors):.2f} in every sample, whatever the I/O mechanisms")


def model_claim(workloads, slow: str, fast: str | None, col: str):
    """A model quantity per workload: ``slow/fast`` of ``col`` per P, or ``slow``'s ``col``/total_s
    when fast is None; ``workloads`` one name or several (one row per workload where modelled)."""
    names = (workloads,) if isinstance(workloads, str) else tuple(workloads)

    def one(d: Path, threshold: float, workload: str):
        fr = model_frames(d, workload)
        if fr is None:
            return None
        p, s = fr

        def value(df, index="nprocs"):
            t = df.pivot_table(index=index, columns="variant", values=list(dict.fromkeys([col, "total_s"])))
            if (col, slow) not in t or (fast is not None and (col, fast) not in t):
                return pd.Series(dtype=float)
            if fast is None:
                return t[(col, slow)] / t[("total_s", slow)]
            return t[(col, slow)] / t[(col, fast)]
        b = band_frame(p, s, value)
        if b.empty:
            return None
        b["decides"] = [decider_words(f) for f in b["frames"]]
        b["above"] = [int((f["value"] >= threshold).sum()) if f is not None else 0 for f in b["frames"]]
        same = _same_runs(p, s, slow, fast) if fast is not None else None
        b["structural"] = [(_structural_ratio(p, s, slow, fast, n, same) if fast is not None
                            else _structural_share(p, s, slow, n, threshold)) for n in b.index]
        mech = p.set_index(["variant", "nprocs"])["dominant_mechanism"]
        phase = p.set_index(["variant", "nprocs"])["dominant_phase"]

        def dom(v, n):
            ph = phase.get((v, n), "")
            return ph if ph in ("compute", "communicate") else mech.get((v, n), "?")
        b["context"] = [(f"{SHORT.get(fast, fast)} dominated by {dom(fast, n)}; " if fast else "")
                        + f"{SHORT.get(slow, slow)} by {dom(slow, n)}" for n in b.index]
        out = b.drop(columns="frames").reset_index()
        out["workload"] = workload
        return out

    def q(d: Path, threshold: float):
        parts = [x for x in (one(d, threshold, w) for w in names) if x is not None and len(x)]
        return pd.concat(parts, ignore_index=True) if parts else None
    return q
