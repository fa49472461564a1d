"""The shared setting: each claim notebook's ``NN_name/shared/`` copied from the bench-shared sweep."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..scales import COMMITTED_RESULTS, REPO

__all__ = ["SHARED_SWEEP", "SHARED_NOTEBOOKS", "shared_results", "repo_relative", "shared_note"]


#: Where ``make bench-shared`` writes its runs (``cifar10-cold-k<K>[-TAG]/``), under a results root.
SHARED_SWEEP = "shared"


#: The claim notebooks and the variants of the shared sweep each one's shared folder holds; ``()``:
#: none of its claims is in the sweep (:data:`SHARED_NOT_MEASURED` says why).
SHARED_NOTEBOOKS = {
    "02_lmdb_analysis": (),
    "03_lmm": ("lmdb", "lmdbio-lmm"),
    "04_dm": ("lmdbio-lmm", "lmdbio-lmm-dm"),
    "05_dio": ("lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio"),
    "06_prov": ("lmdbio-lmm-dio", "lmdbio-lmm-dio-prov"),
    "07_coal": ("lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal"),
    "08_stag": ("lmdbio-lmm-dio-prov-coal", "lmdbio-lmm-dio-prov-coal-stag"),
    "09_scaling": ("raw", "lmdb", "lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov",
                   "lmdbio-lmm-dio-prov-coal", "lmdbio-lmm-dio-prov-coal-stag"),
    "10_training": (),
}


def _shared_run(run: Path) -> dict:
    """One bench-shared run folder: its time scale k (meta.json's profile, else the folder's name),
    its P values, cold summary rows and meta.json."""
    import json
    import re

    meta = json.loads((run / "meta.json").read_text())
    cfg = meta.get("config", {})
    k = (cfg.get("pfs") or {}).get("profile", {}).get("time_scale")
    if k is None:
        m = re.search(r"-k([0-9.]+)", run.name)
        k = float(m.group(1)) if m else float("nan")
    s = pd.read_csv(run / "summary.csv")
    s = s[s["cache"] == "cold"] if "cache" in s else s
    return {"run": run, "k": float(k), "summary": s, "meta": meta,
            "nprocs": sorted(int(p) for p in s["nprocs"].unique())}


def shared_results(results_root=COMMITTED_RESULTS) -> list[Path]:
    """Write each claim notebook's ``NN_name/shared/`` from the ``make bench-shared`` sweep.

    Reads ``results_root/shared/cifar10-cold-k*/{summary.csv, meta.json}``
    (default root: the committed ``data/results``). Each P is taken from the
    run at the smallest time scale k that has it (the sweep's main k; a run
    at a larger k for the same P is its check and is left out), so a later
    P = 64 folder joins at its own k. Writes ``summary.csv`` (the cold rows of
    the notebook's variants, :data:`SHARED_NOTEBOOKS`; none where the sweep
    holds none) and ``meta.json`` (the source folders, k per P, those left out,
    the dataset and node shape) into every notebook's ``shared/``; the claims
    read them as the ``shared`` setting. Rerunning it on the same sweep writes
    the same files. Returns the folders written (none when there is no sweep).
    """
    import json

    root = Path(results_root)
    runs = sorted((_shared_run(r) for r in (root / SHARED_SWEEP).glob("cifar10-cold-k*")
                   if (r / "summary.csv").exists() and (r / "meta.json").exists()),
                  key=lambda x: (x["k"], x["run"].name))
    if not runs:
        return []
    chosen: dict[int, dict] = {}
    for r in runs:   # smallest k first
        for p in r["nprocs"]:
            chosen.setdefault(p, r)
    used = [r for r in runs if any(chosen[p] is r for p in r["nprocs"])]
    rows = pd.concat([r["summary"][r["summary"]["nprocs"].isin([p for p in chosen if chosen[p] is r])]
                      for r in used], ignore_index=True)
    rows = rows.sort_values(["nprocs", "variant", "repeat"], kind="stable")
    cfg = used[0]["meta"].get("config", {})
    meta = {
        "setting": "shared",
        "written_by": "lmdbio.lab.claims.shared_results (make bench-shared, then python -m lmdbio.lab.claims)",
        "storage": cfg.get("storage", ""),
        "dataset": ",".join(sorted(rows["dataset_name"].astype(str).unique())) if "dataset_name" in rows
        else "",
        "ranks_per_node": cfg.get("ranks_per_node"), "readers_per_node": cfg.get("readers_per_node"),
        "k_by_nprocs": {str(p): chosen[p]["k"] for p in sorted(chosen)},
        "sources": [{"folder": repo_relative(r["run"]), "k": r["k"],
                     "nprocs": [p for p in r["nprocs"] if chosen[p] is r],
                     "git_commit": r["meta"].get("git_commit", ""), "written": r["meta"].get("written", "")}
                    for r in used],
        "left_out": [{"folder": repo_relative(r["run"]), "k": r["k"], "nprocs": r["nprocs"],
                      "why": "every P of it is taken from a run at a smaller k"}
                     for r in runs if r not in used],
        "host": used[0]["meta"].get("host", {}),
    }
    out = []
    for notebook, variants in SHARED_NOTEBOOKS.items():
        d = root / notebook / "shared"
        d.mkdir(parents=True, exist_ok=True)
        part = rows[rows["variant"].isin(variants)]
        if len(part):
            part.to_csv(d / "summary.csv", index=False)
        elif (d / "summary.csv").exists():
            (d / "summary.csv").unlink()
        (d / "meta.json").write_text(json.dumps({**meta, "notebook": notebook, "variants": list(variants)},
                                                indent=2) + "\n")
        out.append(d)
    return out


def repo_relative(d: Path) -> str:
    d = Path(d).resolve()
    return str(d.relative_to(REPO)) if d.is_relative_to(REPO) else str(d)


def shared_note(d: Path, nprocs: int, dataset: str) -> tuple[str, str]:
    """The shared sweep's dataset and what a shared row's why says of the sweep, from meta.json
    (:func:`shared_results`)."""
    import json
    try:
        m = json.loads((d / "meta.json").read_text())
    except (OSError, ValueError):
        return "", ""
    have = m.get("dataset", "")
    other = f" (the claim's other settings: {dataset})" if dataset and have and have != dataset else ""
    note = (f"; bench-shared: {have or '?'} records{other}, {m.get('ranks_per_node', '?')} ranks and "
            f"{m.get('readers_per_node', '?')} reader per virtual node")
    k = m.get("k_by_nprocs", {}).get(str(nprocs))
    if k is not None:
        note += f", time scale k = {k:g}"
    return have, note
