"""Bad images refused by name: every decode path checks the size a record declares before
allocating for it, and raises ImageError naming the record's place, dataset index and key.

Each bad record sits first and in the middle of a batch of good ones, raw or JPEG; every
path (the raw batch decoder, encoded records in one thread and in two, ``size=``,
``as_datum_list``, ``layout="HWC"``) must raise ImageError for it, never a foreign
exception, and :func:`lmdbio.datum.decode_image` refuses the same records.
"""

import io
import pickle
import zlib

import numpy as np
import pytest
from mpi4py import MPI
from PIL import Image

import lmdbio
from lmdbio import datum
from lmdbio.batch import Batch
from lmdbio.errors import ImageError, LmdbioError
from lmdbio.lmdbenv import RecordWriter

N, B = 8, 4        # records per dataset; a batch of four: the bad records are 0 and 5
BAD_AT = (0, 5)    # first in batch 0, in the middle (position 1) of batch 1


def _jpeg(h: int, w: int) -> bytes:
    """A 16 x 16 JPEG whose frame header declares ``h x w``."""
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), 90, np.uint8)).save(buf, "JPEG")
    data = buf.getvalue()
    sof = data.index(b"\xff\xc0")
    return data[:sof + 5] + h.to_bytes(2, "big") + w.to_bytes(2, "big") + data[sof + 9:]


def _png(h: int, w: int) -> bytes:
    """A 16 x 16 PNG whose IHDR declares ``h x w`` (with the IHDR's CRC made right)."""
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), 90, np.uint8)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    data[16:24] = w.to_bytes(4, "big") + h.to_bytes(4, "big")
    data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
    return bytes(data)


def _raw_header(c: int, h: int, w: int, data: bytes = b"") -> bytes:
    d = datum.Datum()
    d.channels, d.height, d.width, d.data, d.label = c, h, w, data, 3
    return d.SerializeToString()


BAD = {
    "jpeg 0x64": datum.encode(encoded_bytes=_jpeg(0, 64), label=1),
    "jpeg 64x0": datum.encode(encoded_bytes=_jpeg(64, 0), label=1),
    "jpeg 0x0": datum.encode(encoded_bytes=_jpeg(0, 0), label=1),
    "jpeg bomb": datum.encode(encoded_bytes=_jpeg(60000, 60000), label=1),
    "png bomb": datum.encode(encoded_bytes=_png(60000, 60000), label=1),
    "empty data": datum.encode(encoded_bytes=b"", label=1),
    "empty value": b"",
    "raw 3x0x0": _raw_header(3, 0, 0),
    "raw negative": _raw_header(3, -4, -4, bytes(48)),
    "raw bomb": _raw_header(3, 60000, 60000),
}
REASON = {"jpeg 0x64": "declares a 0 x 64 image", "jpeg 64x0": "declares a 64 x 0 image",
          "jpeg 0x0": "declares a 0 x 0 image", "jpeg bomb": "more than max_pixels",
          "png bomb": "more than max_pixels", "empty data": "holds no image data",
          "empty value": "an empty Datum", "raw 3x0x0": "declares a 0 x 0 image",
          "raw negative": "every side must be positive", "raw bomb": "more than max_pixels"}


def _good(base: str, i: int) -> bytes:
    img = np.random.default_rng(i).integers(0, 256, (3, 16, 16), dtype=np.uint8)
    if base == "raw":
        return datum.encode(img, i)
    return datum.encode(encoded_bytes=datum.encode_image_bytes(img, "JPEG"), label=i)


def _key(i: int) -> bytes:
    return f"k{i:05d}".encode()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """``(base, bad) -> (path, values)``: an LMDB of N records, good ones of ``base``, the
    bad one at BAD_AT."""
    out = {}
    for base in ("raw", "jpeg"):
        for name, bad in BAD.items():
            values = [bad if i in BAD_AT else _good(base, i) for i in range(N)]
            path = tmp_path_factory.mktemp("bad") / "db"
            writer = RecordWriter(path, 1 << 22, N)
            for i, v in enumerate(values):
                writer.put(_key(i), v)
            writer.close()
            out[base, name] = path, values
    return out


def _batch(values, picks, source) -> Batch:
    """A Batch of ``values[picks]`` with gaps between them, knowing its file."""
    parts = [values[i] for i in picks]
    sizes = np.array([len(p) for p in parts], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes + 5)[:-1]]).astype(np.int64)
    buf = np.zeros(int(offsets[-1] + sizes[-1]) + 8, np.uint8)
    for o, p in zip(offsets, parts):
        buf[o:o + len(p)] = np.frombuffer(p, np.uint8)
    return Batch(buf, offsets, sizes, np.asarray(picks, np.int64), source)


PATHS = {
    "array": lambda b: b.as_datum_array(),
    "array threads=2": lambda b: b.as_datum_array(threads=2),
    "size": lambda b: b.as_datum_array(size=(12, 12)),
    "size threads=2": lambda b: b.as_datum_array(size=(12, 12), threads=2),
    "list": lambda b: b.as_datum_list(),
    "list threads=2": lambda b: b.as_datum_list(threads=2),
    "HWC": lambda b: b.as_datum_array(layout="HWC"),
    "decode_many": lambda b: datum.decode_many(b),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", BAD)
@pytest.mark.parametrize("base", ["raw", "jpeg"])
def test_bad_record_first_or_in_the_middle_is_named(made, base, name, path):
    db, values = made[base, name]
    for first, bad in zip((0, B), BAD_AT):
        batch = _batch(values, range(first, first + B), db)
        with pytest.raises(ImageError) as err:
            PATHS[path](batch)
        e = err.value
        assert (e.position, e.index, e.key) == (bad - first, bad, _key(bad))
        assert f"record {bad - first} of the batch (dataset index {bad}, key {_key(bad)!r})" \
            in str(e) and REASON[name] in str(e)


@pytest.mark.parametrize("name", BAD)
def test_decode_image_refuses_the_same_records(made, name):
    _, values = made["jpeg", name]
    for i, v in enumerate(values):
        if i in BAD_AT:
            with pytest.raises(ImageError, match=REASON[name]) as err:
                datum.decode_image(datum.decode(v))
            assert (err.value.position, err.value.index, err.value.key) == (None, None, None)
        else:
            assert datum.decode_image(datum.decode(v)).shape == (3, 16, 16)


@pytest.mark.parametrize("base", ["raw", "jpeg"])
def test_good_records_around_them_equal_decode_image(made, base):
    _, values = made[base, "jpeg bomb"]
    good = [i for i in range(N) if i not in BAD_AT]
    batch = _batch(values, good, None)
    want = np.stack([datum.decode_image(datum.decode(values[i])) for i in good])
    for path in ("array", "array threads=2", "HWC", "list"):
        images, labels = PATHS[path](batch)
        images = np.stack(images)
        assert np.array_equal(images, want.transpose(0, 2, 3, 1) if path == "HWC" else want)
        assert list(labels) == good


def test_the_pixel_limit_is_a_keyword():
    img = np.zeros((3, 40, 40), np.uint8)
    png = datum.encode(encoded_bytes=datum.encode_image_bytes(img, "PNG"), label=0)
    jpeg = datum.encode(encoded_bytes=datum.encode_image_bytes(img), label=0)
    for value in (png, jpeg, datum.encode(img, 0)):
        batch = _batch([value, value], [0, 1], None)
        with pytest.raises(ImageError, match="1,600 pixels, more than max_pixels = 1,599") \
                as err:
            batch.as_datum_array(max_pixels=1599)
        assert (err.value.position, err.value.index, err.value.key) == (0, 0, None)
        with pytest.raises(ImageError, match="more than max_pixels"):
            batch.as_datum_list(max_pixels=1599)
        with pytest.raises(ImageError, match="more than max_pixels"):
            datum.decode_image(datum.decode(value), max_pixels=1599)
        assert batch.as_datum_array(max_pixels=1600)[0].shape == (2, 3, 40, 40)
        assert datum.MAX_IMAGE_PIXELS == 178_956_970
    bomb = datum.encode(encoded_bytes=_jpeg(60000, 60000), label=1)
    with pytest.raises(ImageError, match="Pillow cannot decode"):  # no limit of ours: Pillow's
        datum.decode_many([bomb], max_pixels=None)


def test_a_reader_batch_names_the_key(made):
    db, _ = made["raw", "jpeg 0x64"]
    with lmdbio.Reader(db, B, MPI.COMM_SELF, variant="lmdbio-direct",
                       build_provenance=True) as r:
        batches = [r.read_batch() for _ in range(2)]
    for batch, bad in zip(batches, BAD_AT):
        with pytest.raises(LmdbioError, match=f"dataset index {bad}, key {_key(bad)!r}") as err:
            batch.as_datum_array()
        again = pickle.loads(pickle.dumps(err.value))  # an error raised on an engine
        assert (again.position, again.index, again.key) == (bad % B, bad, _key(bad))
