"""An emulated parallel file system: a storage model and a FUSE mount that serves files through it.

``lmdbio.pfs.model`` is pure Python (no FUSE needed). ``mounted``, ``Mount``,
``umount``, ``stats`` and ``evict`` (from ``lmdbio.pfs.mount``) need mfusepy
and libfuse3 only when a mount is made, and are imported on first use.
"""

import importlib

from .model import PROFILES, Profile, StorageModel, load_profile, simulate

__all__ = ["PROFILES", "Profile", "StorageModel", "load_profile", "simulate",
           "mounted", "Mount", "umount", "stats", "evict"]

_MOUNT_NAMES = ("mounted", "Mount", "umount", "stats", "evict")


def __getattr__(name):
    if name in _MOUNT_NAMES:
        return getattr(importlib.import_module(".mount", __name__), name)
    raise AttributeError(f"module 'lmdbio.pfs' has no attribute {name!r}")
