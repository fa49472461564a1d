"""DALI's caffe reader's shuffled order, measured (notebook 12's ``dali-caffe`` row).

DALI's ``fn.readers.caffe`` with ``random_shuffle=True`` shuffles inside a
buffer of ``initial_fill`` records (default 1,024: "size of the buffer that is
used for shuffling", DALI's ``nvidia.dali.fn.readers.caffe`` reference), so
its order is measured: :func:`dali_order` writes a class-sorted LMDB of Caffe
Datums (record i's label ``i * classes // n``, its image the 4 bytes of
``i``, so the order can be read back from DALI's outputs), reads one epoch
through one DALI pipeline on CPU (one shard, the whole batch: DALI's best
case; with ``P`` shards each rank's shard is a contiguous ``1/P`` of the file)
and checks every label DALI outputs against the record's. DALI runs in a
child process: it is found in the venv or in :func:`dali_target`
(``pip install --target ~/.cache/lmdbio/dali nvidia-dali-cuda120``, about
1 GB; no part of the venv), and the notebook's kernel never opens LMDB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["dali_target", "dali_order"]


def dali_target() -> Path:
    """Where DALI is installed apart from the venv: ``$XDG_CACHE_HOME/lmdbio/dali`` (default
    ``~/.cache/lmdbio/dali``), next to the torch test's ``torch-cpu``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lmdbio" / "dali"


def _write_class_sorted(path: Path, n: int, classes: int) -> None:
    """A Caffe LMDB (format 0.9, as DALI opens) of ``n`` Datums sorted by label."""
    from lmdbio import datum
    from lmdbio.lmdbenv import RecordWriter

    w = RecordWriter(path, max(1 << 26, 256 * n), 10_000, "0.9")
    for i in range(n):
        image = np.frombuffer(np.int32(i).tobytes(), np.uint8).reshape(1, 1, 4)
        w.put(f"{i:08d}".encode(), datum.encode(image, i * classes // n))
    w.close()


def _dali_epoch(n: int, batch_size: int, classes: int, seed: int, initial_fill: int) -> dict:
    """In the child: one epoch of DALI's shuffled caffe reader over a class-sorted LMDB."""
    try:
        import nvidia.dali as dali
    except ImportError:
        sys.path.append(str(dali_target()))
        import nvidia.dali as dali
    from nvidia.dali import fn

    with tempfile.TemporaryDirectory(prefix="lmdbio-sorted-") as d:
        _write_class_sorted(Path(d), n, classes)
        pipe = dali.Pipeline(batch_size=batch_size, num_threads=1, device_id=None, seed=seed)
        with pipe:
            images, labels = fn.readers.caffe(path=d, random_shuffle=True,
                                              initial_fill=initial_fill, name="reader")
            pipe.set_outputs(images, labels)
        pipe.build()
        order, got = [], []
        while sum(map(len, order)) < n:   # DALI wraps into the next epoch: the first n records
            images, labels = pipe.run()
            order.append(np.array([np.array(x).view(np.int32).ravel()[0] for x in images]))
            got.append(labels.as_array().ravel())
        del pipe
    order, got = np.concatenate(order)[:n].astype(np.int64), np.concatenate(got)[:n]
    if not np.array_equal(got, order * classes // n):
        raise SystemExit("DALI's labels do not match its records' positions")
    return {"order": order.tolist(), "version": dali.__version__}


def dali_order(n: int, batch_size: int, classes: int, *, seed: int = 0,
               initial_fill: int = 1024, timeout: float = 600) -> tuple[np.ndarray | None, str]:
    """The first ``n`` records DALI's caffe reader delivers with ``random_shuffle=True`` from a
    class-sorted LMDB, in a child process: ``(order, DALI version)``, or ``(None, why)``
    when DALI is missing or fails."""
    with tempfile.TemporaryDirectory(prefix="lmdbio-dali-") as d:
        out = Path(d) / "order.json"
        cmd = [sys.executable, "-m", __name__, str(n), str(batch_size), str(classes), str(seed),
               str(initial_fill), str(out)]
        try:
            root = str(Path(__file__).parents[2])
            path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  env={**os.environ, "PYTHONPATH": path})
        except subprocess.TimeoutExpired:
            return None, f"DALI's epoch of {n} records did not end within {timeout:.0f} s"
        if proc.returncode != 0 or not out.exists():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            if "No module named 'nvidia" in proc.stderr:
                last = (f"NVIDIA DALI is not installed ({last}); install it with `pip install "
                        f"--target {dali_target()} nvidia-dali-cuda120` (about 1 GB)")
            return None, f"DALI's caffe reader was not measured: {last}"
        got = json.loads(out.read_text())
    return np.asarray(got["order"], np.int64), got["version"]


if __name__ == "__main__":  # the child dali_order starts: N BATCH CLASSES SEED INITIAL_FILL OUT
    n, batch, classes, seed, fill = map(int, sys.argv[1:6])
    Path(sys.argv[6]).write_text(json.dumps(_dali_epoch(n, batch, classes, seed, fill)))
