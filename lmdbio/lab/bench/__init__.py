"""Benchmarks: one experiment point on any communicator, sweeps under mpiexec, tidy results.

One job per module:

- :mod:`~lmdbio.lab.bench.limit`: ``raw``, the limit every variant is measured against.
- :mod:`~lmdbio.lab.bench.cache`: warm or cold page caches before a point, and residency.
- :mod:`~lmdbio.lab.bench.settings`: where a sweep's datasets live (local, an emulated
  parallel file system mounted for the sweep with ``--storage pfs:PROFILE``, or
  throttled loop devices, one per virtual node, with ``--storage throttle:PROFILE``).
- :mod:`~lmdbio.lab.bench.timed`: :func:`~lmdbio.lab.bench.timed.time_batches`, the one timed
  loop (warm-up, cache made warm or cold, timed batches) of any
  :class:`~lmdbio.lab.bench.timed.Source`: the bench's points, the notebooks' read timelines
  and the experiments beyond the papers all measure with it.
- :mod:`~lmdbio.lab.bench.point`: :func:`run_point`, one point on a communicator
  (mpiexec's ``COMM_WORLD`` or an ipyparallel engine's), tidy rows on rank 0.
- :mod:`~lmdbio.lab.bench.stats`: :func:`summarize`, the one speedup definition
  (:func:`ratio_of_medians`), :func:`targets`, :func:`format_report`.
- :mod:`~lmdbio.lab.bench.sweep`: :func:`run_sweep` launches ``mpiexec -n P python -m
  lmdbio.lab.bench _point`` per point with a timeout, so a crashed or hung point is
  recorded as ``status="failed"`` and the sweep goes on; results files.
- :mod:`~lmdbio.lab.bench.cli`: ``lmdbio bench``.

Definitions (also in docs/bench.md, "How the bench measures"):

- **The limit (raw).** Every rank ``pread``s its own records of each batch,
  coalesced as far as the batch allows (one request per run of records that
  lie together in the file), into its own rotating buffers with as many slots
  as the Reader's ring and the same total size per node. Extents are planned
  from the record index in setup, so the timed loop only reads. No LMDB, no
  locating, no hand-off, no synchronization. ``fraction_of_limit`` is a
  variant's throughput over raw's at the same point.
- **Throughput** counts records delivered to all ranks per second of wall
  time over the timed batches: the ranks leave a barrier, run the timed
  iterations, and the wall is the longest time any rank took. CPU time
  (getrusage, user + system) covers the same span, summed over ranks.
- **Setup** is the Reader's construction (index pass, shared memory, ...),
  the longest over ranks (``setup_s``); ``first_batch_s`` adds the first
  batch. ``epoch_records_per_s`` is the timed records over ``setup_s +
  wall_s``: what a run that starts from nothing sees.
- **Speedup** is one thing everywhere (bench, report, plots): the ratio of
  the median records/s over repeats, at the same point (dataset, cache,
  P, batch, ...). See :func:`ratio_of_medians`.
- **Cache state** is prepared before the Reader exists: warm reads the
  records of every batch the point will read (through each node's view),
  cold evicts the file on every node (``posix_fadvise(DONTNEED)``), so a cold
  point is cold from construction on (index pass included). The timed
  window starts at a chunk boundary (warmup rounded up to the Reader's
  coalescing factor), so no timed batch comes from a chunk read before.
- **Training loop** (``lmdbio bench --compute SECONDS``, DLIO's and MLPerf
  Storage's report): each rank computes SECONDS per step; AU (compute /
  wall, mean over ranks), samples/s and MB/s (sums over ranks) cover each
  rank's timed steps after its first (DLIO's ``exclude_start_steps``), from
  the per-step timings it recorded; the report gives median [min-max] over
  repeats per variant and P. See :func:`summarize`.
- **Memory**: RssAnon, RssFile and RssShmem (:func:`lmdbio.metrics.memory`)
  of each rank at the end of the timed loop; the summary has the largest.
"""

from .cache import EvictionWarning
from .limit import RAW, RawReader
from .point import run_point
from .stats import (MEMORY_COLUMNS, POINT_KEYS, SUMMARY_COLUMNS, failed_row, format_report,
                    limit_violations, ratio_of_medians, summarize, targets, training_report)
from .sweep import (BASELINES, make_points, read_summary, run_point_subprocess, run_sweep, variant_names,
                    write_results)
from .cli import add_bench_parser
from lmdbio.lab.meta import host_meta

__all__ = [
    "RAW", "POINT_KEYS", "SUMMARY_COLUMNS", "variant_names", "run_point", "summarize",
    "write_results", "read_summary", "format_report", "targets", "make_points", "run_sweep",
    "run_point_subprocess", "add_bench_parser", "EvictionWarning", "RawReader", "failed_row",
    "ratio_of_medians", "limit_violations", "host_meta", "BASELINES", "MEMORY_COLUMNS",
    "training_report",
]
