"""Exception classes: one base, one subclass per kind of failure, each carrying its data.

Callers test fields, never message text: :attr:`ConfigurationError.option`,
:attr:`PeerError.ranks`, :attr:`PeerTimeoutError.missing` and ``.limit``,
:attr:`SnapshotError.expected` and ``.found``. The fields survive pickling (an error
raised on an ipyparallel engine, or rebuilt on every rank by
:func:`lmdbio.collective.collective`, keeps them).
"""

__all__ = [
    "LmdbioError",
    "LmdbFormatError",
    "ProvenanceError",
    "StaleProvenanceError",
    "ConfigurationError",
    "DatasetError",
    "ResourceError",
    "AccessError",
    "AlreadyOpenError",
    "SnapshotError",
    "PeerError",
    "PeerTimeoutError",
    "ImageError",
]


class LmdbioError(Exception):
    """Base class of every error lmdbio raises on purpose."""

    def __reduce__(self):
        # Exception pickles only ``args``; the fields set by keyword live in ``__dict__``.
        return _restore, (type(self), self.args, dict(self.__dict__))


def _restore(cls, args, fields):
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(fields)
    return err


class LmdbFormatError(LmdbioError):
    """A data.mdb file is not a valid LMDB file this reader supports."""


class ProvenanceError(LmdbioError):
    """A provenance sidecar is missing, stale, or does not match the file."""


class StaleProvenanceError(ProvenanceError):
    """A provenance sidecar does not describe the file it sits beside (stale, edited or forged)."""


class AccessError(LmdbioError, PermissionError):
    """A path exists but this process may not read it (or may not use its lock file)."""


class AlreadyOpenError(LmdbioError):
    """This process already holds the LMDB open through other code (its own ``lmdb.open()``,
    or a parent's environment inherited by a forked child): py-lmdb allows one Environment
    per file per process. ``path``: the data file."""

    def __init__(self, *args, path: str | None = None):
        super().__init__(*args)
        self.path = path


class ConfigurationError(LmdbioError, ValueError):
    """Options that cannot work together (bad variant, impossible combination).

    ``option``: the argument or setting at fault (``"batch_size"``, ``"variant"``,
    ``"LMDBIO_TIMEOUT"``, ...), or None where the message names several.
    """

    def __init__(self, *args, option: str | None = None):
        super().__init__(*args)
        self.option = option


class DatasetError(LmdbioError):
    """A dataset cannot be made or read (exists already, no space, empty)."""


class ResourceError(LmdbioError):
    """The machine lacks room the Reader needs (shared memory in ``/dev/shm``); the message says
    how much is needed, how much is free and what to change."""


class SnapshotError(LmdbioError):
    """An index, a state or a rank's view belongs to another snapshot of the database than
    the one in use.

    ``expected`` and ``found``: the two identities that differ (e.g. ``(txnid, entries)``
    pairs, a state's ``dataset`` dict against the Reader's), or None where not known.
    """

    def __init__(self, *args, expected=None, found=None):
        super().__init__(*args)
        self.expected, self.found = expected, found


class PeerError(LmdbioError):
    """Another rank of the Reader failed or left, so this rank cannot go on with it.

    ``ranks``: the other ranks at fault, as a sorted tuple (empty where not known).
    """

    def __init__(self, *args, ranks=()):
        super().__init__(*args)
        self.ranks = tuple(sorted(int(r) for r in ranks))


class PeerTimeoutError(PeerError, TimeoutError):
    """A peer rank did not take its part in a hand-off within ``LMDBIO_TIMEOUT`` seconds.

    It stopped calling ``read_batch()`` (uneven loop counts, an early ``break``),
    failed, or exited. Every rank must call ``read_batch()`` the same number of
    times and then ``close()``.

    ``missing``: the ranks that did not come (this rank's own number when it is the one
    that came too late); ``ranks`` is the same tuple. ``limit``: the seconds waited for
    (``LMDBIO_TIMEOUT`` or twice it), or None where not known.
    """

    def __init__(self, *args, missing=(), limit: float | None = None):
        super().__init__(*args, ranks=missing)
        self.missing = self.ranks
        self.limit = limit


class ImageError(LmdbioError):
    """A record's image cannot be decoded: not a Datum, empty or unreadable data, a declared
    size with a zero or negative side or more pixels than the limit, or another shape than
    the batch's.

    ``position``: the record's place in the batch; ``index``: its dataset index; ``key``:
    its LMDB key (bytes). Each is None where not known (an image decoded on its own).
    """

    def __init__(self, *args, position: int | None = None, index: int | None = None,
                 key: bytes | None = None):
        super().__init__(*args)
        self.position, self.index, self.key = position, index, key
