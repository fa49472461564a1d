"""lmdbio: parallel LMDB reading for deep-learning training over MPI.

A reproduction of LMDBIO (Pumma, Si, Feng, Balaji: HPCC 2017, ICPADS 2017,
ACM TOPC 2019): Caffe's LMDB access pattern as the baseline, and the six
optimizations LMM, DM, DIO, PROV, COAL and STAG, which all deliver exactly
the same records.
"""

from typing import TYPE_CHECKING

from .errors import (AccessError, ConfigurationError, DatasetError, ImageError, LmdbFormatError,
                     LmdbioError, PeerError, PeerTimeoutError, ProvenanceError, ResourceError,
                     SnapshotError, StaleProvenanceError)
from .options import EXTRA_VARIANTS, VARIANTS, Options, parse_variant

if TYPE_CHECKING:   # imported on first use by __getattr__ below
    from .batch import Batch
    from .datasets import make_dataset
    from .reader import Reader

#: The one version source: pyproject.toml reads it ([tool.setuptools.dynamic]).
__version__ = "0.1.0"

__all__ = [
    "VARIANTS", "EXTRA_VARIANTS", "Options", "parse_variant", "Reader", "Batch", "make_dataset",
    "LmdbioError", "LmdbFormatError", "ProvenanceError", "ConfigurationError",
    "DatasetError", "SnapshotError", "StaleProvenanceError", "AccessError", "PeerError",
    "PeerTimeoutError", "ResourceError", "ImageError",
]


def __getattr__(name):
    # Reader pulls in mpi4py (MPI_Init): import it only when asked for.
    if name == "Reader":
        from .reader import Reader
        return Reader
    if name == "Batch":
        from .batch import Batch
        return Batch
    if name == "make_dataset":
        from .datasets import make_dataset
        return make_dataset
    raise AttributeError(f"module 'lmdbio' has no attribute {name!r}")
