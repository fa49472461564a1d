"""An emulated parallel file system: a storage model and a FUSE mount that serves files through it.

``lmdbio.lab.pfs.model`` is pure Python (no FUSE needed). ``mounted``, ``Mount``,
``umount``, ``stats`` and ``evict`` (from ``lmdbio.lab.pfs.mount``) need mfusepy
and libfuse3 only when a mount is made, and are imported on first use.
"""

import importlib
from typing import TYPE_CHECKING

from .model import PROFILES, Profile, StorageModel, load_profile, simulate

if TYPE_CHECKING:   # imported on first use (below), so that the model needs no FUSE
    from .mount import Mount, evict, mounted, stats, umount

__all__ = ["PROFILES", "Profile", "StorageModel", "load_profile", "simulate",
           "mounted", "Mount", "umount", "stats", "evict"]

_MOUNT_NAMES = ("mounted", "Mount", "umount", "stats", "evict")


def __getattr__(name):
    if name in _MOUNT_NAMES:
        return getattr(importlib.import_module(".mount", __name__), name)
    raise AttributeError(f"module 'lmdbio.lab.pfs' has no attribute {name!r}")
