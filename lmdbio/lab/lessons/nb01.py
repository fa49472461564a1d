"""Facts behind the prose of notebooks/01_datasets.ipynb (see lmdbio.lab.lessons.prose)."""

from __future__ import annotations

import inspect
import math
from pathlib import Path

from .prose import claim_row, csv, word  # noqa: F401

#: Phrases whose numbers come from a source, not from this project's results: phrase -> source.
STATIC: dict[str, str] = {
    "larger than about half a page":
        ("LMDB's design: a value over the node size limit (mdb.c's me_nodemax, about half a page) goes to its "
         "own overflow pages"),
    "far less than a pixel":
        "the figure's geometry (lmdbio.lab.plots.page_map: a panel row holds more pages than it has pixels)",
}

E = "01_datasets"


def _commit_every() -> int:
    """Records per commit of ``make_dataset`` (Caffe's convert_imageset commits every 1,000)."""
    from lmdbio.datasets import make_dataset

    return int(inspect.signature(make_dataset).parameters["commit_every"].default)


def _row(root: Path, name: str):
    s = csv(root, f"{E}/summary.csv")
    return s[s["dataset"] == name].iloc[0]


def _pages(root: Path, name: str) -> int:
    r = _row(root, name)
    return int(r["file_bytes"] // r["page_size"])


def _rows_drawn(root: Path, name: str) -> int:
    """Rows of the page map's panel (``plots.page_map``: ``width`` pages a row, at most ``max_pages``)."""
    from .. import plots

    params = inspect.signature(plots.page_map).parameters
    return math.ceil(min(_pages(root, name), params["max_pages"].default) / params["width"].default)


def _facts(name: str) -> dict:
    return {
        f"{name}_free": lambda root: int(_row(root, name)["free_or_other_db_pages"]),
        f"{name}_commits": lambda root: math.ceil(int(_row(root, name)["entries"]) / _commit_every()),
        f"{name}_pages": lambda root: _pages(root, name),
        f"{name}_rows": lambda root: _rows_drawn(root, name),
        f"{name}_pages_per_record": lambda root: int(_row(root, name)["overflow_pages"])
        / int(_row(root, name)["entries"]),
        f"{name}_records_per_leaf": lambda root: int(_row(root, name)["entries"])
        / int(_row(root, name)["leaf_pages"]),
        f"{name}_free_per_commit": lambda root: int(_row(root, name)["free_or_other_db_pages"])
        / math.ceil(int(_row(root, name)["entries"]) / _commit_every()),
    }


#: Fact name -> function of a results root (data/results, or a scratch run's results).
FACTS: dict = {**_facts("cifar10"), **_facts("imagenet"),
               "commit_every": lambda root: _commit_every()}
