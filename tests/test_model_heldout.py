"""The held-out check: frozen predictions against sweeps measured after them."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from lmdbio.lab.model import heldout
from lmdbio.lab.model.output import MODEL_VERSION


def _summary(path, rows):
    path.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(path / "summary.csv", index=False)


def test_the_committed_predictions_name_the_model_that_made_them():
    meta = json.loads((heldout.DEFAULT_OUT / "meta.json").read_text())
    assert meta["model"]["version"] == MODEL_VERSION and len(meta["model"]["sha256"]) == 64
    pred = pd.read_csv(heldout.DEFAULT_OUT / "predictions.csv")
    assert set(pred["sweep"]) == {s.name for s in heldout.SWEEPS}
    assert (pred["predicted_s"] > 0).all()
    # The multi-epoch sweeps are predicted with the page cache kept across epochs.
    assert (pred.loc[pred["sweep"].str.startswith("epochs"), "epochs"] > 1).all()


def test_compare_takes_medians_of_points_run_as_predicted_and_counts_the_criterion(tmp_path):
    pred = pd.DataFrame([
        {"sweep": "a", "setting": "local disk", "variant": "lmdb", "nprocs": 4, "iters": 10, "predicted_s": 1.1},
        {"sweep": "a", "setting": "local disk", "variant": "lmdbio-lmm", "nprocs": 4, "iters": 10,
         "predicted_s": 2.0}])
    _summary(tmp_path / "a", [
        {"variant": "lmdb", "nprocs": 4, "iters": 10, "status": "ok", "wall_s": w} for w in (0.9, 1.0, 5.0)] + [
        {"variant": "lmdbio-lmm", "nprocs": 4, "iters": 10, "status": "ok", "wall_s": 1.0},
        {"variant": "lmdbio-lmm", "nprocs": 4, "iters": 10, "status": "failed", "wall_s": 2.0},
        {"variant": "lmdbio-lmm", "nprocs": 4, "iters": 3, "status": "ok", "wall_s": 2.0}])   # another run
    d = heldout.compare(pred, tmp_path).set_index("variant")
    assert d.loc["lmdb", "measured_s"] == 1.0 and d.loc["lmdb", "repeats"] == 3
    assert d.loc["lmdbio-lmm", "rel_error"] == pytest.approx(1.0)
    t = heldout.criterion(d.reset_index()).set_index("variant")
    assert bool(t.loc["lmdb", "meets_criterion"]) and not bool(t.loc["lmdbio-lmm", "meets_criterion"])
    assert heldout.compare(pred, tmp_path / "none").empty


def _co_claim_rows(tmp_path, co_ratios):
    """A C2 model setting at P = 288 with 20 samples all at ratio 25 and the two co-centrals."""
    from test_claims import joint_rows, prediction, put

    from lmdbio.lab import claims

    w = "imagenet-caffenet"
    put(tmp_path, "", "model", "predictions.csv", [prediction(w, "lmdb", 288, 25.0, 0.3, 9.0),
                                                   prediction(w, "lmdbio-lmm", 288, 1.0, 0.3, 9.0)])
    rows = joint_rows(w, 288, [25.0] * 20 + list(co_ratios))
    labels = {20: "walk touches leaf pages", 21: "walk touches values"}
    for r in rows:
        r["co_central"] = labels.get(r["sample"], "")
    pd.DataFrame(rows).to_csv(tmp_path / claims.MODEL_DIR / "joint.csv", index=False)


def test_a_verdict_row_says_when_the_walks_two_settings_differ(tmp_path):
    from test_claims import verdict

    _co_claim_rows(tmp_path, (25.0, 0.9))
    row = verdict(tmp_path, "C2", "model")
    assert row["verdict"] == "open"                      # C2's threshold, 1.2, lies between them
    assert "walk touches leaf pages 25" in row["why"] and "walk touches values 0.9" in row["why"]
    assert "the two settings differ" in row["why"]
    _co_claim_rows(tmp_path, (25.0, 24.0))
    row = verdict(tmp_path, "C2", "model")
    assert "both on one side" in row["why"]


def test_joint_adds_the_co_centrals_and_hides_other_workloads_estimates():
    from lmdbio.lab.model.calibrate import load_calibration
    from lmdbio.lab.model.platform import load_platform
    from lmdbio.lab.model.predict import predict
    from lmdbio.lab.model.uncertainty import PREFIX, joint

    plat = load_platform("bebop")
    cal = load_calibration()
    rows = pd.DataFrame(joint(plat, [72], ["lmdb"], None, cal, n=2, seed=3, budget=300))
    co = rows[rows["co_central"].fillna("") != ""]
    assert sorted(co["sample"].unique()) == [2, 3]
    leaf = co[(co["co_central"] == "walk touches leaf pages")].set_index("workload")["total_s"]
    central = pd.DataFrame(predict(plat, [72], ["lmdb"], None, cal, 300)).set_index("workload")["total_s"]
    assert leaf.to_dict() == pytest.approx(central.to_dict())
    cifar = rows[rows["workload"] == "cifar10-large-alexnet"]
    assert cifar[PREFIX + "imagenet-caffenet.iterations"].isna().all()
    assert cifar[PREFIX + "cifar10-large-alexnet.records"].notna().all()


def test_first_order_sobol_finds_the_estimate_the_ratio_follows():
    import numpy as np

    from lmdbio.lab.model.sobol import first_order, sobol_table

    rng = np.random.default_rng(0)
    x1, x2, sw = rng.random(512), rng.random(512), rng.integers(0, 2, 512).astype(float)
    y = 3 * x1 + sw + 0.1 * rng.random(512)
    s1, s2, ssw = (first_order(x, y, 22) for x in (x1, x2, sw))
    assert s1 > 0.6 and ssw > 0.05 and s2 < 0.05
    # An estimate the ratio does not follow: about 0 on average once the bins' noise is taken off.
    noise = [first_order(rng.random(512), y, 22) for _ in range(40)]
    assert np.mean(noise) < 0.015
    assert first_order(np.full(512, np.nan), y, 22) != first_order(np.full(512, np.nan), y, 22)   # NaN
    rows = []
    for i in range(64):
        a, b = float(x1[i]), float(x2[i])
        for v, io in (("lmdb", 1 + 9 * a), ("lmdbio-lmm", 1.0)):
            rows.append({"sample": i, "workload": "w", "variant": v, "nprocs": 8, "setup_s": io,
                         "iterations": 1, "per_iteration_s": 0.0, "compute_s": 0.0, "communicate_s": 0.0,
                         "x:a": a, "x:b": b, "x:other.n": float("nan"), "co_central": ""})
    t = sobol_table(rows)
    assert list(t["estimate"]) == ["a", "b"] and t.iloc[0]["s1"] > 0.8     # other.n: not this workload's
