"""Benchmark the record index: time to index an N-record cifar10-like LMDB; pages read vs in the file.

Writes a Caffe-pattern DB (3,087-byte values, Caffe's key format, a commit
every 1,000 records) with py-lmdb into data/scratch/, then times
build_index (warm page cache, and cold after dropping this file's pages),
the provenance sidecar, PROV range lookups, and the arithmetic model's hit
rate. Prints numbers only; it never fails on time.

    .venv/bin/python benchmarks/bench_index.py --records 1000000
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lmdbio.recordindex import build_index
from lmdbio.lab.pagecache import evict
from lmdbio.lab.prov_offsets import arithmetic_offsets
from lmdbio.provenance import load_provenance, sidecar_path, write_provenance

VALUE_BYTES = 3087


def write_db(path: Path, n: int, commit_every: int) -> float:
    import lmdb

    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    t = time.perf_counter()
    env = lmdb.open(str(path), map_size=int(n * 4096 * 1.1) + (64 << 20), writemap=False)
    rng = np.random.default_rng(0)
    block = rng.integers(0, 256, size=(1000, VALUE_BYTES), dtype=np.uint8)
    txn = env.begin(write=True)
    for i in range(n):
        txn.put(b"%08d_class%04d/img_%08d.png" % (i, i % 10, i), block[i % 1000].tobytes())
        if (i + 1) % commit_every == 0:
            txn.commit()
            txn = env.begin(write=True)
    txn.commit()
    env.close()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--commit-every", type=int, default=1000)
    ap.add_argument("--out", default=str(ROOT / "data" / "scratch" / "bench_index"))
    ap.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = ap.parse_args()
    out = Path(args.out)
    try:
        wt = write_db(out, args.records, args.commit_every)
        data = out / "data.mdb"
        size = data.stat().st_size
        print(f"wrote {args.records:,} records ({VALUE_BYTES} B values, commit every "
              f"{args.commit_every}) in {wt:.1f} s: {size / 2**30:.2f} GiB")

        times = []
        for _ in range(3):
            t = time.perf_counter()
            idx = build_index(out)
            times.append(time.perf_counter() - t)
        m = idx.meta
        print(f"build_index warm cache: best {min(times):.3f} s of {len(times)} "
              f"({len(idx) / min(times) / 1e6:.2f} M records/s)")
        evict(data)
        t = time.perf_counter()
        idx = build_index(out)
        print(f"build_index cold cache (file pages dropped): {time.perf_counter() - t:.3f} s")
        print(f"pages read: {idx.pages_read:,} (branch {m.branch_pages:,} + leaf {m.leaf_pages:,}) "
              f"of {m.file_pages:,} pages in the file ({100 * idx.pages_read / m.file_pages:.2f} %); "
              f"depth {m.depth}")

        t = time.perf_counter()
        write_provenance(out)
        pt = time.perf_counter() - t
        prov = load_provenance(out)
        print(f"provenance: written in {pt:.3f} s, {prov.n_runs:,} offset runs "
              f"({prov.n_runs / (args.records / 20_000):.0f} per 20,000 records), sidecar "
              f"{sidecar_path(out).stat().st_size / 1024:.1f} KiB")
        rng = np.random.default_rng(1)
        starts = rng.integers(0, args.records - 1000, size=1000)
        t = time.perf_counter()
        for s in starts:
            prov.extents(int(s), 1000)
        lt = (time.perf_counter() - t) / len(starts)
        o, _ = prov.extents(int(starts[0]), 1000)
        assert np.array_equal(o, idx.offsets[starts[0]:starts[0] + 1000])
        print(f"PROV extents of 1,000 records: {lt * 1e6:.0f} us per lookup")

        key_bytes = len(idx.keys(0, 1)[0])
        t = time.perf_counter()
        model = arithmetic_offsets(len(idx), record_bytes=int(idx.sizes[0]), key_bytes=key_bytes,
                                   header_size=m.header_size, commit_every=args.commit_every)
        at = time.perf_counter() - t
        exact = model == idx.offsets
        first_bad = int(np.argmin(exact)) if not exact.all() else len(exact)
        print(f"arithmetic model: {at:.2f} s, exact for {exact.mean() * 100:.1f} % of records "
              f"(first {first_bad:,} all exact)")
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
