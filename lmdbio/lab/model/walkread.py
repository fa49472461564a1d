"""What a cold cursor walk reads: the microbenchmark behind ``walk_touches_values``.

The scale model needs to know which pages a walk (``cursor.next()`` over
records it skips, problem 2) makes the kernel read. It depends on the LMDB
build: a step may touch only its leaf page, or also the first page of the
value it steps over. :func:`measure` makes a CIFAR-10-like and an
ImageNet-like data set, puts each on one read-only loop device with a
64 KiB read-around (``lmdbio.lab.storage.throttle``, the gpfs-2017 throttle
profile at time scale 1), and for each evicts the file and walks every
record with ``next()`` only (``walk``), then touches every value's bytes
(``values``, the whole file), counting the device's reads. No sweep the
model is validated on is used.

``python -m lmdbio.lab.model.walkread [OUT.csv]`` writes
``data/results/model_calibration/walk_reads.csv``; ``lmdbio model
calibrate`` runs it too where loop devices can be made (root).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from ..paths import REPO

__all__ = ["DEFAULT_CSV", "DATASETS", "measure", "main"]

DEFAULT_CSV = REPO / "data" / "results" / "model_calibration" / "walk_reads.csv"
#: (preset, records): about 33 MB and 50 MB of data.mdb.
DATASETS = (("cifar10", 8000), ("imagenet", 250))


def _walk(path: str, values: bool) -> tuple[int, int]:
    """Walk every record with ``next()``; with ``values`` read two bytes of each value too."""
    import lmdb

    env = lmdb.open(path, readonly=True, lock=False, readahead=True)
    try:
        with env.begin(buffers=True) as txn:
            cur = txn.cursor()
            ok, n, s = cur.first(), 0, 0
            while ok:
                if values:
                    v = cur.value()
                    s += v[0] + v[len(v) - 1]
                n += 1
                ok = cur.next()
        return n, s
    finally:
        env.close()


def measure(repeats: int = 2, workdir=None, profile: str = "gpfs-2017") -> list[dict]:
    """Rows ``{dataset, mode, repeat, records, file_bytes, dev_read_bytes, dev_read_ios, ...}``.

    Raises :class:`lmdbio.lab.storage.throttle.ThrottleUnavailable` without root,
    loop devices or a blkio controller.
    """
    from lmdbio.datasets import make_dataset
    from lmdbio.format import db_file
    from ..storage.throttle import device_counters, throttled
    from .mechanisms import geometry, walk_faults

    rows = []
    with tempfile.TemporaryDirectory(prefix="lmdbio-walkread-", dir=workdir) as tmp:
        for preset, n in DATASETS:
            src = db_file(make_dataset(Path(tmp) / preset, preset, n, seed=1, progress=False)).parent
            with throttled(src, nodes=1, profile=profile, ranks_per_node=1, time_scale=1.0) as t:
                t.join(0)
                try:
                    path = t.path(0, src.name)
                    size = os.path.getsize(os.path.join(path, "data.mdb"))
                    ra = int(t.profile.read_ahead_kb) * 1024
                    for rep in range(repeats):
                        for mode in ("walk", "values"):
                            t.evict(0, src.name)
                            d0 = device_counters(t.devices[0])
                            records, _ = _walk(path, mode == "values")
                            d1 = device_counters(t.devices[0])
                            got = d1["read_bytes"] - d0["read_bytes"]
                            rows.append({"dataset": preset, "mode": mode, "repeat": rep,
                                         "records": records, "file_bytes": size,
                                         "read_ahead_bytes": ra, "dev_read_bytes": got,
                                         "dev_read_ios": d1["read_ios"] - d0["read_ios"],
                                         "fraction_read": got / size})
                finally:
                    t.leave()
            # The model's walk on this layout, for comparison (the values mode reads it all).
            rb = {"cifar10": 3087, "imagenet": 196623}[preset]
            geo = geometry(rb)
            for r in rows:
                if r["dataset"] == preset:
                    faults, cover = walk_faults(r["records"], geo["records_per_leaf"],
                                                geo["file_bytes_per_record"], r["read_ahead_bytes"],
                                                True)
                    r["model_cover_touching_values"] = cover
                    r["model_cover_leaf_only"] = walk_faults(
                        r["records"], geo["records_per_leaf"], geo["file_bytes_per_record"],
                        r["read_ahead_bytes"], False)[1]
    return rows


def main(argv=None) -> int:
    import pandas as pd

    from ..storage.throttle import throttle_available

    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else DEFAULT_CSV
    ok, why = throttle_available()
    if not ok:
        print(f"walkread: skipped: {why}", file=sys.stderr)
        return 0
    d = pd.DataFrame(measure())
    out.parent.mkdir(parents=True, exist_ok=True)
    d.to_csv(out, index=False)
    print(d.groupby(["dataset", "mode"])[["fraction_read", "dev_read_ios", "records",
                                          "model_cover_touching_values",
                                          "model_cover_leaf_only"]].median().to_string())
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
