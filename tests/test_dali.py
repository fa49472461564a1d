"""NVIDIA DALI's caffe reader as a bench peer: the same records as lmdbio, and clear errors."""

import importlib.util

import numpy as np
import pytest

from lmdbio import datum
from lmdbio.lab.bench import dali as peer
from lmdbio.errors import ConfigurationError

HAVE_DALI = importlib.util.find_spec("nvidia") is not None and \
    importlib.util.find_spec("nvidia.dali") is not None
needs_dali = pytest.mark.skipif(not HAVE_DALI, reason="NVIDIA DALI is not installed "
                                "(pip install nvidia-dali-cuda120)")


def _lmdbio_records(path, first: int, count: int):
    """Records first .. first+count-1 in key order, as lmdbio reads them: (datums, labels)."""
    import lmdbio

    out = []
    with lmdbio.Reader(path, batch_size=1, variant="lmdbio-direct") as r:
        for _ in range(first + count):
            b = r.read_batch()
            out.append(bytes(b[0]))
    parsed = [datum.decode(v) for v in out[first:]]
    return parsed, np.array([d.label for d in parsed])


@needs_dali
@pytest.mark.parametrize("name", ["cifar10", "imagenet", "jpeg"])
def test_dali_reads_the_records_lmdbio_reads(datasets, name):
    # Undecoded: DALI hands out each Datum's data bytes (the pixels, or the JPEG file).
    count = 24
    images, labels = peer.dali_records(datasets[name], count, batch=8, decode=False)
    parsed, want_labels = _lmdbio_records(datasets[name], 0, count)
    assert np.array_equal(labels, want_labels)
    for i, d in enumerate(parsed):
        assert images[i].tobytes() == d.data, f"record {i}"


@needs_dali
def test_dali_shards_are_contiguous_ranges(datasets):
    path, shards, n = datasets["cifar10"], 3, 700
    images, labels = peer.dali_records(path, 10, shard=2, shards=shards, batch=5, decode=False)
    parsed, want = _lmdbio_records(path, 2 * n // shards, 10)
    assert np.array_equal(labels, want)
    assert images[0].tobytes() == parsed[0].data


@needs_dali
def test_dali_jpeg_decode_is_close_to_ours(datasets):
    images, labels = peer.dali_records(datasets["jpeg"], 8, batch=4)
    parsed, want = _lmdbio_records(datasets["jpeg"], 0, 8)
    assert np.array_equal(labels, want)
    ours = np.stack([datum.decode_image(d, layout="HWC") for d in parsed])  # DALI's layout
    images = np.stack(images)
    assert images.shape == ours.shape == (8, 256, 256, 3)
    # Two JPEG decoders (libjpeg-turbo in Pillow, nvImageCodec's CPU path in DALI) may round
    # the inverse DCT and upsampling differently, by a level or two.
    diff = np.abs(images.astype(int) - ours.astype(int))
    assert diff.mean() < 1.0 and diff.max() <= 16


def test_lmdb_10_files_are_refused_with_the_reason(datasets):
    with pytest.raises(ConfigurationError, match=r"LMDB 1\.0 file.*only 0\.9 files.*"
                                                 r"--lmdb-format 0\.9"):
        peer.check_format(datasets["lmdb10"])
    assert peer.check_format(datasets["cifar10"] / "data.mdb") == datasets["cifar10"]


@needs_dali
def test_bench_point_runs_dali_caffe(datasets):
    from mpi4py import MPI

    from lmdbio.lab import bench

    assert peer.DALI_CAFFE in bench.variant_names()
    rows = bench.run_point(MPI.COMM_SELF, datasets["cifar10"], peer.DALI_CAFFE, batch_size=32,
                           iters=4, cache="warm")
    total = [r for r in rows if r["level"] == "step" and r["phase"] == "total"]
    assert total and total[0]["rank_records"] == 4 * 32
    assert total[0]["bytes"] == 4 * 32 * 3072
    assert total[0]["variant_used"].startswith("dali-caffe(threads=1")
    with pytest.raises(ConfigurationError, match="LMDB 1.0"):
        bench.run_point(MPI.COMM_SELF, datasets["lmdb10"], peer.DALI_CAFFE, batch_size=32,
                        iters=1)


def test_missing_dali_says_what_to_install(monkeypatch, datasets):
    import sys

    monkeypatch.setitem(sys.modules, "nvidia.dali", None)   # import nvidia.dali fails
    with pytest.raises(ConfigurationError, match="pip install nvidia-dali-cuda120"):
        peer.import_dali()
    from mpi4py import MPI

    with pytest.raises(ConfigurationError, match="needs NVIDIA DALI"):
        peer.DaliCaffe(MPI.COMM_SELF, datasets["cifar10"], 8)
