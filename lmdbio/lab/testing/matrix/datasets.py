"""The data sets the matrix reads: each record kind, N a multiple of B or not, with or without a
sidecar."""

from __future__ import annotations

import os
import shutil
from itertools import product
from pathlib import Path

import numpy as np

from .combos import BATCHES, dataset_records

__all__ = ["make_datasets"]


def _mixed(path: Path, n: int, seed: int) -> Path:
    """A database of values from 0 B to 200 KB: empty, small, node-sized, overflow pages."""
    import lmdb

    rng = np.random.default_rng(seed)
    sizes = rng.choice([0, 1, 13, 300, 2038, 2039, 2100, 3000, 9000, 200_000], size=n,
                       p=[.1, .1, .1, .1, .05, .1, .1, .15, .15, .05])
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), map_size=1 << 30)
    try:
        for start in range(0, n, 50):
            with env.begin(write=True) as txn:
                for i in range(start, min(n, start + 50)):
                    txn.put(f"{i:08d}_mixed".encode(), rng.bytes(int(sizes[i])))
    finally:
        env.close()
    return path


def _noise_datums(path: Path, n: int, seed: int, commit_every: int = 40) -> Path:
    """ImageNet-size raw Datums (196,623 bytes) of random pixels, keyed as ``convert_imageset``
    keys them: what ``make_dataset(preset="imagenet")`` writes, without its slow photo-like
    images (the matrix never decodes them)."""
    import lmdb

    from lmdbio import datum

    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), map_size=n * 220_000 + (1 << 24))
    try:
        for start in range(0, n, commit_every):
            with env.begin(write=True) as txn:
                for i in range(start, min(n, start + commit_every)):
                    label = int(rng.integers(1000))
                    image = rng.integers(0, 256, size=(3, 256, 256), dtype=np.uint8)
                    txn.put(f"{i:08d}_class{label:04d}/img_{i:08d}.png".encode(),
                            datum.encode(image, label))
    finally:
        env.close()
    return path


def _prefix(src: Path, dst: Path, n: int, commit_every: int = 40) -> Path:
    """A database of the first ``n`` records of ``src``, one put per record in key order."""
    import lmdb

    dst.mkdir(parents=True, exist_ok=True)
    senv = lmdb.open(str(src), readonly=True, lock=False)
    denv = lmdb.open(str(dst), map_size=2 * (src / "data.mdb").stat().st_size + (1 << 24))
    try:
        with senv.begin() as stxn:
            cur = stxn.cursor()
            cur.first()
            for start in range(0, n, commit_every):
                with denv.begin(write=True) as txn:
                    for _ in range(min(commit_every, n - start)):
                        txn.put(cur.key(), cur.value())
                        cur.next()
    finally:
        senv.close()
        denv.close()
    return dst


def make_datasets(root: str | os.PathLike) -> dict[tuple[str, bool, bool], Path]:
    """Every data set the matrix reads, under ``root``: ``(records, uneven, sidecar) -> dir``.

    The ``sidecar=False`` folder holds the same data.mdb (a hard link where the file system
    allows) with no sidecar beside it. Data sets a previous call made are reused.
    """
    from lmdbio.datasets import make_dataset
    from lmdbio.provenance import write_provenance

    root = Path(root)
    out = {}
    for seed, (records, uneven) in enumerate(product(BATCHES, (False, True))):
        n = dataset_records(records, uneven)
        with_side = root / f"{records}-{n}"
        bare = root / f"{records}-{n}-nosidecar"
        out[(records, uneven, True)], out[(records, uneven, False)] = with_side, bare
        if (bare / "data.mdb").exists():
            continue
        if uneven:   # the first N records of the even data set, written the same way
            _prefix(root / f"{records}-{dataset_records(records, False)}", with_side, n)
            write_provenance(with_side)
        elif records == "mixed":
            _mixed(with_side, n, seed)
            write_provenance(with_side)
        elif records == "imagenet":
            _noise_datums(with_side, n, seed)
            write_provenance(with_side)
        else:
            make_dataset(with_side, "cifar10" if records == "cifar10" else "imagenet", n,
                         encoded=records == "jpeg", commit_every=40, seed=seed, force=True)
        bare.mkdir(parents=True, exist_ok=True)
        try:
            os.link(with_side / "data.mdb", bare / "data.mdb")
        except OSError:
            shutil.copyfile(with_side / "data.mdb", bare / "data.mdb")
    return out
