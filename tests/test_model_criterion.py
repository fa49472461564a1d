"""The criterion over every setting (calibrated, GPFS, held-out) and the error-against-distance figure."""

from __future__ import annotations

import pandas as pd
import pytest

from lmdbio.lab.model import criterion
from lmdbio.lab.model.heldout import DEFAULT_OUT
from lmdbio.lab.model.validate import CRITERION
from lmdbio.lab.scales import COMMITTED_RESULTS

VAL = COMMITTED_RESULTS / "model_validation"
GPFS = "emulated GPFS (shares the storage model)"


def _summary(rows):
    """A validation summary: (setting, variant, nprocs, rel_error) per point, ranks per node 4."""
    return pd.DataFrame([{"setting": st, "variant": v, "cache": "cold", "nprocs": p, "ranks_per_node": 4,
                          "rel_error": e, "source": "x", "measured_storage_requests": 10.0,
                          "measured_storage_bytes": 10.0 * 65536} for st, v, p, e in rows])


def _comparison(rows):
    """A held-out comparison: (sweep, setting, variant, nprocs, ranks_per_node, rel_error) per point."""
    return pd.DataFrame([{"sweep": sw, "setting": st, "variant": v, "nprocs": p, "ranks_per_node": r,
                          "rel_error": e} for sw, st, v, p, r, e in rows])


def _counts(summary, comparison=None) -> dict:
    c = criterion.counts(criterion.criterion_all(criterion.points(summary, comparison)))
    return {(r.gpfs_settings, r.held_out_sweeps): (r.within, r.cells) for r in c.itertuples()}


def test_a_gpfs_setting_is_counted_with_the_gpfs_settings_only():
    s = _summary([("local disk", "lmdb", 4, 0.1), ("local disk", "lmdb", 16, -0.2),
                  (GPFS, "lmdb", 4, 0.5), (GPFS, "lmdb", 16, 0.6), (GPFS, "lmdbio-lmm", 4, 0.1)])
    assert _counts(s) == {(False, False): (1, 1), (True, False): (2, 3),
                          (False, True): (1, 1), (True, True): (2, 3)}


def test_a_held_out_row_is_counted_and_named_where_it_fails(tmp_path):
    s = _summary([("local disk", "lmdb", 4, 0.1), (GPFS, "lmdb", 4, 0.5)])
    cmp = _comparison([("rpn8-local", "local disk", "lmdb", 16, 8, 3.0),
                       ("rpn8-local", "local disk", "lmdbio-lmm", 16, 8, 2.0),
                       ("rpn8-local", "local disk", "lmdbio-lmm", 16, 8, 0.1),   # median 1.05
                       ("epochs-local", "local disk", "lmdb", 4, 0, -0.1)])
    assert _counts(s, cmp) == {(False, False): (1, 1), (True, False): (1, 2),
                               (False, True): (2, 4), (True, True): (2, 5)}
    out = tmp_path / "results" / "model_validation"
    cmp.to_csv(tmp_path / "comparison.csv", index=False)
    criterion.write(s, out, tmp_path / "comparison.csv")
    text = criterion.render(tmp_path / "results")
    assert "| with the held-out sweeps | 2 of 4 | 2 of 5 |" in text
    assert ("held-out rpn8-local (local disk): 2 of 2 variants outside 25%; 2 overpredicted, predicted "
            "2.05x (LMM) to 4x (LMDB) the measured time.") in text
    assert "epochs-local" not in text                    # within the criterion: not a failure


def test_the_committed_counts_agree_with_the_rows_and_with_each_sides_own_table():
    table = pd.read_csv(VAL / "criterion_all.csv")
    assert len(table) == len(table.drop_duplicates(criterion.CELL))
    counts = criterion.counts(table).set_index(["gpfs_settings", "held_out_sweeps"])
    for (gpfs, held), r in counts.iterrows():
        rows = table[(table["independent"] | gpfs) & ((table["source"] == criterion.CALIBRATED) | held)]
        assert (r["within"], r["cells"]) == (rows["meets_criterion"].sum(), len(rows))
        assert r["text"] == f"{r['within']} of {r['cells']}"
    # The calibrated side is validate's criterion.csv, every setting and cache; the held-out side
    # is the held-out check's criterion.csv.
    old = pd.read_csv(VAL / "criterion.csv")
    cal = table[table["source"] == criterion.CALIBRATED]
    assert (cal["meets_criterion"].sum(), len(cal)) == (old["variants_meeting"].sum(), old["variants"].sum())
    assert set(cal["setting"]) == set(old["setting"]) and (~cal["independent"]).any()
    held = pd.read_csv(DEFAULT_OUT / "criterion.csv")
    ho = table[table["source"] == criterion.HELD_OUT]
    assert (ho["meets_criterion"].sum(), len(ho)) == (held["meets_criterion"].sum(), len(held))


def test_the_committed_table_is_written_from_the_committed_results():
    summary = pd.read_csv(VAL / "summary.csv")
    again = criterion.criterion_all(criterion.points(summary, pd.read_csv(DEFAULT_OUT / "comparison.csv")))
    pd.testing.assert_frame_equal(again, pd.read_csv(VAL / "criterion_all.csv"), check_dtype=False)


def test_points_carry_their_distance_from_the_calibration():
    s = _summary([("local disk", "lmdb", 4, 0.1), ("local disk", "lmdb", 16, 0.1)])
    s.loc[1, "ranks_per_node"] = 0                      # every rank on one node: P ranks per node
    s.loc[0, "measured_storage_requests"] = float("nan")
    cmp = _comparison([("rpn8-local", "local disk", "lmdb", 16, 8, 3.0)])
    p = criterion.points(s, cmp)
    assert p["ranks_per_node"].tolist() == [4, 16, 8]
    assert p["p_relative"].tolist() == [0.25, 1.0, 1.0]
    assert p["bytes_per_request"].isna().tolist() == [True, False, True]   # no counters: not estimated
    assert p.loc[1, "bytes_per_request"] == 65536


def test_a_source_with_several_layouts_is_refused_by_name(tmp_path):
    f = tmp_path / "summary.csv"
    pd.DataFrame({"ranks_per_node": [4, 8]}).to_csv(f, index=False)
    s = _summary([("local disk", "lmdb", 4, 0.1)]).drop(columns="ranks_per_node").assign(source=str(f))
    with pytest.raises(ValueError, match="several ranks_per_node values"):
        criterion.points(s)


def test_the_figure_draws_every_point_and_writes_a_png(tmp_path):
    from lmdbio.lab import plots
    from lmdbio.lab.model import figures

    pts = criterion.points(pd.read_csv(VAL / "summary.csv"), pd.read_csv(DEFAULT_OUT / "comparison.csv"))
    fig = figures.error_distance_figure(pts)
    drawn = [sum(len(c.get_offsets()) for c in ax.collections) for ax in fig.axes]
    assert drawn == [len(pts), len(pts), int(pts["bytes_per_request"].notna().sum())]
    held = (pts["source"] == criterion.HELD_OUT).sum()
    red = [sum(len(c.get_offsets()) for c in ax.collections
               if tuple(c.get_facecolor()[0][:3]) == pytest.approx((0xc0 / 255, 0x39 / 255, 0x2b / 255)))
           for ax in fig.axes[:2]]
    assert held > 0 and red == [held, held]
    assert all(ax.get_lines()[0].get_ydata()[0] == CRITERION for ax in fig.axes)
    png, _ = plots.save(fig, "t_error_distance", tmp_path)
    assert png.stat().st_size > 1000
