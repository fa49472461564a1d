"""lmdbio.lab.plots: one style, a fixed colour per variant, every figure kind from tidy tables."""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

import lmdbio
from lmdbio.lab import plots, tables

META = {"host": {"hostname": "testhost", "cores": 2}, "config": {"scale": "tiny"}}
PROCS = (1, 2, 4)


@pytest.fixture(autouse=True)
def _close():
    plots.setup()
    yield
    matplotlib.pyplot.close("all")


def test_each_variant_is_drawn_in_its_fixed_colour_in_the_papers_order():
    colours = [plots.VARIANT_COLORS[v] for v in (*lmdbio.VARIANTS, "raw")]
    assert len(set(colours)) == len(colours)
    assert plots.label("lmdbio-lmm-dio") == "LMDBIO-LMM-DIO"
    # The summary lists the variants in another order; the figures keep the papers' order.
    s = _summary().sort_values("variant", ascending=False)
    labels = {plots.label(v) for v in (*lmdbio.VARIANTS, "raw")}
    to_hex = matplotlib.colors.to_hex
    for fig, shown in ((plots.scaling(s, META), (*lmdbio.VARIANTS, "raw")),
                       (plots.optimization(s, list(reversed(lmdbio.VARIANTS)), meta=META), lmdbio.VARIANTS)):
        ax = fig.axes[0]
        legend = ax.get_legend()
        drawn = {t.get_text(): to_hex(h.get_color())
                 for t, h in zip(legend.get_texts(), legend.legend_handles) if t.get_text() in labels}
        assert list(drawn) == [plots.label(v) for v in shown]
        assert drawn == {plots.label(v): plots.VARIANT_COLORS[v] for v in shown}
        assert set(drawn.values()) <= {to_hex(line.get_color()) for line in ax.lines}


def test_subtitle_names_machine_and_scale():
    assert plots.subtitle(META) == "testhost: 2 cores, local disk, scale tiny"
    assert "local disk" in plots.subtitle({"host": "h", "cores": 4})


def _summary(variants=lmdbio.VARIANTS + ("raw",), repeats=2):
    rng = np.random.default_rng(0)
    rows = []
    for v, p, r in itertools.product(variants, PROCS, range(repeats)):
        wall = (1 + variants.index(v)) ** -0.5 * p ** (0.3 if v == "lmdb" else -0.2) * (1 + 0.05 * rng.random())
        rows.append(dict(variant=v, nprocs=p, cache="cold", repeat=r, status="ok", iters=4, wall_s=wall,
                         records_per_s=1000 / wall, read_s=0.6 * wall, wait_s=0.1 * wall,
                         comm_s=0.05 * wall, compute_s=0.25 * wall, au=0.25, batch_size=64))
    return pd.DataFrame(rows)


def _points(variants=("lmdb", "lmdbio-lmm-dio")):
    rows = []
    for v, p, r in itertools.product(variants, PROCS, range(2)):
        for rank in range(p):
            base = dict(variant=v, nprocs=p, repeat=r, rank=rank, status="ok", iters=4, batch_size=64,
                        cache="cold", is_reader=rank == 0)
            rows.append({**base, "level": "step", "phase": "total", "sleep_s": 0.01 * p, "vcsw": 10 * p,
                         "ivcsw": 2 * p, "wall_s": 0.1})
            rows.append({**base, "level": "reader", "phase": "locate", "records_walked": 64 * 4,
                         "wall_s": 0.001 * p, "minflt": 5, "majflt": 1, "calls": 0, "bytes": 0})
            mmap = v == "lmdb"
            rows.append({**base, "level": "reader", "phase": "read", "wall_s": 0.01,
                         "minflt": 200 if mmap else 0, "majflt": 20 if mmap else 0,
                         "calls": 0 if mmap else 4, "bytes": 800_000})
            rows.append({**base, "level": "setup", "phase": "setup", "wall_s": 0.02})
    return pd.DataFrame(rows)


def test_speedup_table_is_lmdb_time_over_variant_time():
    s = _summary()
    t = tables.speedup_table(s)
    assert list(t.index)[0] == "LMDB" and (t.loc["LMDB"] == 1).all()
    # The bench's one definition: a ratio of medians over repeats at the same point.
    want = (s[s.variant == "lmdbio-lmm"].groupby("nprocs").records_per_s.median()
            / s[s.variant == "lmdb"].groupby("nprocs").records_per_s.median())
    assert np.allclose(t.loc["LMDBIO-LMM"].to_numpy(), want.round(2).to_numpy())
    with pytest.raises(ValueError, match="lmdb"):
        tables.speedup_table(s[s.variant != "lmdb"])


def test_per_iteration_divides_by_iterations_and_sums_ranks():
    m = tables.per_iteration(_points(), "reader", ["locate"], ["records_walked"])
    row = m[(m.variant == "lmdb") & (m.nprocs == 4)].iloc[0]
    assert row["records_walked"] == 64
    assert row["records_walked_sum"] == 64 * 4


def test_every_figure_kind_saves_png_and_svg(tmp_path):
    s, pts = _summary(), _points()
    pages = pd.DataFrame({"dataset": "d", "pgno": range(300),
                          "type": ["meta"] * 2 + ["leaf"] + ["overflow"] * 290 + ["free"] * 7})
    records = pd.DataFrame({"dataset": "d", "size": np.full(100, 3083)})
    shm = pd.DataFrame({"rank": [0, 1], "node_size": 2, "all_slices_visible": True,
                        "copy_gb_per_s": [1.0, 1.1]})
    model = pd.DataFrame({"dataset": "d", "record": range(50), "true_offset": np.arange(50) * 4096,
                          "model_offset": np.arange(50) * 4096, "model_single_txn_offset": np.arange(50) * 4096,
                          "commit_every": 20})
    tl = pd.DataFrame([dict(variant=v, nprocs=2, rank=r, batch=b, phase=ph, is_reader=True,
                            t_start=b + r * 0.1 + (0.05 if ph == "read" else 0),
                            t_end=b + r * 0.1 + (0.09 if ph == "read" else 0.05), wall_s_total=4.0,
                            iters=4, coalesce_bytes=c, record_bytes=4e6, cache="cold")
                       for v, c in (("lmdbio-lmm-dio-prov", 0), ("lmdbio-lmm-dio-prov-coal", 1 << 20),
                                    ("lmdbio-lmm-dio-prov-coal-stag", 1 << 22))
                       for r in range(2) for b in range(4) for ph in ("read", "stagger_wait")])
    mech = tables.per_iteration(pts, "step", ["total"], ["vcsw"])
    figures = {
        "env": plots.environment(shm, META),
        "pages": plots.page_map(pages, META),
        "sizes": plots.record_sizes(records, META),
        "breakdown": plots.time_breakdown(s[s.variant == "lmdb"], META),
        "contention": plots.contention(pts, META),
        "seek": plots.seek_cost(pts, META),
        "requests": plots.io_requests(pts, META),
        "opt": plots.optimization(s, ["lmdb", "lmdbio-lmm"], mech, META, mech_col="vcsw_sum"),
        "prov": plots.prov_model(model, META),
        "coal": plots.coalescing(tl, META),
        "timelines": plots.timelines(tl, META),
        "scaling": plots.scaling(s, META),
        "training": plots.training(s[s.variant.isin(["lmdb", lmdbio.VARIANTS[-1]])], META),
    }
    for name, fig in figures.items():
        assert "testhost: 2 cores" in fig._suptitle.get_text(), name
        png, svg = plots.save(fig, f"t_{name}", tmp_path)
        assert png.stat().st_size > 1000 and svg.stat().st_size > 1000


def test_a_figure_saved_twice_gives_the_same_svg(tmp_path):
    # A replot of unchanged results must leave the committed SVGs as they are.
    fig = plots.scaling(_summary(), META)
    fig.axes[0].set_clip_on(True)
    first = plots.save(fig, "same", tmp_path / "a")[1].read_bytes()
    second = plots.save(fig, "same", tmp_path / "b")[1].read_bytes()
    assert b"clip-path" in first and b"<dc:date>" not in first
    assert first == second


def test_load_names_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="RUN=True"):
        plots.load(tmp_path, "summary.csv")
    assert plots.machine(tmp_path) == {}


def test_claim_settings_draws_a_panel_per_setting_and_says_what_is_not_measured(tmp_path):
    from lmdbio.lab import claims

    c = claims.claim("C1")
    series = {"local": pd.DataFrame({"nprocs": [1, 4], "value": [0.1, 0.2], "lo": [0.1, 0.2],
                                     "hi": [0.1, 0.2]})}
    why = f"not measured in this setting: {claims.SHARED_NOT_MEASURED['C1']}"
    verdicts = pd.DataFrame([{"setting": "shared", "verdict": claims.NOT_MEASURED, "why": why,
                              "value": np.nan, "nprocs": np.nan}])
    fig = plots.claim_settings(c, series, verdicts, META)
    assert [ax.get_title() for ax in fig.axes] == [plots.SETTING_TITLES[s] for s in claims.SETTINGS]
    texts = {s: " ".join(t.get_text() for t in ax.texts) for s, ax in zip(claims.SETTINGS, fig.axes)}
    assert texts["shared"].replace("\n", " ").startswith("not measured in this setting: LMDB's I/O share")
    assert texts["gpfs"] == "no results"


def test_a_single_repeat_is_labelled_so_and_a_committed_panel_says_default_scale(tmp_path):
    from lmdbio.lab import claims
    from lmdbio.lab.lessons.settings import committed_notes
    from lmdbio.lab.scales import COMMITTED_RESULTS

    c = claims.claim("C2")
    series = {"local": pd.DataFrame({"nprocs": [1, 8], "value": [1.0, 1.5], "lo": [1.0, 1.5], "hi": [1.0, 1.5]})}
    verdicts = pd.DataFrame([{"setting": "local", "verdict": "inconclusive", "value": 1.5, "nprocs": 8,
                              "repeats": 1, "measured": "1.5 at P=8", "magnitude": "", "why": ""}])
    fig = plots.claim_settings(c, series, verdicts, META,
                               committed_notes(tmp_path / "03_lmm", {"gpfs": COMMITTED_RESULTS / "03_lmm" / "gpfs"}))
    texts = {s: " ".join(t.get_text() for t in ax.texts) for s, ax in zip(claims.SETTINGS, fig.axes)}
    assert "inconclusive (1 repeat)" in texts["local"]
    assert "committed, default scale" in texts["gpfs"].replace("\n", " ")
    # A replot from the committed results draws every panel from them: no note but the shared one's.
    committed = COMMITTED_RESULTS / "03_lmm"
    assert set(committed_notes(committed, {"gpfs": committed / "gpfs"})) == {"shared"}
