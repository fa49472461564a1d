"""The papers' factors against the model's: a view of :mod:`lmdbio.claims`, the one claims registry.

Kept for callers of the earlier module: ``FULL``, the split of the papers'
factors (``CLAIMS``), the tolerance and ``claims_table`` all come from
:mod:`lmdbio.claims`, where the verdicts are defined once.
"""

from __future__ import annotations

from ..claims import FACTOR_TOLERANCE as TOLERANCE
from ..claims import FULL, SPLIT as CLAIMS, split_table

__all__ = ["FULL", "CLAIMS", "TOLERANCE", "claims_table"]


def claims_table(results_root=None, nprocs: int = 9216):
    """The split by optimization at ``nprocs`` (:func:`lmdbio.claims.split_table`)."""
    from ..scales import COMMITTED_RESULTS

    return split_table(results_root or COMMITTED_RESULTS, nprocs)
