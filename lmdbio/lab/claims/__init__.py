"""The papers' claims: one registry, each with a quantity, a criterion and the paper's own factor.

Every claim is judged in five settings, each from its own results folder:

- ``local``: measured on this machine's local disk (``NN_name/summary.csv`` or ``rows.csv``);
- ``gpfs``: measured through the emulated GPFS, ``lmdbio.lab.pfs`` (``NN_name/gpfs/``);
- ``throttled``: measured on throttled loop devices, ``lmdbio.lab.storage`` (``NN_name/throttled/``);
- ``shared``: measured on one shared throttled target (``make bench-shared``), its sweep's
  points copied into ``NN_name/shared/`` by :func:`shared_results`;
  the claims the sweep cannot judge are ``not measured`` (:data:`SHARED_NOT_MEASURED`);
- ``model``: ``lmdbio model predict --platform bebop`` at the papers' scale
  (``model_prediction/predictions.csv``, its joint samples ``joint.csv`` and the
  poster-axis check of ``absolute.csv``).

The verdicts are defined here once and used by every table:

- **direction** (``verdict``), measured: ``yes`` only when the smallest repeat
  clears the threshold, ``no`` only when the largest is below it,
  ``inconclusive`` otherwise (one repeat: judged from it, and said so);
  model: the band is 5-95% of the joint samples (every estimate drawn at once
  over its range, :mod:`lmdbio.lab.model.uncertainty`, ``joint.csv``); ``yes``/``no``
  only when every sample is on one side of the threshold, else ``open``,
  naming the estimates the samples follow most; ``not judged by the model``
  when the setup fixes the answer (two variants that are one run by
  construction, or an I/O share that even the storage's aggregate bandwidth
  decides). Model rows come one per workload wherever both are modelled;
- **magnitude**, against the paper's own factor: measured, ``reproduced``
  (within 2x of it), ``smaller``, ``larger``; model, from its band
  (:func:`band_word`): ``consistent`` (the band overlaps [f/2, 2f]),
  ``uninformative`` (the band spans more than 10x), ``smaller``, ``larger``;
  ``no paper factor`` where the paper states none.

Every ``why`` is built from the data: the verdict's numbers, then the phase
(measured) or the mechanism (model) that dominates each variant compared.

A repeats directory (``results_root/repeats/*.csv``), when present, supplies
the measured settings' repeats; see :func:`read_repeats` for the format.

``python -m lmdbio.lab.claims`` rewrites every ``NN_name/shared/`` from the bench-shared sweep,
then writes ``data/results/claims.csv``,
``data/results/claims_split.csv`` (the split by optimization against the
papers' factors), the table between the markers in ``figures/README.md`` and
the claims summary between its markers in ``docs/claims.md``.

Modules: :mod:`.verdicts` (the verdicts and their words), :mod:`.values` (measured
points and ratios), :mod:`.bands` (the model's values and bands), :mod:`.registry` (the
claims, where their results are), :mod:`.shared` (the shared sweep's folders),
:mod:`.judge` (claims.csv's rows), :mod:`.render` (Markdown tables and the README
blocks), :mod:`.split` (claims_split.csv), :mod:`.cli`.
"""

from __future__ import annotations

from .verdicts import (SETTINGS, SETTING_LABELS, COLUMNS, DETAILS, NOT_MEASURED, VERDICTS, FULL,
                       NO_FACTOR, FACTOR_TOLERANCE, MODEL_DIR, REPEATS_DIR, SHORT, direction,
                       band_verdict, magnitude, UNINFORMATIVE, NOT_JUDGED, band_word)
from .values import read_repeats
from .bands import MODEL_BAND, DATASET_OF
from .registry import (Claim, CIFAR, IMAGENET, CLAIMS, TRAINING, SHARED_NOT_MEASURED, claim,
                       setting_dir, resolve, CHECKS)
from .shared import SHARED_SWEEP, SHARED_NOTEBOOKS, shared_results
from .judge import series, axis_rows, evaluate, write
from .render import (CLAIMS_DOC, MARK_START, MARK_END, render, show, readme_table,
                     render_validation, render_split, render_claims_summary, rendered_blocks,
                     update_readme)
from .split import SPLIT, split_table, write_split
from .cli import compare_runs, main
from ..scales import COMMITTED_RESULTS

__all__ = ["Claim", "CLAIMS", "claim", "SETTINGS", "SETTING_LABELS", "COLUMNS", "DETAILS",
           "VERDICTS", "FULL", "FACTOR_TOLERANCE", "NO_FACTOR", "MODEL_DIR", "REPEATS_DIR",
           "SHARED_NOT_MEASURED", "NOT_MEASURED", "SHARED_SWEEP", "SHARED_NOTEBOOKS",
           "shared_results", "setting_dir", "resolve", "series", "direction", "band_verdict",
           "magnitude", "band_word", "axis_rows", "CHECKS", "read_repeats", "compare_runs",
           "evaluate", "write", "render", "show", "readme_table", "update_readme", "CLAIMS_DOC",
           "rendered_blocks", "render_validation", "render_split", "render_claims_summary", "SPLIT",
           "split_table", "write_split", "TRAINING", "main",
           # named by the lessons, the plots and the tests
           "SHORT", "UNINFORMATIVE", "NOT_JUDGED", "MODEL_BAND", "DATASET_OF", "CIFAR", "IMAGENET",
           "MARK_START", "MARK_END", "COMMITTED_RESULTS"]
