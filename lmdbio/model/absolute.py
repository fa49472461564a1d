"""The model's absolute times against bounds that do not come from the papers' speedups.

The poster's figure ("Overall training time, CIFAR10-Large-AlexNet, 512
iterations") is a set of runs that happened. So each predicted time must lie

- below what one job could run on the machine (an **upper** bound: the
  papers ran the point, so it fitted a job's wall-clock limit), and
- above what the hardware allows at best (**lower** bounds: the bytes read
  over the storage's aggregate bandwidth; the training FLOPs over a core's
  peak).

Every bound is computed from the platform and workload files plus the
constants below, each with its source or marked as an estimate. A verdict
compares a bound with the central prediction and with the band (every
estimate at both ends of its range, one at a time: :func:`predict.sensitivity`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .calibrate import Calibration, load_calibration
from .platform import Platform, Workload, load_platform
from .predict import band_columns, estimate_ends, predict, predict_point, sensitivity

__all__ = ["POSTER_PROCS", "WALLTIME_S", "AGGREGATE_BW", "CORE_PEAK_FLOPS", "Bound", "bounds", "verdict",
           "joint_platform", "absolute_table", "write_absolute", "DEFAULT_OUT"]

#: The poster's x axis at one process, one node, eight nodes and the full 256 nodes.
POSTER_PROCS = (1, 36, 288, 9216)

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

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "data" / "results" / "model_prediction" / "absolute.csv"


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
    return [Bound("walltime <= 7 d", "upper", float(WALLTIME_S[1]), WALLTIME_WHY),
            Bound("storage bandwidth", "lower", storage, AGGREGATE_WHY),
            Bound("compute at core peak", "lower", compute, CORE_WHY)]


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


def joint_platform(platform: Platform, ends) -> Platform:
    """``platform`` with every ``(estimate, end)`` of ``ends`` applied at once.

    The band moves one estimate at a time; this puts several at their ends
    together (e.g. every end that lowered a time), each taken from
    :func:`estimate_ends` of the platform changed so far.
    """
    cum = platform
    for name, end in ends:
        found = [p for n, e, _v, _w, p in estimate_ends(cum) if n == name and e == end]
        if not found:
            raise ValueError(f"no estimate {name!r} with a {end!r} end on platform {platform.name!r}")
        cum = found[0]
    return cum


def absolute_table(platform: Platform | str = "bebop", procs=POSTER_PROCS, variants=("all",),
                   workload: str = "cifar10-large-alexnet", cal: Calibration | None = None,
                   budget: int = 20000):
    """One row per variant x P x bound: the model's total time, its band, the bound and the verdict.

    Runs the model (:func:`predict`) and its band (:func:`sensitivity`, every
    estimate at both ends) at ``procs``; nothing is read from earlier results.
    ``dominant_mechanism`` and ``dominant_share`` (the dominant phase's share
    of an iteration) say what makes the time. ``joint_low_s`` puts every
    estimate that lowered the time at that end together (the band does not
    explore joint ends); ``joint_low_estimates`` names them.
    """
    import pandas as pd

    plat = load_platform(platform) if not isinstance(platform, Platform) else platform
    cal = cal or load_calibration()
    wl = plat.workload(workload)
    procs = [int(p) for p in procs]
    rows = predict(plat, procs, variants, [workload], cal, budget)
    sens = sensitivity(plat, procs, variants, [workload], cal, budget)
    out = []
    for r in band_columns(rows, sens):
        phases = r[f"{r['dominant_phase']}_s"]
        best = {}     # per estimate, the end that lowered this time most
        for x in sens:
            if (x["variant"], x["nprocs"]) == (r["variant"], r["nprocs"]) and x["total_s"] < r["total_s"]:
                if x["estimate"] not in best or x["total_s"] < best[x["estimate"]][1]:
                    best[x["estimate"]] = (x["end"], x["total_s"])
        lower = [(n, e) for n, (e, _t) in best.items()]
        jp = joint_platform(plat, lower)
        joint = predict_point(jp, jp.workload(workload), r["variant"], r["nprocs"], cal,
                              budget=budget)["total_s"] if lower else r["total_s"]
        for b in bounds(plat, wl, r["nprocs"]):
            out.append({"variant": r["variant"], "nprocs": r["nprocs"], "predicted_s": r["total_s"],
                        "low_s": r["total_s_low"], "high_s": r["total_s_high"], "bound": b.name,
                        "bound_kind": b.kind, "bound_s": b.seconds, "bound_source": b.source,
                        "verdict": verdict(b, r["total_s"], r["total_s_low"], r["total_s_high"]),
                        "dominant_mechanism": r["dominant_mechanism"],
                        "dominant_share": phases / r["per_iteration_s"], "joint_low_s": joint,
                        "joint_low_estimates": " ".join(f"{n}={e}" for n, e in lower)})
    return pd.DataFrame(out)


def write_absolute(table, out=DEFAULT_OUT) -> Path:
    """Write the table as CSV (the committed ``absolute.csv`` by default)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    return out
