"""Rendering: claims.csv and the model's tables as Markdown, and the blocks of figures/README.md and docs/claims.md."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..scales import COMMITTED_RESULTS, REPO
from .judge import evaluate, write
from .registry import BY_ID, CHECKS, claim_ids
from .verdicts import NO_FACTOR, SETTING_LABELS, SETTINGS, num, outside_band

__all__ = ["README", "CLAIMS_DOC", "MARK_START", "MARK_END", "render", "show", "readme_table",
           "render_validation", "render_split", "render_claims_summary", "rendered_blocks",
           "update_readme"]


README = REPO / "figures" / "README.md"


#: The page whose "claims summary" block ``python -m lmdbio.lab.claims`` rewrites beside README's table.
CLAIMS_DOC = REPO / "docs" / "claims.md"


MARK_START = "<!-- claims.csv: rendered by `python -m lmdbio.lab.claims`; do not edit by hand -->"


MARK_END = "<!-- end of claims.csv -->"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(df: pd.DataFrame, ids=None) -> str:
    """A Markdown table of claims.csv rows (all, or those of ``ids``; ``C8`` includes ``C8-imagenet``)."""
    if ids is not None:
        df = df[df["claim"].isin(claim_ids(ids))]
    lines = ["| claim | paper | setting | measured | criterion | verdict | magnitude | why |",
             "|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        c = BY_ID.get(r.claim)
        name = (f"{r.claim}: {c.statement}" if c else f"{r.claim}: {CHECKS[r.claim]}" if r.claim in CHECKS
                else r.claim)
        if r.setting == "model" and c is not None and isinstance(r.dataset, str) and r.dataset:
            name += f" [model: {r.dataset}]"
        lines.append("| " + " | ".join(_cell(x) for x in (
            name, r.paper, SETTING_LABELS.get(r.setting, r.setting), r.measured, r.criterion,
            f"**{r.verdict}**", getattr(r, "magnitude", NO_FACTOR), r.why)) + " |")
    return "\n".join(lines)


def show(results_root, ids, *, rewrite: bool = True):
    """A notebook's closing cell: judge every claim, show its claims' rows as Markdown.

    ``rewrite`` (the notebook's ``RUN``) also writes ``results_root/claims.csv``;
    a replot writes nothing.
    """
    from IPython.display import Markdown, display

    want = claim_ids(ids)   # a ValueError naming the known ids for an unknown one
    df = write(results_root) if rewrite else evaluate(results_root)
    rows = df[df["claim"].isin(want)]
    # A claim outside claims.csv (T, the training-time view of C1 and C8) is judged here.
    extra = [BY_ID[c] for c in sorted(want) if c in BY_ID and c not in set(df["claim"])]
    if extra:
        rows = pd.concat([rows, evaluate(results_root, extra)], ignore_index=True)
    name = Path(results_root).name
    where = f"`{name}/claims.csv`" if rewrite else f"the results in `{name}/`"
    display(Markdown(f"## Verdicts (from {where})\n\n" + render(rows)))
    return rows


def readme_table(df: pd.DataFrame) -> str:
    return f"{MARK_START}\n{render(df)}\n{MARK_END}"


def _markers(name: str) -> tuple[str, str]:
    return (f"<!-- {name}: rendered by `python -m lmdbio.lab.claims`; do not edit by hand -->",
            f"<!-- end of {name} -->")


def render_validation(results_root=COMMITTED_RESULTS) -> str:
    """The validation per setting and cache (cold, warm): variants within 25% median |error|, the
    worst variant's median |error| and the worst point, from ``model_validation/criterion.csv``."""
    d = Path(results_root) / "model_validation"
    if not (d / "criterion.csv").exists():
        return "(no model_validation/criterion.csv: run `lmdbio model validate`)"
    c = pd.read_csv(d / "criterion.csv")
    if "cache" not in c.columns:
        c = c.assign(cache="all")
    lines = ["| setting | cache | independent | variants with median \\|error\\| <= 25% | worst variant | "
             "its median \\|error\\| | worst point (every variant) | predicted to dominate there | "
             "disk bandwidth the local points were predicted with |",
             "|---|---|---|---|---|---|---|---|---|"]
    if "disk_bw" not in c.columns:
        c = c.assign(disk_bw="")
    for r in c.itertuples():
        lines.append("| " + " | ".join(_cell(x) for x in (
            r.setting, r.cache, "yes" if r.independent else "no (shares the storage model)",
            f"{r.variants_meeting} of {r.variants}", r.worst_variant,
            f"{100 * r.worst_median_abs_error:.0f}%", r.worst_point, r.predicted_dominant,
            _disk_words(r))) + " |")
    return "\n".join(lines)


def _disk_words(r) -> str:
    """The validation table's disk cell: the bandwidth used and, where a probe set it, the
    variants that meet the criterion with calibration's disk instead."""
    words = "" if r.disk_bw != r.disk_bw else str(r.disk_bw)
    n = getattr(r, "variants_meeting_calibrated_disk", float("nan"))
    if words and n == n:
        words += f"; with calibration's disk_bw {int(n)} of {r.variants} meet"
    return words


def render_split(results_root=COMMITTED_RESULTS) -> str:
    """The split by optimization against the papers' factors, from ``claims_split.csv``."""
    f = Path(results_root) / "claims_split.csv"
    if not f.exists():
        return "(no claims_split.csv: run `python -m lmdbio.lab.claims`)"
    d = pd.read_csv(f)
    lines = ["| workload | ratio | P | model | band, 5-95% of the joint samples | paper | band vs paper | "
             "estimates it follows most | slower variant dominated by |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in d.itertuples():
        lines.append("| " + " | ".join(_cell(x) for x in (
            r.workload, r.ratio, f"{r.nprocs:,}", num(r.model_factor),
            f"{num(r.band_low)}-{num(r.band_high)}",
            f"{r.paper_factor:g}x ({r.paper})" if r.paper_factor == r.paper_factor else f"none stated ({r.paper})",
            r.band_magnitude,
            r.decides if isinstance(r.decides, str) else "", r.slow_dominated_by)) + " |")
    out = [f"{r.workload} {r.ratio}: {outside_band(num(r.model_factor), r.model_factor < r.band_low)}"
           for r in d.itertuples() if not r.band_low <= r.model_factor <= r.band_high]
    if out:
        lines += ["", "Outside its band: " + "; ".join(dict.fromkeys(out)) + "."]
    return "\n".join(lines)


def render_claims_summary(df: pd.DataFrame) -> str:
    """docs/claims.md's summary table: the paper's words and each setting's verdict, from claims.csv."""
    heads = {"local": "local disk", "gpfs": "emulated GPFS", "throttled": "throttled device",
             "shared": "shared target", "model": "papers' scale (model)"}
    lines = ["| claim | the paper says | " + " | ".join(heads.get(s, s) for s in SETTINGS) + " |",
             "|---" * (2 + len(SETTINGS)) + "|"]
    for cid, g in df.groupby("claim", sort=False):
        c = BY_ID.get(cid)
        cells = []
        for s in SETTINGS:
            x = g[g["setting"] == s]
            if x.empty:
                cells.append("-")
            elif len(x) == 1:
                cells.append(f"{x['verdict'].iloc[0]} ({x['measured'].iloc[0]})")
            else:   # the model: one row per workload
                cells.append("; ".join(f"{r.dataset}: {r.verdict} ({r.measured})" for r in x.itertuples()))
        statement = f"{c.statement} ({c.paper})" if c else CHECKS.get(cid, cid)
        lines.append("| " + " | ".join(_cell(x) for x in (cid, statement, *cells)) + " |")
    return "\n".join(lines)


def _replace_block(text: str, name: str, body: str, where: Path, required: bool) -> str:
    start, end = _markers(name) if name != "claims.csv" else (MARK_START, MARK_END)
    if start not in text or end not in text:
        if required:
            raise ValueError(f"{where} lacks the {name} markers ({start!r} ... {end!r})")
        return text
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + f"{start}\n{body}\n{end}" + tail


def rendered_blocks(df: pd.DataFrame, results_root=COMMITTED_RESULTS) -> dict:
    """``{marker name: rendered text}`` of every block figures/README.md, docs/claims.md and
    docs/model.md hold."""
    from ..model.criterion import render as render_criterion

    return {"claims.csv": render(df), "model_validation": render_validation(results_root),
            "claims_split.csv": render_split(results_root), "claims summary": render_claims_summary(df),
            "model criterion": render_criterion(results_root)}


def update_readme(df: pd.DataFrame, readme: str | Path = README, results_root=COMMITTED_RESULTS, *,
                  require=("claims.csv",)) -> Path:
    """Replace the rendered blocks in ``readme`` (those named in ``require`` must be there)."""
    readme = Path(readme)
    text = readme.read_text()
    for name, body in rendered_blocks(df, results_root).items():
        text = _replace_block(text, name, body, readme, required=name in require)
    readme.write_text(text)
    return readme
