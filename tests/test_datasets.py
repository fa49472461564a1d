"""The dataset writer and `lmdbio make-dataset`."""

import hashlib
import subprocess
import sys

import lmdb
import pytest

from lmdbio import datum
from lmdbio.datasets import PRESETS, make_dataset
from lmdbio.errors import DatasetError


def records(path):
    env = lmdb.open(str(path), readonly=True, lock=False)
    with env.begin() as txn:
        out = [(bytes(k), bytes(v)) for k, v in txn.cursor()]
    env.close()
    return out


def test_cifar10_preset_is_caffe_shaped(tmp_path):
    out = make_dataset(tmp_path / "c", "cifar10", 1200, commit_every=500)
    recs = records(out)
    assert len(recs) == 1200
    keys = [k.decode() for k, _ in recs]
    assert keys == sorted(keys)
    assert all(k[:8] == f"{i:08d}" and k[8] == "_" for i, k in enumerate(keys))
    labels = set()
    for _, v in recs[:200]:
        d = datum.decode(v)
        assert (d.channels, d.height, d.width, len(d.data), d.encoded) == (3, 32, 32, 3072, False)
        labels.add(d.label)
    assert len(labels) == 10
    sizes = {len(v) for _, v in recs}
    assert all(3080 <= s <= 3095 for s in sizes)
    img = datum.decode_image(datum.decode(recs[0][1]))
    assert img.std() > 5  # not a constant image


def test_encoded_imagenet_sizes_vary(tmp_path):
    out = make_dataset(tmp_path / "j", "imagenet", 30, encoded=True)
    recs = records(out)
    sizes = [len(v) for _, v in recs]
    assert len(set(sizes)) > 20 and max(sizes) > 1.3 * min(sizes)
    d = datum.decode(recs[0][1])
    assert d.encoded and d.data[:2] == b"\xff\xd8"  # JPEG magic
    assert datum.decode_image(d).shape == (3, 256, 256)


def test_same_seed_same_bytes(tmp_path):
    a = make_dataset(tmp_path / "a", "cifar10", 300, seed=9, commit_every=100)
    b = make_dataset(tmp_path / "b", "cifar10", 300, seed=9, commit_every=100)
    c = make_dataset(tmp_path / "c", "cifar10", 300, seed=10, commit_every=100)
    assert records(a) == records(b) != records(c)
    digest = lambda p: hashlib.sha256((p / "data.mdb").read_bytes()).hexdigest()
    assert digest(a) == digest(b)


@pytest.mark.parametrize("fmt,version", [("0.9", 1), ("1.0", 3)])
def test_both_lmdb_formats(tmp_path, fmt, version):
    import struct

    out = make_dataset(tmp_path / fmt, "cifar10", 200, lmdb_format=fmt)
    head = (out / "data.mdb").read_bytes()[:64]
    hdr = 16 if fmt == "0.9" else 24
    magic, ver = struct.unpack_from("<II", head, hdr)
    assert (magic, ver) == (0xBEEFC0DE, version)
    assert len(records(out)) == 200


def test_refusals(tmp_path):
    out = make_dataset(tmp_path / "x", "cifar10", 10)
    with pytest.raises(DatasetError, match="--force"):
        make_dataset(out, "cifar10", 10)
    make_dataset(out, "cifar10", 20, force=True)
    assert len(records(out)) == 20
    with pytest.raises(ValueError, match="unknown preset"):
        make_dataset(tmp_path / "y", "mnist", 10)
    with pytest.raises(ValueError, match="positive"):
        make_dataset(tmp_path / "y", "cifar10", 0)
    with pytest.raises(DatasetError, match="not enough disk space"):
        make_dataset(tmp_path / "huge", "imagenet", 10**9)


def test_cli_make_dataset_and_refusal(tmp_path):
    out = tmp_path / "cli"
    cmd = [sys.executable, "-m", "lmdbio", "make-dataset", "--preset", "cifar10", "--records", "50",
           "--out", str(out), "--quiet"]
    ok = subprocess.run(cmd, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode != 0
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lmdbio: error:") and "--force" in lines[0]
    assert "Traceback" not in again.stderr


def test_cli_help_lists_subcommands():
    out = subprocess.run([sys.executable, "-m", "lmdbio", "--help"], capture_output=True, text=True)
    for cmd in ("make-dataset", "info", "dump", "index"):
        assert cmd in out.stdout


def test_preset_sizes():
    assert PRESETS["cifar10"].image_bytes == 3072
    assert PRESETS["imagenet"].image_bytes == 196608
