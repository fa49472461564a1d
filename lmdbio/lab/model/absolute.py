"""The model's absolute times against bounds that do not come from the papers' speedups.

The poster's runs happened, so each predicted time must lie below what one job could run (the
walltime, an **upper** bound) and above what the hardware allows at best (**lower** bounds: the
bytes over the storage's aggregate bandwidth, the training FLOPs at a core's peak); each bound
comes from the platform and workload files and the constants below, with its source. A verdict
compares a bound with the central prediction and with the band (the joint samples'). The
poster's own axis is a check of its own (:func:`axis_check`): a series outside 10-100,000 s is a
failed check, reported with the mechanism that dominates, not a reason to change an estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .calibrate import Calibration, load_calibration
from .platform import BATCH_READINGS, Platform, Workload, load_platform
from .predict import POWERS, predict
from ..paths import REPO

__all__ = ["POSTER_PROCS", "POSTER_AXIS_S", "POSTER_WORKLOAD", "WALLTIME_S", "AGGREGATE_BW",
           "CORE_PEAK_FLOPS", "Bound", "bounds", "verdict", "absolute_table", "axis_check",
           "write_absolute", "DEFAULT_OUT"]

#: The poster's x axis, every point: the axis check runs at each.
POSTER_PROCS = POWERS
#: The poster's time axis (seconds, 512 iterations): "Overall training time, CIFAR10-Large-AlexNet".
POSTER_AXIS_S = (10.0, 100000.0)
POSTER_AXIS_WHY = ("source: the poster's figure (PAPER.md), 'Overall Training Time (CIFAR10-Large-AlexNet, "
                   "512 iterations)', a log time axis from 10 s to 100,000 s over 1 to 9,216 processes "
                   "(one transcript reads 1 s at the bottom; 10 s is the stricter end); every series of "
                   "the figure lies on that axis")
#: The workload the poster's figure shows.
POSTER_WORKLOAD = "cifar10-large-alexnet"

#: One job's wall-clock limit on the papers' machine: (low, high) seconds.
WALLTIME_S = (1 * 86400, 7 * 86400)
WALLTIME_WHY = ("estimate: Bebop's (LCRC) maximum job walltime was not found in the documents searched "
                "(docs.lcrc.anl.gov states 36 cores per node, no walltime); batch limits of such "
                "clusters run 1-7 days; the upper end (7 d) is the bound. A chain of jobs restarting "
                "from Caffe snapshots would escape it: the papers do not say they did")

#: Aggregate read bandwidth of the shared storage, the generous end: bytes per second.
AGGREGATE_BW = 23e9
AGGREGATE_WHY = ("source: PFS.md, about 23 GB/s on a mid-size GPFS appliance (Dell PixStor guide), "
                 "above the model's own 8 targets x 1 GB/s; only the records' bytes are counted (no "
                 "LMDB pages, no read-around), and at most one node link (platform node_link_bw) per node")

#: One core's peak single-precision rate: Broadwell E5-2695 v4 at its 3.3 GHz maximum turbo, two
#: 256-bit FMA units = 32 FLOP per cycle.
CORE_PEAK_FLOPS = 3.3e9 * 32
CORE_WHY = ("floor: each weight of the workload's model (model_bytes / 4 float32 parameters) costs at "
            "least one multiply-add forward and one for its gradient per sample (4 FLOP; input "
            "gradients and convolution reuse only add), at one core's peak: 3.3 GHz max turbo x 32 "
            "SP FLOP/cycle (source: Intel's E5-2695 v4 data, two AVX2 FMA units; the chip itself is an "
            "estimate, PFS.md; 36 cores per node: docs.lcrc.anl.gov); one process per core")

DEFAULT_OUT = REPO / "data" / "results" / "model_prediction" / "absolute.csv"


@dataclass(frozen=True)
class Bound:
    """A limit on a run's total time: ``kind`` "upper" (at most) or "lower" (at least)."""

    name: str
    kind: str
    seconds: float
    source: str


def bounds(platform: Platform, workload: Workload, nprocs: int) -> list[Bound]:
    """The bounds on one run of ``workload`` at ``nprocs`` processes on ``platform``."""
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive integer, got {nprocs!r}")
    samples = workload.iterations * workload.global_batch(nprocs)
    nodes = math.ceil(nprocs / (platform.ranks_per_node or nprocs))
    data = samples * workload.record_bytes
    storage = max(data / AGGREGATE_BW, (data / nodes) * platform.net_beta_s)
    if workload.model_bytes <= 0:
        raise ValueError(f"workload {workload.name!r} has no model_bytes: the compute floor needs them")
    per_process = samples / nprocs
    compute = per_process * 4 * (workload.model_bytes / 4) / CORE_PEAK_FLOPS
    out = [Bound("walltime <= 7 d", "upper", float(WALLTIME_S[1]), WALLTIME_WHY),
           Bound("storage bandwidth", "lower", storage, AGGREGATE_WHY),
           Bound("compute at core peak", "lower", compute, CORE_WHY)]
    if workload.name == POSTER_WORKLOAD and workload.iterations == 512:
        out += [Bound("poster axis top", "upper", POSTER_AXIS_S[1], POSTER_AXIS_WHY),
                Bound("poster axis bottom", "lower", POSTER_AXIS_S[0], POSTER_AXIS_WHY)]
    return out


def verdict(bound: Bound, predicted: float, low: float, high: float) -> str:
    """``within``, ``central breaks`` (the band reaches the bound) or ``breaks`` (the whole band).

    The factor says by how much: the central (or the nearer band end) over
    or under the bound.
    """
    lo = predicted if not math.isfinite(low) else min(low, predicted)
    hi = predicted if not math.isfinite(high) else max(high, predicted)
    if bound.kind == "upper":
        if predicted <= bound.seconds:
            return "within"
        if lo <= bound.seconds:
            return f"central breaks: x{predicted / bound.seconds:.3g} above; band low end within"
        return f"breaks: whole band above, low end x{lo / bound.seconds:.3g}"
    if bound.kind == "lower":
        if predicted >= bound.seconds:
            return "within"
        if hi >= bound.seconds:
            return f"central breaks: x{bound.seconds / predicted:.3g} below; band high end within"
        return f"breaks: whole band below, high end x{bound.seconds / hi:.3g} under"
    raise ValueError(f"bound kind must be 'upper' or 'lower', got {bound.kind!r}")


def _joint_bands(joint_rows) -> dict:
    """``{(workload, batch, variant, P): (5%, 95%)}`` of total_s over the joint samples."""
    from .uncertainty import band

    out = {}
    if joint_rows is None:
        return out
    import pandas as pd

    d = joint_rows if isinstance(joint_rows, pd.DataFrame) else pd.DataFrame(joint_rows)
    if d.empty:
        return out
    for k, g in d.groupby(["workload", "batch", "variant", "nprocs"]):
        out[tuple(k)] = band(g["total_s"])
    return out


def absolute_table(platform: Platform | str = "bebop", procs=POSTER_PROCS, variants=("all",),
                   workloads=None, cal: Calibration | None = None, budget: int = 20000,
                   batches=BATCH_READINGS, joint_rows=None, jobs: int | None = 1):
    """One row per workload x batch reading x variant x P x bound: the total, its band, the verdict.

    Runs the model (:func:`predict`) at ``procs`` for both batch readings;
    nothing is read from earlier results except ``joint_rows`` (the joint
    samples, ``joint.csv``), whose 5-95% range is the band where they ran
    (NaN elsewhere). ``dominant_mechanism`` and ``dominant_share`` (the
    dominant phase's share of an iteration) say what makes the time. ``jobs``: as :func:`predict`.
    """
    import pandas as pd

    plat = load_platform(platform) if not isinstance(platform, Platform) else platform
    cal = cal or load_calibration()
    procs = [int(p) for p in procs]
    rows = predict(plat, procs, variants, workloads, cal, budget, batches=batches, jobs=jobs)
    bands = _joint_bands(joint_rows)
    out = []
    for r in rows:
        wl = plat.workload(r["workload"]).reading(r["batch"])
        lo, hi = bands.get((r["workload"], r["batch"], r["variant"], r["nprocs"]),
                           (float("nan"), float("nan")))
        phases = r[f"{r['dominant_phase']}_s"]
        for b in bounds(plat, wl, r["nprocs"]):
            out.append({"workload": r["workload"], "batch": r["batch"], "variant": r["variant"],
                        "nprocs": r["nprocs"], "global_batch": r["global_batch"],
                        "epochs": r["epochs"], "predicted_s": r["total_s"],
                        "per_iteration_s": r["per_iteration_s"], "low_s": lo, "high_s": hi,
                        "bound": b.name, "bound_kind": b.kind, "bound_s": b.seconds,
                        "bound_source": b.source, "verdict": verdict(b, r["total_s"], lo, hi),
                        "dominant_phase": r["dominant_phase"],
                        "dominant_mechanism": r["dominant_mechanism"],
                        "dominant_share": phases / r["per_iteration_s"]})
    return pd.DataFrame(out)


def axis_check(table):
    """Per workload x batch reading x variant: does the series lie inside the poster's axis at every P?

    ``inside`` is True only when every central total is within 10-100,000 s;
    ``outside`` lists the P where it is not, ``worst`` the point farthest
    outside (its time, and the mechanism that dominates it), ``max_nprocs`` and
    ``max_mechanism`` the longest point's. Only the
    workload with the poster-axis bounds (CIFAR10-Large, 512 iterations)
    has rows.
    """
    import pandas as pd

    t = table[table["bound"].isin(["poster axis top", "poster axis bottom"])]
    rows = []
    for (w, b, v), g in t.groupby(["workload", "batch", "variant"], sort=False):
        pts = g.drop_duplicates("nprocs").sort_values("nprocs")
        lo, hi = POSTER_AXIS_S
        x = pts["predicted_s"]
        bad = pts[(x < lo) | (x > hi)]
        # How far each point is from leaving the axis: > 1 outside, the larger the farther.
        far = pd.concat([pts["predicted_s"] / hi, lo / pts["predicted_s"]], axis=1).max(axis=1)
        worst = pts.loc[far.idxmax()]
        top = pts.loc[x.idxmax()]
        rows.append({"workload": w, "batch": b, "variant": v, "points": len(pts),
                     "inside": bad.empty, "outside_procs": " ".join(str(int(p)) for p in bad["nprocs"]),
                     "min_s": float(x.min()), "max_s": float(x.max()),
                     "worst_nprocs": int(worst["nprocs"]), "worst_s": float(worst["predicted_s"]),
                     "worst_factor": float(far.max()),
                     "worst_mechanism": str(worst["dominant_mechanism"]),
                     "worst_phase": str(worst["dominant_phase"]),
                     "max_nprocs": int(top["nprocs"]), "max_mechanism": str(top["dominant_mechanism"])})
    return pd.DataFrame(rows)


def write_absolute(table, out=DEFAULT_OUT) -> Path:
    """Write the table as CSV (the committed ``absolute.csv`` by default)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    return out
