"""Old home of the reading helpers, kept as re-exports for code that imports them from here.

Positions, coalescing and extents are in :mod:`lmdbio.plan`, the fetchers in
:mod:`lmdbio.pipeline.fetch`, py-lmdb's cursor walk and error translation in
:mod:`lmdbio.lmdbenv`, STAG in :mod:`lmdbio.pipeline.stagger`.
"""

from .lmdbenv import CursorWalker, lmdb_error
from .pipeline.fetch import copy_values, read_extents
from .pipeline.stagger import Stagger
from .plan import coalesce_batches, plan_extents, positions_runs, positions_touched

__all__ = ["plan_extents", "read_extents", "copy_values", "CursorWalker", "positions_runs", "Stagger",
           "lmdb_error", "positions_touched", "coalesce_batches"]
