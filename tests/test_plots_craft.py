"""lmdbio.lab.plots, figure craft: what each figure must let a reader see (issue 33, items 3 and 8)."""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from lmdbio.lab import claims, plots

META = {"host": {"hostname": "testhost", "cores": 2}, "config": {"scale": "tiny"}}
CIFAR, IMAGENET = "cifar10-large-alexnet", "imagenet-caffenet"


@pytest.fixture(autouse=True)
def _close():
    plots.setup()
    yield
    matplotlib.pyplot.close("all")


def _texts(ax) -> str:
    return " ".join(t.get_text() for t in ax.texts).replace("\n", " ")


def _row(c, setting, value, lo, hi, verdict=None, dataset=None, nprocs=8):
    """A claims.csv row as claims.evaluate writes it, its words from claims' own functions."""
    model = setting == "model"
    mag = claims.band_word(lo, hi, c.paper_factor) if model else claims.magnitude(value, c.paper_factor)
    verdict = verdict or (claims.band_verdict(lo, hi, c.threshold) if model else claims.direction(lo, hi, c.threshold))
    span = "band" if model else "repeats"
    return {"claim": c.id, "setting": setting, "value": value, "nprocs": nprocs, "verdict": verdict,
            "magnitude": mag, "paper_factor": c.paper_factor or np.nan, "dataset": dataset or c.dataset,
            "measured": f"{value:.2f} at P={nprocs} ({span} {lo:.2f}-{hi:.2f})", "why": ""}


def _series(values, procs=(1, 2, 4, 8), spread=0.02):
    return pd.DataFrame({"nprocs": procs, "value": values, "lo": [v - spread for v in values],
                         "hi": [v + spread for v in values]})


def _model(procs=(1, 8, 72, 576, 9216)):
    """Two workloads' predictions, interleaved by P as claims.series returns them."""
    rows = [{"nprocs": p, "workload": w, "value": v, "lo": v, "hi": v}
            for p in procs for w, v in ((IMAGENET, 1.0 + 0.1 * procs.index(p)), (CIFAR, 3.0 - 0.2 * procs.index(p)))]
    return pd.DataFrame(rows).sort_values("nprocs", kind="stable").reset_index(drop=True)


def _checks(fails: bool) -> pd.DataFrame:
    rows = [{"claim": "A1", "setting": "model", "verdict": "yes", "measured": "inside: 70.5-2.15e+03 s"}]
    if fails:
        rows.append({"claim": "A1-per-process", "setting": "model", "verdict": "no",
                     "measured": "FAILED: 2 of 7 series leave the axis (44.2-9.36e+05 s)"})
    return pd.DataFrame(rows)


def _settings_figure(checks=None):
    c = claims.claim("C2")
    series = {"local": _series([1.0, 1.1, 1.0, 1.01]), "throttled": _series([1.25], procs=(8,)),
              "model": _model()}
    verdicts = pd.DataFrame([_row(c, "local", 1.01, 0.75, 1.19), _row(c, "throttled", 1.25, 1.23, 1.25),
                             _row(c, "model", 1.4, 0.9, 1.5, dataset="imagenet", nprocs=9216),
                             _row(c, "model", 2.2, 1.3, 3.1, dataset="cifar10", nprocs=9216)])
    return c, verdicts, plots.claim_settings(c, series, verdicts, META, checks=checks if checks is not None
                                             else _checks(fails=True))


def test_a_yes_far_under_the_papers_factor_reads_direction_yes_magnitude_smaller():
    c, verdicts, fig = _settings_figure()
    texts = dict(zip(claims.SETTINGS, (_texts(ax) for ax in fig.axes)))
    throttled = verdicts[verdicts["setting"] == "throttled"].iloc[0]
    assert throttled["verdict"] == "yes" and throttled["magnitude"] == "smaller"
    assert "1.25 at P=8 (repeats 1.23-1.25): direction yes, magnitude smaller than the paper's 20x" in texts["throttled"]
    assert "direction no, magnitude smaller than the paper's 20x" in texts["local"]
    # The model: one judgement per workload, its band against the paper's factor.
    for r in verdicts[verdicts["setting"] == "model"].itertuples():
        assert f"{r.dataset}: {r.measured}: direction {r.verdict}" in texts["model"]
        assert f"magnitude {r.magnitude}" in texts["model"]
    assert "the paper's factor 20x" in fig._suptitle.get_text()
    # The star's label carries the magnitude too, not a bare "yes".
    assert "yes, smaller" in texts["throttled"]


def test_the_settings_figure_of_every_committed_claim_gives_each_judged_value_its_magnitude():
    for c in claims.CLAIMS:
        verdicts = claims.evaluate(claims.COMMITTED_RESULTS, [c], checks=True)
        fig = plots.claim_settings(c, claims.series(c), verdicts, META)
        texts = dict(zip(claims.SETTINGS, (_texts(ax) for ax in fig.axes)))
        for r in verdicts[~verdicts["claim"].str.startswith("A")].itertuples():
            if not np.isfinite(r.value):
                continue
            assert f"{r.measured}: direction {r.verdict}" in texts[r.setting], (c.id, r.setting)
            if np.isfinite(r.paper_factor):
                assert f"magnitude {r.magnitude}" in texts[r.setting], (c.id, r.setting)
                assert f"the paper's {r.paper_factor:g}" in texts[r.setting], (c.id, r.setting)
            else:
                assert "the paper states no factor" in texts[r.setting], (c.id, r.setting)
        matplotlib.pyplot.close(fig)


def test_the_model_panel_draws_one_line_per_workload():
    _, _, fig = _settings_figure()
    model = fig.axes[-1]
    want = _model()
    # Data lines: not an error bar's caps (markers without a line), not the criterion (x in axes units).
    procs = set(want["nprocs"])
    lines = [ln for ln in model.lines if ln.get_linestyle() not in ("None", "") and len(ln.get_xdata()) > 2
             and set(np.asarray(ln.get_xdata(), float)) <= procs]
    assert len(lines) == 2
    for ln in lines:
        x = np.asarray(ln.get_xdata(), float)
        assert (np.diff(x) > 0).all(), "a line that goes back in P zig-zags between workloads"
    drawn = {tuple(np.round(np.asarray(ln.get_ydata(), float), 6)) for ln in lines}
    assert drawn == {tuple(np.round(g.sort_values("nprocs")["value"], 6)) for _, g in want.groupby("workload")}
    styles = {(ln.get_color(), ln.get_linestyle(), ln.get_marker()) for ln in lines}
    assert len(styles) == 2
    # The figure's legend names each workload.
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
    assert CIFAR in legend and IMAGENET in legend


def test_the_model_panel_says_when_its_absolute_check_fails_and_names_notebook_11():
    _, _, failing = _settings_figure(_checks(fails=True))
    text = _texts(failing.axes[-1])
    assert "notebook 11" in text
    assert "FAIL" in text and "A1-per-process: 2 of 7 series leave the axis" in text
    _, _, passing = _settings_figure(_checks(fails=False))
    text = _texts(passing.axes[-1])
    assert "notebook 11" in text and "FAIL" not in text and "pass" in text
    # The measured panels say nothing of the model's check.
    assert "notebook 11" not in _texts(passing.axes[0])


def test_the_model_panel_keeps_its_own_scale():
    c = claims.claim("C5")
    series = {"local": _series([3.0, 3.3, 2.6, 9.6]), "model": _model()}
    fig = plots.claim_settings(c, series, None, META, checks=_checks(fails=False))
    measured_top, model_top = fig.axes[0].get_ylim()[1], fig.axes[-1].get_ylim()[1]
    assert measured_top > 9.6 and model_top < 5, "the measured values must not flatten the model's"


def _summary():
    rows = []
    for v, p, cache, r in itertools.product(("lmdbio-lmm", "lmdbio-lmm-dm"), (1, 2, 4), ("cold", "warm"), range(2)):
        rate = (6000 if cache == "cold" else 30000) * (1 + 0.05 * r)
        rows.append(dict(variant=v, nprocs=p, cache=cache, repeat=r, status="ok", records_per_s=rate))
    return pd.DataFrame(rows)


def test_the_cold_and_warm_cache_are_drawn_and_shown_in_the_legend_differently():
    fig = plots.optimization(_summary(), ["lmdbio-lmm", "lmdbio-lmm-dm"], meta=META)
    ax = fig.axes[0]
    legend = ax.get_legend()
    handles = dict(zip((t.get_text() for t in legend.get_texts()), legend.legend_handles))
    cold, warm = handles["cold cache"], handles["warm cache"]
    assert cold.get_linestyle() != warm.get_linestyle()
    assert (cold.get_marker(), cold.get_markerfacecolor()) != (warm.get_marker(), warm.get_markerfacecolor())
    # The lines drawn use the styles the legend shows.
    drawn = {(ln.get_linestyle(), ln.get_marker()) for ln in ax.lines if len(ln.get_xdata()) == 3}
    assert {(cold.get_linestyle(), cold.get_marker()), (warm.get_linestyle(), warm.get_marker())} <= drawn


def test_a_variant_under_another_with_the_same_values_stays_visible():
    mech = pd.DataFrame({"variant": ["lmdbio-lmm"] * 3 + ["lmdbio-lmm-dm"] * 3, "nprocs": [1, 2, 4] * 2,
                         "requests": [20.0] * 6})
    fig = plots.optimization(_summary(), ["lmdbio-lmm", "lmdbio-lmm-dm"], mech, META, mech_col="requests")
    a2 = fig.axes[1]
    lmm, dm = (next(ln for ln in a2.lines if ln.get_label() == plots.label(v)) for v in ("lmdbio-lmm", "lmdbio-lmm-dm"))
    assert lmm.get_marker() != dm.get_marker()
    # The one below is wider and larger, so that it shows around the one on top.
    assert lmm.get_zorder() < dm.get_zorder()
    assert lmm.get_linewidth() > dm.get_linewidth() and lmm.get_markersize() > dm.get_markersize()


def test_a_log_axis_over_less_than_a_decade_gets_plain_ticks():
    rows = [dict(variant=v, nprocs=p, repeat=r, status="ok", wall_s=0.02 + 0.03 * (i + p) / 12 + 0.001 * r)
            for i, v in enumerate(("lmdb", "lmdbio-lmm", "raw")) for p in (1, 2, 4, 8) for r in range(2)]
    fig = plots.scaling(pd.DataFrame(rows), META)
    ax = fig.axes[0]
    fig.canvas.draw()
    lo, hi = ax.get_ylim()
    shown = [t for t in ax.get_yticks() if lo <= t <= hi]
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert len(shown) >= 4, shown
    assert labels and not any("10^" in t or "times" in t for t in labels), labels
    assert all(float(t) > 0 for t in labels)


def test_record_sizes_have_no_offset_label():
    records = pd.DataFrame({"dataset": ["cifar10"] * 50 + ["imagenet"] * 20,
                            "size": [3083] * 50 + [196622] * 5 + [196623] * 15})
    fig = plots.record_sizes(records, META)
    fig.canvas.draw()
    for ax in fig.axes:
        assert ax.xaxis.get_offset_text().get_text() == "" and ax.yaxis.get_offset_text().get_text() == ""
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["196,622", "196,623"]


def test_prov_model_spikes_do_not_flatten_the_rest():
    n = 3000
    true = np.arange(n) * 4096
    err = (np.arange(n) // 1000) * 4096 * 20  # 0, 20, 40 pages
    err[[1000, 2000]] = 2050 * 4096         # two records far off
    model = pd.DataFrame({"dataset": "d", "record": range(n), "true_offset": true, "model_offset": true + err,
                          "model_single_txn_offset": true, "commit_every": 1000})
    fig = plots.prov_model(model, META)
    ax = fig.axes[0]
    assert 40 < ax.get_ylim()[1] < 200
    assert "2 single records off by 2,050-2,050 pages" in _texts(ax)
