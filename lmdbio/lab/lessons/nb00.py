"""Facts behind the prose of notebooks/00_environment.ipynb (see lmdbio.lab.lessons.prose)."""

from __future__ import annotations

import json
from pathlib import Path

from .prose import claim_row, csv, word  # noqa: F401

#: Phrases whose numbers come from a source, not from this project's results: phrase -> source.
STATIC: dict[str, str] = {}

E = "00_environment"


def _copy_gbps(root: Path) -> float:
    """The median over the engines of notebook 00's copy of a neighbour's slice (GB/s)."""
    return float(csv(root, f"{E}/shared_memory.csv")["copy_gb_per_s"].median())


def _calibration(root: Path) -> dict:
    """Notebook 11's calibration values (model_calibration/calibration.json)."""
    p = Path(root) / "model_calibration" / "calibration.json"
    if not p.exists():
        raise FileNotFoundError(f"{p} (run notebook 11, or make reproduce)")
    return json.loads(p.read_text())["values"]


def _memcpy_gbps(root: Path) -> float:
    """Notebook 11's calibrated memcpy rate: 1 / memcpy_byte_s (GB/s)."""
    return 1 / _calibration(root)["memcpy_byte_s"] / 1e9


def _disk_gbps(root: Path) -> float:
    """Notebook 11's calibrated sequential read rate of the local disk (GB/s)."""
    return _calibration(root)["disk_bw"] / 1e9


def _cores(root: Path) -> int:
    return int(json.loads((Path(root) / E / "meta.json").read_text())["host"]["cores"])


#: Fact name -> function of a results root (data/results, or a scratch run's results).
FACTS: dict = {
    "engines": lambda root: len(csv(root, f"{E}/engines.csv")),
    "all_visible": lambda root: word(bool(csv(root, f"{E}/shared_memory.csv")["all_slices_visible"].all()),
                                     "every", "not every"),
    "copy_gbps": _copy_gbps,
    "memcpy_gbps": _memcpy_gbps,
    "memcpy_over_copy": lambda root: _memcpy_gbps(root) / _copy_gbps(root),
    "copy_vs_memcpy": lambda root: word(_copy_gbps(root) < _memcpy_gbps(root), "below", "above"),
    "disk_gbps": _disk_gbps,
    "copy_vs_disk": lambda root: word(_copy_gbps(root) > _disk_gbps(root), "above", "below"),
    "cores": _cores,
}
