"""The matrix's results: the summary CSV, failures grouped by cause, a command to rerun them."""

from __future__ import annotations

import functools
import os
from dataclasses import fields
from pathlib import Path
from collections.abc import Iterable

from .combos import Combo
from .pool import full_matrix
from .samples import FIELDS

__all__ = ["SUMMARY_COLUMNS", "write_summary", "rerun_command", "group_failures",
           "failure_report"]


SUMMARY_COLUMNS = ("nprocs", "variant", "prefetch", "shuffle", "last_batch", "ranks_per_node",
                   "readers_per_node", "records", "sidecar", "n", "batch", "uneven", "coalesce",
                   "break_after", "variant_read", "verdict", "checked", "wrong", "wrong_held",
                   "where", "expected", "refused", "reason", "error", "problems", "seconds",
                   "slowest")


def write_summary(rows: list[dict], path: str | os.PathLike) -> Path:
    """One CSV row per combination: its options, records checked, wrong, refused and why."""
    import csv

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, SUMMARY_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            rpn = r["ranks_per_node"]
            w.writerow({**r, "ranks_per_node": "" if rpn is None else rpn,
                        "problems": " | ".join(r["problems"][:4])})
    return path


def rerun_command(combos: Iterable[Combo]) -> str:
    """A command line that reruns these combinations: the full run, narrowed by ``--where``
    to the values they take in each field (it may also run a few more)."""
    combos = list(combos)
    nprocs = tuple(sorted({c.nprocs for c in combos}))
    parts = [f"--nprocs {','.join(map(str, nprocs))}"] if nprocs != (4,) else []
    for k in FIELDS[1:]:
        vals = sorted({str(getattr(c, k)) for c in combos})
        if set(vals) != _field_values(nprocs)[k]:
            parts.append(f"--where {k}={','.join(vals)}")
    return ".venv/bin/python -m lmdbio.lab.testing.matrix full " + " ".join(parts)


@functools.lru_cache(maxsize=4)
def _field_values(nprocs: tuple[int, ...]) -> dict[str, set[str]]:
    pool = full_matrix(nprocs)
    return {k: {str(getattr(c, k)) for c in pool} for k in FIELDS}


def _cause(row: dict) -> str:
    """What a failing row's failure looks like, with paths and numbers left out."""
    import re

    if row["error"]:
        text = row["error"].split(" [at ")[0].split("; aborting")[0]
        lost = row["error"].startswith(("crash", "hang"))
        kind = row["error"].split(":")[0] + ": " if lost else ""
        # The innermost error's words: "the background read of batch 3 failed: LmdbioError: x"
        # and an aborting rank's "lmdbio: error: rank 1: LmdbioError: x" group with "x".
        inner = list(re.finditer(r"\b\w+(Error|Exception|Interrupt): ", text))
        if inner:
            text = kind + text[inner[-1].start():]
        text = re.sub(r"(\$MATRIX)?/\S+", "PATH", text)
        text = re.sub(r"rank\(s\) \[[\d, ]*\]", "rank(s)", text)
        return re.sub(r"\d+", "#", text)[:160]
    if row["verdict"] == "FAIL: waited a timeout":
        phase = row["slowest"].split(":")[0]
        return f"right records, but a phase took about LMDBIO_TIMEOUT ({phase})"
    if row["verdict"] == "FAIL: wrong records":
        # "epoch 0: 3; held epoch 0->epoch 1: 8": where the batch was delivered, where it
        # was found wrong, told apart as stream reads, epochs and the stop in epoch 1.
        kinds = set()
        for k in row["where"].split("; "):
            place = k.split(":")[0]
            delivered, _, found = place.partition("->")
            stream = "epochs" in delivered.split(" ", 1)[-1] or "epochs" in found
            if not found:
                kinds.add("stream reads" if stream else "epoch batches")
            elif found.startswith("a stop"):
                kinds.add("held batches during a member's stop")
            else:
                kinds.add("held batches, next read " + ("a stream read" if stream else
                                                        "in an epoch"))
        return (f"wrong records ({'prefetch' if row['prefetch'] else 'no prefetch'}): "
                + ", ".join(sorted(kinds)))
    if row["problems"]:
        return re.sub(r"\d+", "#", row["problems"][0])[:160]
    return f"{row['verdict']}: {row['refused']}"


def group_failures(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """The failing rows grouped by :func:`_cause`, largest group first."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r["verdict"].startswith("FAIL"):
            groups.setdefault(_cause(r), []).append(r)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))


def failure_report(rows: list[dict], examples: int = 2) -> str:
    """The failures, one paragraph per group: cause, count, examples, a command to rerun them."""
    out = []
    for cause, group in group_failures(rows):
        combos = [Combo(**{f.name: r[f.name] for f in fields(Combo)}) for r in group]
        lines = [f"{len(group)} x {cause}"]
        for r, c in list(zip(group, combos))[:examples]:
            lines.append(f"    {c.label()}: {r['verdict']}, wrong {r['wrong']}, held "
                         f"{r['wrong_held']}{'; ' + r['where'] if r['where'] else ''}")
        lines.append(f"    rerun: {rerun_command(combos)}")
        out.append("\n".join(lines))
    return "\n".join(out)
