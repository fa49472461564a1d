"""The absolute-time table: computed from the model, bounds from the platform, verdicts from both."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest

from lmdbio.model.absolute import DEFAULT_OUT, Bound, absolute_table, bounds, joint_platform, verdict
from lmdbio.model.calibrate import load_calibration
from lmdbio.model.platform import load_platform
from lmdbio.model.predict import predict_point, storage_profile
from test_model import fake_calibration

WL = "cifar10-large-alexnet"


def test_verdicts_name_a_break_of_the_central_or_of_the_whole_band():
    up = Bound("u", "upper", 100.0, "test")
    assert verdict(up, 90, 80, 120) == "within"
    assert verdict(up, 150, 80, 300).startswith("central breaks: x1.5 above")
    assert verdict(up, 150, 120, 300).startswith("breaks: whole band above, low end x1.2")
    low = Bound("l", "lower", 100.0, "test")
    assert verdict(low, 120, 50, 200) == "within"
    assert verdict(low, 50, 40, 150).startswith("central breaks: x2 below")
    assert verdict(low, 50, 40, 80).startswith("breaks: whole band below")
    # Without a band the central decides alone.
    assert verdict(up, 150, math.nan, math.nan).startswith("breaks")
    with pytest.raises(ValueError, match="upper"):
        verdict(Bound("x", "sideways", 1.0, ""), 1, 1, 1)


def test_bounds_follow_the_workload_and_the_process_count():
    plat = load_platform("bebop")
    wl = plat.workload(WL)
    b1 = {b.name: b for b in bounds(plat, wl, 36)}
    b2 = {b.name: b for b in bounds(plat, replace(wl, iterations=2 * wl.iterations,
                                                  model_bytes=3 * wl.model_bytes), 36)}
    # The compute floor: per-process samples x FLOPs per sample; it does not depend on P.
    assert b2["compute at core peak"].seconds == pytest.approx(6 * b1["compute at core peak"].seconds)
    assert {b.name: b.seconds for b in bounds(plat, wl, 9216)}["compute at core peak"] == \
        pytest.approx(b1["compute at core peak"].seconds)
    # The storage floor grows with the bytes all processes read.
    s = [{b.name: b.seconds for b in bounds(plat, wl, p)}["storage bandwidth"] for p in (288, 9216)]
    assert s[1] == pytest.approx(32 * s[0])
    assert b1["walltime <= 7 d"].kind == "upper" and b1["walltime <= 7 d"].seconds == 7 * 86400
    with pytest.raises(ValueError):
        bounds(plat, wl, 0)


def test_the_table_is_the_models_prediction_with_its_band_and_three_bounds():
    plat = load_platform("bebop")
    cal = fake_calibration()
    t = absolute_table(plat, (1, 72), ["lmdb", "lmdbio-lmm-dio-prov"], WL, cal, budget=500)
    assert len(t) == 2 * 2 * 3
    for r in t.itertuples():
        want = predict_point(plat, plat.workload(WL), r.variant, r.nprocs, cal, budget=500)["total_s"]
        assert r.predicted_s == pytest.approx(want, rel=1e-12)
        assert r.low_s <= r.predicted_s <= r.high_s
        b = Bound(r.bound, r.bound_kind, r.bound_s, r.bound_source)
        assert r.verdict == verdict(b, r.predicted_s, r.low_s, r.high_s)
        assert 0 < r.dominant_share <= 1
        # The joint low end is the model at every time-lowering end at once.
        ends = [tuple(x.split("=")) for x in r.joint_low_estimates.split()]
        jp = joint_platform(plat, ends)
        assert r.joint_low_s == pytest.approx(predict_point(jp, jp.workload(WL), r.variant, r.nprocs, cal,
                                                            budget=500)["total_s"], rel=1e-12)
    # The band is wider than the central: the estimates move the time.
    assert (t["high_s"] > t["low_s"]).all()


def test_joint_ends_apply_together_and_unknown_ones_fail():
    plat = load_platform("bebop")
    jp = joint_platform(plat, [("gpfs-2017.seek_s", "low"), ("gpfs-2017.targets", "high"),
                               ("walk_reads_values", "high")])
    prof = storage_profile(jp, fake_calibration(), "cold")
    assert prof.seek_s == 0.0 and prof.targets == 24 and jp.walk_reads_values is True
    assert storage_profile(plat, fake_calibration(), "cold").seek_s > 0
    with pytest.raises(ValueError, match="no estimate"):
        joint_platform(plat, [("gpfs-2017.nonsense", "low")])


def test_the_committed_table_is_what_the_committed_calibration_predicts():
    t = pd.read_csv(DEFAULT_OUT)
    plat = load_platform("bebop")
    cal = load_calibration()
    assert set(t["nprocs"]) == {1, 36, 288, 9216}
    for variant, p in (("lmdb", 9216), ("lmdbio-lmm-dio-prov", 36)):
        rows = t[(t["variant"] == variant) & (t["nprocs"] == p)]
        want = predict_point(plat, plat.workload(WL), variant, p, cal)["total_s"]
        assert rows["predicted_s"].to_numpy() == pytest.approx(want, rel=1e-9), \
            "absolute.csv is stale: rerun `lmdbio model absolute`"
        got = {b.name: b.seconds for b in bounds(plat, plat.workload(WL), p)}
        for r in rows.itertuples():
            assert r.bound_s == pytest.approx(got[r.bound])
            b = Bound(r.bound, r.bound_kind, r.bound_s, r.bound_source)
            assert r.verdict == verdict(b, r.predicted_s, r.low_s, r.high_s)
