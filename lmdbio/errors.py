"""Exception classes: one base, one subclass per kind of failure."""

__all__ = [
    "LmdbioError",
    "LmdbFormatError",
    "ProvenanceError",
    "StaleProvenanceError",
    "ConfigurationError",
    "DatasetError",
    "ResourceError",
    "AccessError",
    "SnapshotError",
    "PeerError",
    "PeerTimeoutError",
]


class LmdbioError(Exception):
    """Base class of every error lmdbio raises on purpose."""


class LmdbFormatError(LmdbioError):
    """A data.mdb file is not a valid LMDB file this reader supports."""


class ProvenanceError(LmdbioError):
    """A provenance sidecar is missing, stale, or does not match the file."""


class StaleProvenanceError(ProvenanceError):
    """A provenance sidecar does not describe the file it sits beside (stale, edited or forged)."""


class AccessError(LmdbioError, PermissionError):
    """A path exists but this process may not read it (or may not use its lock file)."""


class ConfigurationError(LmdbioError, ValueError):
    """Options that cannot work together (bad variant, impossible combination)."""


class DatasetError(LmdbioError):
    """A dataset cannot be made or read (exists already, no space, empty)."""


class ResourceError(LmdbioError):
    """The machine lacks room the Reader needs (shared memory in ``/dev/shm``); the message says
    how much is needed, how much is free and what to change."""


class SnapshotError(LmdbioError):
    """An index belongs to another snapshot of the database than the one in use."""


class PeerError(LmdbioError):
    """Another rank of the Reader failed or left, so this rank cannot go on with it."""


class PeerTimeoutError(PeerError):
    """A peer rank did not take its part in a hand-off within ``LMDBIO_TIMEOUT`` seconds.

    It stopped calling ``read_batch()`` (uneven loop counts, an early ``break``),
    failed, or exited. Every rank must call ``read_batch()`` the same number of
    times and then ``close()``.
    """
