"""The leaf-cut microbenchmark (lmdbio.lab.model.leafcut) and how the model uses it for DIO's reads
on the local disk."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from lmdbio.lab.model import leafcut
from lmdbio.lab.model.calibrate import load_calibration
from lmdbio.lab.model.platform import Workload, load_platform
from lmdbio.lab.model.predict import predict_point


def test_the_probe_reads_each_length_plain_and_over_cached_pages_and_removes_its_file(tmp_path):
    rows = leafcut.measure(lengths=(256 << 10, 1 << 20), repeats=2, workdir=tmp_path)
    assert len(rows) == 2 * 2 * 2
    # The kinds alternate from one repeat to the next, so a drift weighs on both.
    firsts = [r["kind"] for r in rows[::2]]
    assert firsts == ["plain", "plain", "cached", "cached"]
    for r in rows:
        first, last = r["offset"] // 4096, (r["offset"] + r["length"] - 1) // 4096
        cached = [p for p in range(first, last + 1) if p % leafcut.STRIDE_PAGES == 0]
        runs = sum(1 for i, p in enumerate(range(first, last + 1))
                   if p not in cached and (p == first or p - 1 in cached))
        assert r["pieces"] == (runs if r["kind"] == "cached" else 1), r
        assert r["wall_s"] > 0
    assert max(r["pieces"] for r in rows if r["length"] == 1 << 20) >= 4
    assert list(tmp_path.iterdir()) == [], "the scratch file stays behind"


def _table(tmp_path, factor_by_length):
    rows = []
    for L, factor in factor_by_length.items():
        for rep, plain in enumerate((0.010, 0.012, 0.011)):
            rows += [{"length": L, "kind": "plain", "repeat": rep, "wall_s": plain},
                     {"length": L, "kind": "cached", "repeat": rep, "wall_s": plain * factor}]
    path = tmp_path / f"leaf_cut_{len(list(tmp_path.iterdir()))}.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_load_gives_the_median_ratio_with_its_range_and_interpolates_in_log_length(tmp_path):
    path = _table(tmp_path, {1 << 18: 1.0, 1 << 22: 2.0})
    table = leafcut.load(path)
    assert [t[0] for t in table] == [1 << 18, 1 << 22]
    assert table[0][1:] == pytest.approx((1.0, 1.0, 1.0))
    assert table[1][1:] == pytest.approx((2.0, 2.0, 2.0))
    assert leafcut.ratio_at(1 << 20, table) == pytest.approx(1.5)      # half way in log L
    assert leafcut.ratio_at(1 << 10, table) == pytest.approx(1.0)      # the ends beyond them
    assert leafcut.ratio_at(1 << 30, table) == pytest.approx(2.0)
    with pytest.raises(Exception, match="not found"):
        leafcut.load(tmp_path / "missing.csv")


def _read_s(plat, variant):
    w = Workload(name="cifar10", record_bytes=3087, key_bytes=35, records=60000, batch_size=256,
                 iterations=230)
    # A fixed cold-read latency (the committed calibration's drifts with this VM's disk between
    # sittings, 5e-5 to 5e-4 s): what one piece waiting for the one before it costs is visible.
    cal = dataclasses.replace(load_calibration(), disk_latency_s=5e-4)
    return predict_point(plat, w, variant, 1, cal, cache="cold")


def test_dio_reads_on_the_local_disk_take_the_plain_reads_time_times_the_measured_factor(tmp_path):
    base = load_platform("this-machine").with_(ranks_per_node=0, readers_per_node=1, storage="disk")
    prov = _read_s(base, "lmdbio-lmm-dio-prov")
    serial = _read_s(base.with_(leaf_cut=""), "lmdbio-lmm-dio")
    one = _read_s(base.with_(leaf_cut=str(_table(tmp_path, {1 << 18: 1.0, 1 << 22: 1.0}))), "lmdbio-lmm-dio")
    two = _read_s(base.with_(leaf_cut=str(_table(tmp_path, {1 << 18: 2.0, 1 << 22: 2.0}))), "lmdbio-lmm-dio")
    # The cut still sends its pieces as requests of their own: DIO's counters are the same
    # whatever the factor, and above PROV's (whose reads run over no cached page).
    assert one["storage_requests"] == pytest.approx(two["storage_requests"])
    assert one["storage_requests"] == pytest.approx(serial["storage_requests"])
    assert one["storage_requests"] > 2 * prov["storage_requests"]
    # Factor 1: the plain read's time, as PROV's; without a measurement each piece waits for
    # the one before it; factor 2: the storage time doubles.
    assert one["leaf_cut_factor"] == 1.0 and "leaf_cut_factor" not in serial
    assert one["read_s"] == pytest.approx(prov["read_s"], rel=0.05)
    assert serial["read_s"] > 1.3 * one["read_s"]
    assert two["read_s"] > 1.5 * one["read_s"]
    assert math.isfinite(two["total_s"])
