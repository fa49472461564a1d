"""Every py-lmdb call lmdbio makes: environments, snapshots, cursor walks, writes, error translation.

No other library module imports py-lmdb (``tests/test_imports.py`` checks it).

=========  ===================================================================
module     what it does
=========  ===================================================================
env        one shared Environment per real file per process (:func:`acquire`),
           pinned snapshots (:func:`begin_pinned`), py-lmdb errors translated
cursor     :class:`CursorWalker`: the cursor walk of Caffe's reader (LMM, lmdb)
writer     :class:`RecordWriter`: a new database's records, committed in batches
=========  ===================================================================
"""

from .cursor import CursorWalker
from .env import (LMDB_READERS, EnvHandle, acquire, begin_pinned, entries, liblmdb_version,
                  lmdb_error, lock_path, real_location)
from .writer import RecordWriter

__all__ = ["EnvHandle", "acquire", "LMDB_READERS", "real_location", "lock_path", "lmdb_error",
           "begin_pinned", "entries", "CursorWalker", "RecordWriter", "liblmdb_version"]
