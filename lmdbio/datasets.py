"""Dataset writers: Caffe-style LMDBs of synthetic images (presets cifar10, imagenet)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import datum
from .errors import ConfigurationError, DatasetError

__all__ = ["Preset", "PRESETS", "make_dataset", "estimate_bytes", "synthetic_images"]


@dataclass(frozen=True)
class Preset:
    """Shape of the images of a dataset preset."""

    channels: int
    height: int
    width: int
    classes: int

    @property
    def image_bytes(self) -> int:
        return self.channels * self.height * self.width


PRESETS = {
    "cifar10": Preset(3, 32, 32, 10),     # a raw Datum is about 3,087 bytes
    "imagenet": Preset(3, 256, 256, 1000),  # a raw Datum is about 196,623 bytes
}

_PAGE = 4096


def _bilinear(n_out: int, n_in: int) -> np.ndarray:
    """Matrix (n_out, n_in) that linearly interpolates n_in samples onto n_out."""
    pos = np.linspace(0, n_in - 1, n_out)
    lo = np.clip(np.floor(pos).astype(int), 0, n_in - 1)
    hi = np.clip(lo + 1, 0, n_in - 1)
    frac = pos - lo
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), lo] += 1 - frac
    m[np.arange(n_out), hi] += frac
    return m


def synthetic_images(preset: Preset, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images that look a little like photos: smooth random fields plus noise.

    Each image has its own smoothness and noise level, so JPEG sizes vary the
    way real photos do. Returns ``(images (n, c, h, w) uint8, labels int64)``.
    """
    c, h, w = preset.channels, preset.height, preset.width
    gh, gw = max(2, h // 8), max(2, w // 8)
    coarse = rng.uniform(0, 255, size=(n, c, gh, gw))
    field = np.einsum("hg,ncgk,wk->nchw", _bilinear(h, gh), coarse, _bilinear(w, gw), optimize=True)
    noise_level = rng.uniform(2, 40, size=(n, 1, 1, 1))
    field += noise_level * rng.standard_normal(size=(n, c, h, w))
    images = np.clip(field, 0, 255).astype(np.uint8)
    labels = rng.integers(0, preset.classes, size=n)
    return images, labels


def _value_estimate(preset: Preset, encoded: bool) -> int:
    # Raw: the pixels plus about 15 bytes of protobuf framing. JPEG at
    # quality 90 on these images is about half the raw size at worst.
    return preset.image_bytes // 2 + 64 if encoded else preset.image_bytes + 16


def estimate_bytes(preset: Preset, records: int, encoded: bool = False) -> int:
    """Upper estimate of data.mdb's size for ``records`` records of ``preset``."""
    value = _value_estimate(preset, encoded)
    per_record = -(-(value + 16) // _PAGE) * _PAGE if value > 2000 else value + 64
    return int(records * per_record * 1.1) + 64 * _PAGE


def _key(i: int, label: int, ext: str) -> bytes:
    # Caffe's convert_imageset key: "%08d_" + the image's file name.
    return f"{i:08d}_class{label:04d}/img_{i:08d}.{ext}".encode()


def make_dataset(out: str | os.PathLike, preset: str = "cifar10", records: int = 1000, *,
                 encoded: bool = False, commit_every: int = 1000, seed: int = 0,
                 lmdb_format: str = "0.9", force: bool = False, progress: bool = False,
                 provenance: bool = True) -> Path:
    """Write a Caffe-style LMDB of synthetic Datums the way ``convert_imageset`` does.

    One ``put`` per record in key order, a commit every ``commit_every``
    records. The same seed gives the same records.

    Args:
        out: the LMDB directory to create (holds data.mdb).
        preset: ``"cifar10"`` or ``"imagenet"``.
        records: number of records.
        encoded: store JPEG bytes (``encoded=True`` Datums) instead of raw pixels.
        commit_every: records per write transaction.
        seed: random seed.
        lmdb_format: ``"0.9"`` (Caffe's, the default) or ``"1.0"``.
        force: replace an existing database.
        progress: show a progress bar.
        provenance: write the provenance sidecar (see lmdbio.provenance).
    Returns:
        The LMDB directory.
    """
    from .lmdbenv import RecordWriter

    if preset not in PRESETS:
        raise ConfigurationError(f"unknown preset {preset!r}: preset must be one of "
                                 f"{', '.join(PRESETS)}")
    if records <= 0:
        raise ConfigurationError(f"records must be a positive integer, got {records}")
    if commit_every <= 0:
        raise ConfigurationError(f"commit_every must be a positive integer, got {commit_every}")
    if lmdb_format not in ("0.9", "1.0"):
        raise ConfigurationError(f"lmdb_format must be '0.9' or '1.0', got {lmdb_format!r}")
    spec = PRESETS[preset]
    out = Path(out)
    data_file = out / "data.mdb"
    if data_file.exists() and not force:
        raise DatasetError(f"{data_file} exists already; pass --force (force=True) to replace it")
    if out.exists() and not out.is_dir():
        raise DatasetError(f"{out} exists and is not a directory; choose another --out")

    need = estimate_bytes(spec, records, encoded)
    probe = out
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        raise DatasetError(
            f"not enough disk space for {out}: about {need / 2**20:,.0f} MiB needed, "
            f"{free / 2**20:,.0f} MiB free; use fewer --records or another --out")

    out.mkdir(parents=True, exist_ok=True)
    for name in ("data.mdb", "lock.mdb"):
        (out / name).unlink(missing_ok=True)
    from . import provenance as _prov
    _prov.sidecar_path(out).unlink(missing_ok=True)

    writer = RecordWriter(out, max(need * 2, 1 << 26), commit_every, lmdb_format)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=records, unit="rec", desc=f"{preset} -> {out}")
    ok = False
    try:
        rng = np.random.default_rng(seed)
        chunk = max(1, min(commit_every, (16 << 20) // spec.image_bytes))
        ext = "jpg" if encoded else "png"
        for start in range(0, records, chunk):
            n = min(chunk, records - start)
            images, labels = synthetic_images(spec, n, rng)
            for j in range(n):
                i = start + j
                if encoded:
                    value = datum.encode(encoded_bytes=datum.encode_image_bytes(images[j]),
                                         label=labels[j], channels=spec.channels,
                                         height=spec.height, width=spec.width)
                else:
                    value = datum.encode(images[j], labels[j])
                writer.put(_key(i, int(labels[j]), ext), value)
            if bar is not None:
                bar.update(n)
        writer.close()
        ok = True
    finally:
        if bar is not None:
            bar.close()
        if not ok:
            writer.abort()
    if provenance:
        _prov.write_provenance(out)
    return out
