"""The docs' variant tables, rendered from the stage registry.

README.md and docs/reader.md hold them between ``<!-- variant-table: KIND -->``
and ``<!-- /variant-table -->``; tests/test_stage_registry.py fails when a row
differs. ``python -m lmdbio.variant_table --write README.md docs/reader.md``
rewrites them.
"""

from __future__ import annotations

import re
import sys

from . import registry

__all__ = ["rows", "render", "replace_tables", "tables_in", "main"]

_BLOCK = re.compile(r"(<!-- variant-table: (\w+) -->\n)(.*?)(<!-- /variant-table -->)", re.S)


def _pieces(variant: str) -> list[tuple[str, str]]:
    """``variant``'s stages (:func:`lmdbio.registry.stage_names`) with their module files."""
    by = {s.role: s for s in registry.choose(registry.named()[variant])[0]}
    roles = [r for r in ("locator", "fetcher", "distributor", "coalesce", "stagger") if r in by]
    classes = [by[r].cls for r in roles]
    files = [f"{c.partition(':')[0]}.py" if isinstance(c, str) else "" for c in classes]
    return list(zip(registry.variant_stages(variant), files, strict=True))


def rows() -> list[dict]:
    """One row per named variant: its stages (those new to it marked), what it changes and
    the problem it fixes."""
    paper = registry.series()
    tags = {o.tag: o for o in registry.optimizations()}
    out = []
    for name in registry.variants():
        pieces = _pieces(name)
        i = paper.index(name) if name in paper else -1
        # What is new to it: over the series before it, or over the baseline.
        before = {p for p, _ in _pieces(paper[max(i - 1, 0)])} if i else {p for p, _ in pieces}
        stages = ", ".join(p if p in before else f"**{p}** (`{m}`)" if m else f"**{p}**"
                           for p, m in pieces)
        if i > 0:
            new = (set(name.split("-")) & set(tags)) - set(paper[i - 1].split("-"))
            opt = tags[max(new, key=list(tags).index)]
            summary, problem = opt.summary, opt.problem
        else:
            locator = next(s for s in registry.choose(registry.named()[name])[0]
                           if s.role == "locator")
            summary, problem = locator.summary, locator.problem
        out.append({"variant": name, "stages": stages, "summary": summary, "problem": problem})
    return out


def render(kind: str) -> str:
    """The markdown table for ``kind``: ``readme`` (what it changes) or ``docs`` (with the
    stages, ``lmdbio/pipeline/...``)."""
    if kind == "readme":
        head = ["| variant | what it changes | problem fixed |", "|---|---|---|"]
        body = [f"| `{r['variant']}` | {r['summary']} | {r['problem']} |" for r in rows()]
    elif kind == "docs":
        head = ["| variant | stages (`lmdbio/pipeline/...`) | what it changes | problem fixed |",
                "|---|---|---|---|"]
        body = [f"| `{r['variant']}` | {r['stages']} | {r['summary']} | {r['problem']} |"
                for r in rows()]
    else:
        raise ValueError(f"kind must be 'readme' or 'docs', got {kind!r}")
    return "\n".join(head + body) + "\n"


def tables_in(text: str) -> dict[str, str]:
    """The variant tables in a page's ``text``, by kind."""
    return {m.group(2): m.group(3) for m in _BLOCK.finditer(text)}


def replace_tables(text: str) -> str:
    """``text`` with every marked variant table rendered afresh."""
    return _BLOCK.sub(lambda m: m.group(1) + render(m.group(2)) + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    """Print both tables, or with ``--write FILE...`` rewrite the marked ones in place."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--write"]:
        for path in args[1:]:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            with open(path, "w", encoding="utf-8") as f:
                f.write(replace_tables(text))
        return 0
    print(render("readme"))
    print(render("docs"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
