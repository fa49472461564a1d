"""The absolute-time table: computed from the model, bounds from the platform, verdicts from both."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest

from lmdbio.lab.model.absolute import (DEFAULT_OUT, POSTER_AXIS_S, Bound, absolute_table, axis_check, bounds,
                                   verdict)
from lmdbio.lab.model.calibrate import load_calibration
from lmdbio.lab.model.platform import load_platform
from lmdbio.lab.model.predict import POWERS, predict_point, storage_profile
from lmdbio.lab.model.uncertainty import apply
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
    # The compute floor: per-process samples x FLOPs per sample; with a fixed global batch it
    # falls as 1/P, with a fixed batch per process it does not.
    assert b2["compute at core peak"].seconds == pytest.approx(6 * b1["compute at core peak"].seconds)
    assert {b.name: b.seconds for b in bounds(plat, wl, 9216)}["compute at core peak"] == \
        pytest.approx(b1["compute at core peak"].seconds / 256)
    weak = wl.reading("per-process")
    assert {b.name: b.seconds for b in bounds(plat, weak, 9216)}["compute at core peak"] == \
        pytest.approx({b.name: b.seconds for b in bounds(plat, weak, 36)}["compute at core peak"])
    # The storage floor: the bytes every process reads; fixed with a global batch, P-fold per process.
    s = [{b.name: b.seconds for b in bounds(plat, weak, p)}["storage bandwidth"] for p in (288, 9216)]
    assert s[1] == pytest.approx(32 * s[0])
    assert b1["walltime <= 7 d"].kind == "upper" and b1["walltime <= 7 d"].seconds == 7 * 86400
    # The poster's axis bounds the CIFAR10-Large figure's 512 iterations only.
    assert (b1["poster axis top"].seconds, b1["poster axis bottom"].seconds) == (1e5, 10.0)
    assert "poster axis top" not in {b.name for b in bounds(plat, plat.workload("imagenet-caffenet"), 36)}
    with pytest.raises(ValueError):
        bounds(plat, wl, 0)


def test_the_table_covers_both_workloads_and_batch_readings_with_the_joint_band():
    plat = load_platform("bebop")
    cal = fake_calibration()
    joint = pd.DataFrame([{"workload": WL, "batch": "global", "variant": "lmdb", "nprocs": 72,
                           "total_s": x} for x in range(1, 101)])
    t = absolute_table(plat, (1, 72), ["lmdb", "lmdbio-lmm-dio-prov"], None, cal, budget=300,
                       joint_rows=joint)
    assert set(t["workload"]) == {WL, "imagenet-caffenet"} and set(t["batch"]) == {"global", "per-process"}
    # 5 bounds for CIFAR10-Large (3 + the poster's axis), 3 for ImageNet.
    assert len(t) == 2 * 2 * 2 * 5 + 2 * 2 * 2 * 3
    for r in t.itertuples():
        w = plat.workload(r.workload).reading(r.batch)
        want = predict_point(plat, w, r.variant, r.nprocs, cal, budget=300)["total_s"]
        assert r.predicted_s == pytest.approx(want, rel=1e-12)
        b = Bound(r.bound, r.bound_kind, r.bound_s, r.bound_source)
        assert r.verdict == verdict(b, r.predicted_s, r.low_s, r.high_s)
        assert 0 < r.dominant_share <= 1
    banded = t[(t["workload"] == WL) & (t["batch"] == "global") & (t["variant"] == "lmdb") & (t["nprocs"] == 72)]
    assert banded["low_s"].iloc[0] == pytest.approx(5.95) and banded["high_s"].iloc[0] == pytest.approx(95.05)
    assert t.drop(banded.index)["low_s"].isna().all()


def test_a_series_outside_the_posters_axis_fails_the_check_and_names_its_mechanism():
    plat = load_platform("bebop")
    cal = fake_calibration()
    t = absolute_table(plat, (1, 9216), ["lmdb"], [WL], cal, budget=300)
    a = axis_check(t).set_index("batch")
    assert set(a.index) == {"global", "per-process"}
    for b, r in a.iterrows():
        pts = t[(t["batch"] == b) & (t["bound"] == "poster axis top")]["predicted_s"]
        inside = bool(((pts >= POSTER_AXIS_S[0]) & (pts <= POSTER_AXIS_S[1])).all())
        assert r["inside"] == inside and r["points"] == 2
        assert r["worst_mechanism"]
    # A time beyond the axis is a failed check, whatever else the row says.
    t2 = t.copy()
    t2.loc[(t2["batch"] == "global") & (t2["nprocs"] == 9216), "predicted_s"] = 2e5
    bad = axis_check(t2).set_index("batch").loc["global"]
    assert not bad["inside"] and bad["outside_procs"] == "9216" and bad["worst_factor"] == pytest.approx(2.0)
    # The longest point is named with its own P and mechanism, not the one farthest from the axis.
    t3 = t.copy()
    g = t3["batch"] == "global"
    t3.loc[g & (t3["nprocs"] == 1), "predicted_s"] = 5.0          # below the axis: the worst
    t3.loc[g & (t3["nprocs"] == 9216), "predicted_s"] = 500.0     # the longest
    t3.loc[g & (t3["nprocs"] == 9216), "dominant_mechanism"] = "the walk"
    r3 = axis_check(t3).set_index("batch").loc["global"]
    assert r3["worst_nprocs"] == 1 and (r3["max_nprocs"], r3["max_mechanism"]) == (9216, "the walk")


def test_joint_values_apply_together():
    plat = load_platform("bebop")
    jp = apply(plat, {"gpfs-2017.seek_s": 0.0, "gpfs-2017.targets": 24, "walk_touches_values": True,
                      "cifar10-large-alexnet.records": 50000})
    prof = storage_profile(jp, fake_calibration(), "cold")
    assert prof.seek_s == 0.0 and prof.targets == 24 and jp.walk_touches_values is True
    assert jp.workload(WL).records == 50000 and plat.workload(WL).records == 500000
    assert storage_profile(plat, fake_calibration(), "cold").seek_s > 0
    with pytest.raises(Exception, match="no estimate"):
        apply(plat, {"nonsense": 1})


def test_the_committed_table_is_what_the_committed_calibration_predicts():
    t = pd.read_csv(DEFAULT_OUT)
    plat = load_platform("bebop")
    cal = load_calibration()
    assert set(t["nprocs"]) == set(POWERS)
    assert set(t["workload"]) == {WL, "imagenet-caffenet"} and set(t["batch"]) == {"global", "per-process"}
    for w, b, variant, p in ((WL, "global", "lmdb", 9216), ("imagenet-caffenet", "per-process",
                                                          "lmdbio-lmm-dio-prov", 36)):
        rows = t[(t["workload"] == w) & (t["batch"] == b) & (t["variant"] == variant) & (t["nprocs"] == p)]
        wl = plat.workload(w).reading(b)
        want = predict_point(plat, wl, variant, p, cal)["total_s"]
        assert rows["predicted_s"].to_numpy() == pytest.approx(want, rel=1e-9), \
            "absolute.csv is stale: rerun `lmdbio model absolute`"
        got = {x.name: x.seconds for x in bounds(plat, wl, p)}
        for r in rows.itertuples():
            assert r.bound_s == pytest.approx(got[r.bound])
            bd = Bound(r.bound, r.bound_kind, r.bound_s, r.bound_source)
            assert r.verdict == verdict(bd, r.predicted_s, r.low_s, r.high_s)
