"""Figures: one seaborn style, one fixed colour per variant, one function per figure kind.

Every function reads tidy results (DataFrames loaded from ``data/results``,
shaped by :mod:`lmdbio.lab.tables`) and returns a matplotlib Figure; one line
per variant is seaborn's ``hue``. Nothing here measures. :func:`save` writes
``figures/NN_name.png`` and ``.svg``.

===========  ==================================================================
module       figures
===========  ==================================================================
style        colours, markers, ``setup``, ``save``, ``load``, titles
lmdb         notebooks 00-02: environment, page map, record sizes, LMDB's costs
variants     notebooks 03-10: one optimization against another, scaling, training
settings     a claim in every setting (``claim_settings``, ``judgement``)
extensions   notebook 12: shuffled epochs, prefetch, decoding (``beyond``)
===========  ==================================================================
"""

from __future__ import annotations

from lmdbio.options import VARIANTS

from ..tables import (
                    MMAP_VARIANTS,
                    label,
                    per_iteration,
                    requests_per_iteration,
                    speedup_table,
)
from .extensions import DECODE_SERIES, SERIES_12, beyond
from .lmdb import (
                    contention,
                    environment,
                    io_requests,
                    page_map,
                    record_sizes,
                    seek_cost,
                    time_breakdown,
)
from .settings import SETTING_TITLES, WORKLOAD_STYLES, claim_settings, judgement
from .style import (
                    CACHE_STYLES,
                    PAGE_COLORS,
                    PHASE_COLORS,
                    VARIANT_COLORS,
                    VARIANT_MARKERS,
                    load,
                    machine,
                    save,
                    setup,
                    subtitle,
)
from .variants import (
                    coalescing,
                    optimization,
                    prov_model,
                    scaling,
                    timelines,
                    training,
                    training_prefetch,
)

__all__ = [
    "VARIANTS", "VARIANT_COLORS", "VARIANT_MARKERS", "CACHE_STYLES", "PHASE_COLORS", "PAGE_COLORS", "label", "setup",
    "save", "load", "machine", "subtitle",
    "environment", "page_map", "record_sizes", "time_breakdown", "contention",
    "seek_cost", "io_requests", "optimization",
    "prov_model", "coalescing", "timelines", "scaling", "training", "training_prefetch",
    "SETTING_TITLES", "WORKLOAD_STYLES", "claim_settings", "judgement", "beyond", "SERIES_12", "DECODE_SERIES",
    "STATIC",
    # data shaping lives in lmdbio.lab.tables; these names stay here for the notebooks that call them
    "per_iteration", "requests_per_iteration", "speedup_table", "MMAP_VARIANTS",
]

#: Typed figure text with a number or a comparison word: phrase -> its source, for every module
#: of this package (checked by lmdbio.lab.lessons.figtext; text computed from the results needs none).
STATIC: dict[str, str] = {
    "5-95% band": "the model's band: 5-95% of the joint samples (lmdbio.lab.model.uncertainty)",
    "smaller": "lmdbio.lab.claims.magnitude's word, matched against claims.csv's magnitude column",
    "larger": "lmdbio.lab.claims.magnitude's word, matched against claims.csv's magnitude column",
}
