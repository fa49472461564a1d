"""Engine-side dataset tasks: make the datasets, type their pages, describe them, model PROV."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from lmdbio.errors import LmdbioError

if TYPE_CHECKING:
    from ..cluster import MPICluster

__all__ = ["ensure_dataset", "ensure_datasets", "page_types", "describe_dataset",
           "describe_datasets", "prov_model_table"]


def ensure_dataset(path: str | os.PathLike, preset: str, records: int, **kwargs) -> dict:
    """Make the dataset at ``path`` unless one with ``records`` records is there already.

    Runs where it is called (call it on an engine: it opens LMDB). Returns
    ``{"path", "records", "bytes", "made"}``.
    """
    from lmdbio import format as fmt
    from lmdbio.datasets import make_dataset

    path = Path(path)
    made = False
    data = path / "data.mdb"
    if data.exists():
        try:
            have = fmt.read_meta(data).entries
        except LmdbioError:
            have = -1
        if have != records:
            make_dataset(path, preset, records, force=True, **kwargs)
            made = True
    else:
        make_dataset(path, preset, records, **kwargs)
        made = True
    if kwargs.get("provenance", True):
        from lmdbio.provenance import provenance_status, write_provenance

        # A sidecar from an older schema or an edited database is rewritten, not trusted.
        if provenance_status(path) != "present":
            write_provenance(path)
    return {"path": str(path), "records": records, "bytes": data.stat().st_size, "made": made}


def _ensure_on_rank(comm, specs: list[dict]) -> list[dict]:
    # Datasets are made by rank 0 of the sub-communicator; others wait.
    out = [ensure_dataset(**s) for s in specs] if comm.Get_rank() == 0 else None
    return comm.bcast(out, root=0)


def ensure_datasets(cluster: MPICluster, specs: list[dict]) -> list[dict]:
    """Make each ``{"path", "preset", "records", ...}`` dataset on engine rank 0 (LMDB on engines only)."""
    return cluster.run(_ensure_on_rank, 1, specs)[0]


def page_types(path: str | os.PathLike):
    """Type of every page of ``data.mdb``: a DataFrame (pgno, type) with meta/branch/leaf/overflow/free.

    Branch pages are those reached from the root; leaf and overflow pages come
    from the record index; every other page (freed by copy-on-write at a
    commit, or never used) is ``free``.
    """
    import numpy as np
    import pandas as pd

    from lmdbio import format as fmt
    from lmdbio.recordindex import build_index

    f = fmt.db_file(path)
    index = build_index(f)
    meta = index.meta
    n = meta.last_pgno + 1
    kind = np.full(n, "free", dtype=object)
    kind[:2] = "meta"
    kind[index.leaf_pgnos] = "leaf"
    ov = index.overflow
    first = (index.offsets[ov] // meta.psize).astype(np.int64)
    count = fmt.overflow_pages(index.sizes[ov].astype(np.int64), meta.header_size, meta.psize)
    run = np.repeat(first, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
    kind[run] = "overflow"
    if meta.root is not None and meta.depth > 1:
        fd = os.open(f, os.O_RDONLY)
        try:
            level = [int(meta.root)]
            for _ in range(meta.depth - 1):
                kind[level] = "branch"
                nxt = []
                for pg in level:
                    nxt.extend(fmt.branch_children(fmt.read_page(fd, meta, pg), meta, pg).tolist())
                level = nxt
        finally:
            os.close(fd)
    return pd.DataFrame({"pgno": np.arange(n), "type": kind})


def describe_dataset(path: str | os.PathLike, name: str) -> dict:
    """Pages, record sizes and a summary of one dataset, as tables for the results files."""
    import pandas as pd

    from lmdbio.recordindex import build_index
    from lmdbio.info import describe

    pages = page_types(path)
    pages.insert(0, "dataset", name)
    index = build_index(path)
    records = pd.DataFrame({"dataset": name, "record": range(len(index)),
                            "offset": index.offsets, "size": index.sizes})
    info = describe(path)
    summary = {"dataset": name, "path": str(path), "entries": info["entries"],
               "depth": info["depth"], "page_size": info["page_size"],
               "file_bytes": info["file_size"], "value_bytes": info["value_bytes"],
               **{f"{k}_pages": v for k, v in info["pages"].items() if k in
                  ("branch", "leaf", "overflow", "free_or_other_db")}}
    return {"pages": pages, "records": records, "summary": summary}


def _describe_on_rank(comm, datasets: dict) -> dict | None:
    if comm.Get_rank() != 0:
        return None
    return {name: describe_dataset(path, name) for name, path in datasets.items()}


def describe_datasets(cluster: MPICluster, datasets: dict) -> dict:
    """:func:`describe_dataset` for ``{name: path}`` on engine rank 0."""
    return cluster.run(_describe_on_rank, 1, datasets)[0]


def prov_model_table(path: str | os.PathLike, commit_every: int | None = 1000):
    """PROV's arithmetic offsets next to the true ones from the index walk (a DataFrame).

    Columns: record, true_offset, model_offset (with the writer's commit
    interval), model_single_txn_offset (as if one transaction wrote all),
    commit_every, record_bytes, key_bytes.
    """
    import numpy as np
    import pandas as pd

    from lmdbio.recordindex import build_index
    from ..prov_offsets import arithmetic_offsets

    index = build_index(path)
    meta = index.meta
    n = len(index)
    # The model needs one record size; Datums differ by a byte or two (the label's
    # varint), which changes no page count, so the largest stands for all.
    rec = int(index.sizes.max())
    key = len(index.keys(0, 1)[0])
    kw = dict(record_bytes=rec, psize=meta.psize, header_size=meta.header_size, key_bytes=key,
              first_leaf_page=int(index.leaf_pgnos[0]))
    with_commits = arithmetic_offsets(n, commit_every=commit_every, **kw)
    single = arithmetic_offsets(n, commit_every=None, **kw)
    return pd.DataFrame({"record": np.arange(n), "true_offset": index.offsets.astype(np.int64),
                         "model_offset": with_commits.astype(np.int64),
                         "model_single_txn_offset": single.astype(np.int64),
                         "commit_every": commit_every or 0, "record_bytes": rec, "key_bytes": key})
