"""The differential option matrix: every Reader option combination, checked against py-lmdb.

One check per combination (:func:`check_combination`, on every rank of one
``mpiexec`` job): build a Reader, ``read_batch()`` twice, read epoch 0 whole
(``for b in reader``), ``read_batch()`` twice, read epoch 1 whole
(``reader.epoch(1)``), break out of epoch 2 after one or two batches and drop
its generator, ``read_batch()`` twice, close. Every delivered record's bytes
must equal py-lmdb's value at the position the batch names (``b.indices``, in
key order), and every held batch is checked again after the rank's next read
(a batch stays valid until the rank's second following read). With
``prefetch``, the members of a node reader's group stop for a while after the
second batch of epoch 1 (:data:`STALL_BATCHES` of their batch times: a member
computing longer than its reader), then check both batches they hold: a reader
that reads ahead meanwhile must not overwrite them. They stop where an epoch
can outlast the reader's shared slots (CIFAR-size: 40 batches, up to 16
slots; ImageNet-size: 5 batches, 4 slots); the other record kinds' epochs are
shorter than their slots. Rank 0 then checks the indices gathered from every
rank (:func:`merge_ranks`): the stream batches
before, between and after the epochs are consecutive global batches of the
endless stream (batch t: positions ``(t*B + j) mod N``), the same on every
rank, and the first two are batches 0 and 1; each epoch holds every record
exactly once under ``"short"``, every record plus ``B - N mod B`` repeats
under ``"pad"``, the records of the full batches only under ``"drop"``; a
file-order epoch's batch i holds positions ``i*B ..``, a shuffled epoch is
not in file order and differs from the next one. Invalid combinations must
raise the error :data:`REFUSALS` names, on every rank. A combination that
delivers right but spends about ``LMDBIO_TIMEOUT`` (:data:`PEER_TIMEOUT_S`) in
one phase fails too: a rank waited out a peer's timeout on the way.

Dimensions (:data:`DIMENSIONS`): the 9 named variants plus ``auto``;
``prefetch`` 0/1/3; ``shuffle`` False/``"window"``/``"shard"``; ``last_batch``
short/pad/drop; the topologies of :func:`topologies` (one node, P/2 and P/4
ranks per virtual node, 1 or 2 readers per node where a node has 2 ranks or
more); records CIFAR-size, ImageNet-size, mixed (0 B to 200 KB, overflow
pages) and encoded JPEG; with or without a provenance sidecar (without: as
Caffe's ``convert_imageset`` leaves a database, read with
``build_provenance=False``); N a multiple of B, or not with
``gcd(N, B) = B/2 > B/P``; ``coalesce_bytes`` 16 KiB or the default.
B = 32 (ImageNet-size: 64; :data:`BATCHES`). At P = 4 the raw cross product
is 43,200 combinations; :func:`full_matrix` keeps 6,189.

Uneven layouts (:func:`uneven_layouts`): reader groups that serve different
numbers of ranks (a last virtual node smaller than the others, readers that
do not divide a node; at P = 4: groups of 2, 1 and 1 on one node, nodes of 3
and 1 with one or two readers), with a third ``coalesce_bytes`` of 1 MiB that
gives each group its own chunk size (:data:`MEDIUM_COALESCE`): COAL and STAG
must still agree on one (issue 44's F20 and F21, :data:`UNEVEN_REGRESSIONS`).
:func:`uneven_groups` covers them all-pairs.

What :func:`effective` collapses, so that each Reader setting is read once
(the full run keeps one combination per effective setting):

- ``last_batch`` when N is a multiple of B: the three policies cut no batch.
- the topology on per-rank variants (``lmdb``, ``lmdb-get``, ``lmdbio-direct``,
  ``auto`` where it picks one): only LMM variants build reader groups.
- ``coalesce_bytes`` where it does not change the variant's options (only
  COAL variants, ``lmdbio-direct`` and ``auto`` picking either, coalesce).
- the sidecar on variants that never read it (all but PROV, ``lmdbio-direct``
  and ``auto`` picking them, or ``auto`` choosing by it on a shared file system).
- an expected refusal (:data:`REFUSALS`) keeps only the variant, the fields
  its rule looks at and the topology; every other option takes its first value.
  A rule that stops holding (the lead makes the combination work) shows up as
  a mismatch, and its combinations expand again once the rule is removed.

``auto`` is resolved by the file system of the data sets (:func:`auto_choice`):
on a local disk it reads as ``lmdbio-direct``.

Runs: :func:`fast_sample` (:data:`REGRESSIONS`, then :func:`all_pairs`: every
pair of effective option values at least once, then :data:`UNEVEN_REGRESSIONS`;
``make test``), a seeded random sample (:func:`random_sample`; ``make check``)
and the whole deduplicated cross product at P = 4 with an all-pairs cover at
P = 8 on four virtual nodes of two ranks, a shape P = 4 lacks
(:func:`four_nodes_of_two`), and the uneven layouts' cover (``make
test-matrix``, which writes
``data/results/option_matrix/summary.csv``). :func:`run` runs many
combinations per ``mpiexec`` job (``tests/mpi/matrix_run.py``); the driver
prints a line when a combination starts and one when it ends, so a combination
that hangs (no line for ``hang_s`` seconds) or ends the job is named, recorded
as ``hang`` or ``crash``, and the job restarts after it. ``python -m
lmdbio.lab.testing.matrix {pairs,random,uneven,full} [--where FIELD=V1,V2]``
runs a selection and prints the failures grouped by cause, each group with
the command that reruns it.

Modules: :mod:`.combos` (a combination, the dimensions), :mod:`.refusals`,
:mod:`.pool` (collapsing), :mod:`.samples` (covers, regressions, selections),
:mod:`.datasets`, :mod:`.check` (one rank), :mod:`.merge` (rank 0's verdict),
:mod:`.runner` (mpiexec jobs), :mod:`.report` (summary, failures), :mod:`.cli`.
"""

from __future__ import annotations

from .check import check_combination
from .cli import main
from .combos import (BATCHES, COALESCE_BYTES, DIMENSIONS, MEDIUM_COALESCE, PEER_TIMEOUT_S,
                     SMALL_COALESCE, STALL_BATCHES, STALL_MAX_S, STALL_RECORDS, VARIANT_NAMES,
                     Combo, dataset_records, dimensions, topologies, uneven_layouts)
from .datasets import make_datasets
from .merge import break_after, combo_fields, lost_row, merge_ranks, verdict
from .pool import effective, full_matrix, raw_product
from .refusals import (CURSOR_WALKS, PROV_VARIANTS, REFUSALS, SIDECAR_READERS, Refusal,
                       auto_choice, expected_refusal)
from .report import SUMMARY_COLUMNS, failure_report, group_failures, rerun_command, write_summary
from .runner import DRIVER, ROOT, run, run_job
from .samples import (FIELDS, REGRESSIONS, UNEVEN_REGRESSIONS, all_pairs, fast_sample,
                      four_nodes_of_two, pair_set, random_sample, selection, uneven_groups)

__all__ = ["Combo", "Refusal", "REFUSALS", "DIMENSIONS", "BATCHES", "SMALL_COALESCE",
           "MEDIUM_COALESCE", "COALESCE_BYTES", "REGRESSIONS", "UNEVEN_REGRESSIONS",
           "VARIANT_NAMES", "CURSOR_WALKS", "PROV_VARIANTS", "SIDECAR_READERS", "PEER_TIMEOUT_S",
           "STALL_BATCHES", "STALL_MAX_S", "STALL_RECORDS", "ROOT", "DRIVER", "FIELDS",
           "SUMMARY_COLUMNS", "topologies", "uneven_layouts", "dimensions", "raw_product",
           "effective", "full_matrix", "all_pairs", "pair_set", "fast_sample", "random_sample",
           "four_nodes_of_two", "uneven_groups", "selection", "expected_refusal", "auto_choice",
           "make_datasets", "dataset_records", "check_combination", "merge_ranks", "combo_fields",
           "break_after", "lost_row", "verdict", "run", "run_job", "write_summary",
           "rerun_command", "group_failures", "failure_report", "main"]
