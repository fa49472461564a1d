"""Photos of mixed sizes as JPEG Datums: records/s of the ways to decode them (prints only,
plus one CSV row per series and repeat).

    python benchmarks/bench_mixed_sizes.py [--db DIR] [--records 600] [--batch 32]
        [--iters 19] [--repeats 3] [--threads 1,2] [--size 224] [--layout HWC] [--out CSV]

The data set (made at ``--db`` when missing, default ``build/bench-mixed/photos``): JPEG
Datums of photo-like synthetic images (:func:`lmdbio.datasets.synthetic_images`) whose long
side is 300-500 pixels and whose aspect ratio is 1:1, 4:3, 3:4, 3:2 or 2:3, at JPEG qualities
60-95: about the sizes of ImageNet's training photos, which real LMDBs often keep unresized.

Series, each reading ``--iters`` batches of ``--batch`` records with ``Reader.read_batch()``
(``lmdbio-direct``, one process, the file warm) and decoding them:

- ``one_at_a_time``: ``datum.decode_image(datum.decode(record))`` for each record, in one
  thread: what a user does when ``as_datum_array`` refuses a batch of mixed sizes;
- ``as_datum_list``: ``batch.as_datum_list(threads=T, layout=L)``;
- ``resize``: ``batch.as_datum_array(size=(S, S), threads=T, layout=L)`` (Pillow's bilinear
  filter);
- ``dali`` and ``dali_resize``, when NVIDIA DALI imports (from the venv, or from
  ``~/.cache/lmdbio/dali``, where ``pip install --target`` puts it): ``fn.readers.caffe``
  then ``fn.decoders.image(device="cpu")`` (and ``fn.resize`` to S x S) with
  ``num_threads=T`` and ``prefetch_queue_depth=1``, the outputs copied to numpy.

``--layout`` is lmdbio's: ``HWC`` (the default) is DALI's own, so both hand out the same
arrays; ``CHW`` (Caffe's) adds the channel split DALI does not do.

Every series runs its batches once to warm up; then each repeat times every series, in an
order reversed every other repeat. Printed per series: records/s, median [min-max] over the
repeats, CPU us per record (process time, all threads), and the ratios within each repeat
to ``one_at_a_time`` and to DALI's same series with the same threads. The machine may be
shared: the load average is printed and written with every row.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lmdbio
from lmdbio import datum
from lmdbio.datasets import Preset, synthetic_images

ASPECTS = ((1, 1), (4, 3), (3, 4), (3, 2), (2, 3))   # width : height


def make_photos(path: Path, records: int, seed: int = 0) -> Path:
    """The benchmark's data set (see the module's docstring); LMDB 0.9, which DALI opens."""
    from lmdbio.lmdbenv import RecordWriter

    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    writer = RecordWriter(path, 1 << 30, 100)
    for i in range(records):
        long = int(rng.integers(300, 501))
        aw, ah = ASPECTS[int(rng.integers(len(ASPECTS)))]
        w, h = (long, long * ah // aw) if aw >= ah else (long * aw // ah, long)
        img, _ = synthetic_images(Preset(3, h, w, 1000), 1, rng)
        jpeg = datum.encode_image_bytes(img[0], "JPEG", quality=int(rng.integers(60, 96)))
        writer.put(f"{i:08d}".encode(), datum.encode(encoded_bytes=jpeg,
                                                      label=int(rng.integers(1000)),
                                                      channels=3, height=h, width=w))
    writer.close()
    return path


def import_dali():
    """``(dali, fn)``, or None when DALI does not import here nor from its cache folder."""
    try:
        import nvidia.dali as dali
    except ImportError:
        from lmdbio.lab.dali_shuffle import dali_target

        sys.path.append(str(dali_target()))
        try:
            import nvidia.dali as dali
        except ImportError:
            return None
    from nvidia.dali import fn

    return dali, fn


def dali_step(dali, fn, db: Path, batch: int, threads: int, size: int | None):
    """One DALI CPU pipeline's ``run()`` as a step: the records it decoded."""
    pipe = dali.Pipeline(batch_size=batch, num_threads=threads, device_id=None,
                         prefetch_queue_depth=1)
    with pipe:
        jpegs, labels = fn.readers.caffe(path=str(db), random_shuffle=False)
        images = fn.decoders.image(jpegs, device="cpu", output_type=dali.types.RGB)
        if size is not None:
            images = fn.resize(images, resize_x=size, resize_y=size)
        pipe.set_outputs(images, labels)
    pipe.build()

    def step() -> int:
        images, labels = pipe.run()
        if images.is_dense_tensor():
            images.as_array()
        else:
            [np.array(t) for t in images]
        return len(labels.as_array())

    return step


def _simplejpeg() -> str:
    """The simplejpeg version lmdbio decodes JPEGs with, or "" (Pillow decodes them)."""
    from importlib.metadata import version

    from lmdbio import images

    return "" if images.fast_decoder() is None else version("simplejpeg")


def median_range(xs, fmt="{:,.0f}") -> str:
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", type=Path, default=ROOT / "build" / "bench-mixed" / "photos")
    p.add_argument("--records", type=int, default=600)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--iters", type=int, default=19, help="batches per timed block")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--size", type=int, default=224, help="the resize series' S x S")
    p.add_argument("--layout", choices=datum.LAYOUTS, default="HWC", help="lmdbio's layout")
    p.add_argument("--out", type=Path,
                   default=ROOT / "data" / "results" / "speed_targets" / "mixed_sizes.csv")
    args = p.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    from mpi4py import MPI

    if not (args.db / "data.mdb").exists():
        make_photos(args.db, args.records)
    dali = import_dali()
    with lmdbio.Reader(args.db, args.batch, MPI.COMM_SELF, variant="lmdbio-direct",
                       measure=False, build_provenance=True) as reader:
        n = reader.n
        read = reader.read_batch
        steps = {("one_at_a_time", 1): lambda: sum(
            datum.decode_image(datum.decode(r)).shape[0] > 0 for r in read())}
        for t in threads:
            steps[("as_datum_list", t)] = lambda t=t: len(
                read().as_datum_list(threads=t, layout=args.layout)[1])
            steps[("resize", t)] = lambda t=t: len(read().as_datum_array(
                size=(args.size, args.size), threads=t, layout=args.layout)[1])
            if dali is not None:
                steps[("dali", t)] = dali_step(*dali, args.db, args.batch, t, None)
                steps[("dali_resize", t)] = dali_step(*dali, args.db, args.batch, t, args.size)
        load0 = os.getloadavg()[0]
        for step in steps.values():   # warm: page cache, thread pools, DALI's buffers
            for _ in range(args.iters):
                step()
        rows = []
        for rep in range(args.repeats):
            order = list(steps) if rep % 2 == 0 else list(steps)[::-1]
            for key in order:
                t0, c0 = time.perf_counter(), time.process_time()
                done = sum(steps[key]() for _ in range(args.iters))
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                rows.append(dict(series=key[0], threads=key[1],
                                 size=args.size if "resize" in key[0] else "", repeat=rep,
                                 records=done, seconds=round(dt, 6),
                                 records_per_s=round(done / dt, 1),
                                 cpu_us_per_record=round(dc / done * 1e6, 1),
                                 load1=round(os.getloadavg()[0], 2)))
        load1 = os.getloadavg()[0]
    shapes = []
    import lmdb

    env = lmdb.open(str(args.db), readonly=True, lock=False)
    with env.begin() as txn:
        for _, v in txn.cursor():
            d = datum.decode(v)
            shapes.append((d.height, d.width, len(d.data)))
    env.close()
    shapes = np.array(shapes)
    meta = dict(host=platform.node(), cpus=os.cpu_count(), db_records=n, batch=args.batch,
                layout=args.layout,
                pillow=__import__("PIL").__version__,
                simplejpeg=_simplejpeg(),
                dali=dali[0].__version__ if dali is not None else "")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, [*rows[0], *meta])
        w.writeheader()
        w.writerows({**r, **meta} for r in rows)

    print(f"{args.db}: {n} JPEG Datums, {len(set(map(tuple, shapes[:, :2])))} sizes, height "
          f"{shapes[:, 0].min()}-{shapes[:, 0].max()}, width {shapes[:, 1].min()}-"
          f"{shapes[:, 1].max()}, {shapes[:, 2].mean() / 1024:.0f} KiB per JPEG; batch "
          f"{args.batch} x {args.iters} per block, {args.repeats} interleaved repeats, layout "
          f"{args.layout}; load "
          f"average {load0:.2f} before, {load1:.2f} after, {os.cpu_count()} CPUs; DALI "
          f"{meta['dali'] or 'not importable'}; lmdbio's JPEGs by "
          f"{'simplejpeg ' + meta['simplejpeg'] if meta['simplejpeg'] else 'Pillow'}")
    by = {}
    for r in rows:
        by.setdefault((r["series"], r["threads"]), []).append(r)
    for key, rs in by.items():
        line = (f"  {key[0]:14s} threads={key[1]}  {median_range([r['records_per_s'] for r in rs])}"
                f" rec/s; CPU {median_range([r['cpu_us_per_record'] for r in rs])} us/rec")
        base = by[("one_at_a_time", 1)]
        if key[0] != "one_at_a_time":
            line += "; / one_at_a_time " + median_range(
                [a["records_per_s"] / b["records_per_s"] for a, b in zip(rs, base)], "{:.2f}")
        peer = by.get(({"as_datum_list": "dali", "resize": "dali_resize"}.get(key[0]), key[1]))
        if peer:
            line += "; / DALI " + median_range(
                [a["records_per_s"] / b["records_per_s"] for a, b in zip(rs, peer)], "{:.2f}")
        print(line)
    print(f"rows: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
