"""Datums of mixed image sizes: ``Batch.as_datum_list`` (a list of arrays, decoded on threads)
and ``Batch.as_datum_array(size=...)`` (each image resized to one shape), each image checked
against a decode of its record alone."""

import io
from pathlib import Path
import sys

import numpy as np
import pytest
from mpi4py import MPI
from PIL import Image

import lmdbio
from lmdbio import datum
from lmdbio.batch import RESAMPLE, Batch
from lmdbio.datasets import Preset, synthetic_images
from lmdbio.errors import ConfigurationError, LmdbioError

sys.path.insert(0, str(Path(__file__).parent / "mpi"))
from stored import stored_values

N, B = 60, 8
GREY = 7   # the one grey JPEG; every other record is colour
SIZE = (40, 56)


def _jpeg(chw: np.ndarray, quality: int, progressive: bool = False) -> bytes:
    hwc = np.moveaxis(chw, 0, -1)
    buf = io.BytesIO()
    Image.fromarray(hwc[..., 0] if hwc.shape[-1] == 1 else hwc).save(
        buf, "JPEG", quality=quality, progressive=progressive)
    return buf.getvalue()


def make_mixed(path, n: int = N, seed: int = 0):
    """An LMDB of ``n`` Datums of random sizes: baseline JPEGs of qualities 60-95, and every
    fifth a progressive JPEG, a PNG, or a raw (not encoded) Datum; record GREY is grey."""
    from lmdbio.lmdbenv import RecordWriter

    rng = np.random.default_rng(seed)
    writer = RecordWriter(path, 1 << 26, 25)
    for i in range(n):
        h, w = (int(x) for x in rng.integers(20, 121, size=2))
        img, _ = synthetic_images(Preset(1 if i == GREY else 3, h, w, 10), 1, rng)
        label = int(rng.integers(0, 1000))
        kind = i % 5 if i != GREY else 0
        if kind == 1:
            value = datum.encode(encoded_bytes=_jpeg(img[0], 80, progressive=True), label=label)
        elif kind == 2:
            value = datum.encode(encoded_bytes=datum.encode_image_bytes(img[0], "PNG"),
                                 label=label)
        elif kind == 3:
            value = datum.encode(img[0], label)
        else:
            value = datum.encode(encoded_bytes=_jpeg(img[0], int(rng.integers(60, 96))),
                                 label=label, channels=img.shape[1], height=h, width=w)
        writer.put(f"{i:08d}".encode(), value)
    writer.close()
    return path


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return make_mixed(tmp_path_factory.mktemp("mixed") / "m")


@pytest.fixture(scope="module")
def values(db) -> list[bytes]:
    return stored_values(db)


def _batch(values: list[bytes], picks) -> Batch:
    """A Batch of ``values[picks]``, laid out back to back with a gap between records."""
    parts = [values[i] for i in picks]
    sizes = np.array([len(p) for p in parts], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes + 3)[:-1]]).astype(np.int64)
    buf = np.zeros(int(offsets[-1] + sizes[-1]), np.uint8)
    for o, p in zip(offsets, parts):
        buf[o:o + len(p)] = np.frombuffer(p, np.uint8)
    return Batch(buf, offsets, sizes, np.asarray(picks, np.int64))


def _alone(value) -> tuple[np.ndarray, int]:
    """One record decoded by itself: protobuf, then Pillow's ``Image.open`` for encoded ones."""
    d = datum.decode(value)
    return datum.decode_image(d), d.label


def _resized_alone(value, size, resample: str) -> np.ndarray:
    image, _ = _alone(value)
    hwc = np.moveaxis(image, 0, -1)
    im = Image.fromarray(hwc[..., 0] if hwc.shape[-1] == 1 else hwc)
    out = np.asarray(im.resize(size[::-1], getattr(Image.Resampling, resample.upper())))
    return np.moveaxis(out[..., None] if out.ndim == 2 else out, -1, 0)


def test_the_data_set_holds_mixed_sizes_and_kinds(values):
    shapes = {_alone(v)[0].shape for v in values}
    kinds = {(d.encoded, d.data[:2]) for d in map(datum.decode, values)}
    assert len(shapes) > N // 2 and {s[0] for s in shapes} == {1, 3}
    assert {(True, b"\xff\xd8"), (True, b"\x89P"), (False, b"")} <= \
        {(e, h if e else b"") for e, h in kinds}


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_list_equals_each_record_decoded_alone(db, values, threads):
    """Shuffled batches of a Reader: every image equals its record's decode alone, in an
    array of its own (writable, sharing no memory with the batch)."""
    seen = 0
    with lmdbio.Reader(db, B, MPI.COMM_SELF, variant="lmdbio-direct", shuffle=True, seed=2,
                       build_provenance=True) as r:
        for batch in r.epoch(0):
            images, labels = batch.as_datum_list(threads=threads)
            assert len(images) == len(labels) == len(batch) and labels.dtype == np.int64
            for img, label, pos in zip(images, labels, batch.indices):
                want, want_label = _alone(values[pos])
                assert img.dtype == np.uint8 and img.shape == want.shape
                assert np.array_equal(img, want) and label == want_label, pos
                assert img.flags.writeable and not np.shares_memory(img, batch.buffer)
                seen += 1
    assert seen == N


def test_one_array_is_refused_naming_the_list(db):
    with lmdbio.Reader(db, B, MPI.COMM_SELF, variant="lmdbio-direct",
                       build_provenance=True) as r:
        batch = next(iter(r.epoch(0)))
        with pytest.raises(LmdbioError, match=r"cannot share one array: decode them with "
                           r"Batch.as_datum_list\(threads=N\).*as_datum_array\(size="):
            batch.as_datum_array(threads=2)


@pytest.mark.parametrize("resample", ["bilinear", "nearest", "lanczos"])
@pytest.mark.parametrize("threads", [1, 2])
def test_resized_equals_each_record_resized_alone(values, resample, threads):
    colour = [i for i in range(N) if i != GREY][::-1]
    batch = _batch(values, colour)
    images, labels = batch.as_datum_array(size=SIZE, threads=threads, resample=resample)
    assert images.shape == (len(colour), 3, *SIZE) and images.dtype == np.uint8
    for img, label, pos in zip(images, labels, colour):
        assert np.array_equal(img, _resized_alone(values[pos], SIZE, resample)), pos
        assert label == _alone(values[pos])[1]
    # Into a caller's array; an image already of the size is taken as it is.
    out = np.zeros_like(images)
    got, _ = batch.as_datum_array(out=out, size=SIZE, threads=threads, resample=resample)
    assert got is out and np.array_equal(out, images)
    # A record already of the size is its image as it is.
    h, w = _alone(values[0])[0].shape[1:]
    alone, _ = _batch(values, [0]).as_datum_array(size=(h, w), resample=resample)
    assert np.array_equal(alone[0], _alone(values[0])[0])


def test_resize_refuses_mixed_channels_and_bad_arguments(values):
    with pytest.raises(LmdbioError, match=r"record 1 of the batch \(dataset index 7\) has 1 channels, record 0 3: .*as_datum_list"):
        _batch(values, [0, GREY, 2]).as_datum_array(size=SIZE, threads=2)
    grey, _ = _batch(values, [GREY]).as_datum_array(size=SIZE)
    assert np.array_equal(grey[0], _resized_alone(values[GREY], SIZE, "bilinear"))
    batch = _batch(values, [0, 1])
    for size in [(0, 4), (4,), "ab", (4.5, 4), 4]:
        with pytest.raises(ConfigurationError, match="size must be"):
            batch.as_datum_array(size=size)
    with pytest.raises(ConfigurationError, match="resample must be one of 'nearest'"):
        batch.as_datum_array(size=SIZE, resample="cubic")
    assert "bicubic" in RESAMPLE
    with pytest.raises(ValueError, match="out is a uint8 array of shape"):
        batch.as_datum_array(size=SIZE, out=np.empty((2, 3, 4, 4), np.uint8))
    for threads in (0, True, 1.5):
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            batch.as_datum_list(threads=threads)


@pytest.mark.parametrize("threads", [1, 3])
def test_a_damaged_record_is_named(values, threads):
    d = datum.decode(values[4])
    cut = datum.encode(encoded_bytes=d.data[:len(d.data) // 3], label=1)
    batch = _batch([values[0], values[1], cut, b"\x08\xff", values[5]], range(5))
    with pytest.raises(LmdbioError, match=r"record 2 of the batch \(dataset index 2\) holds an encoded image Pillow cannot"):
        batch.as_datum_list(threads=threads)
    with pytest.raises(LmdbioError, match=r"record 1 of the batch \(dataset index 1\) is not a Caffe Datum"):
        _batch([values[0], b"\x08\xff"], range(2)).as_datum_list(threads=threads)
