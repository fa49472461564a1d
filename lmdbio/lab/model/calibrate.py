"""Calibration: microbenchmarks of this machine's CPU-side costs (never the papers' numbers).

``run_calibration()`` measures them on a small scratch LMDB it writes itself, in well under a
minute (:mod:`lmdbio.lab.model.microbench`). What each value measures and how is :data:`HOW`,
written into ``calibration.json`` beside the values and their units; ``meta.json`` holds the
host, versions and commit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from lmdbio.errors import LmdbioError
from ..bench.cache import write_random_file
from ..paths import REPO
from .microbench import (FIXED_VARIANTS, FLOOR_PER_BYTE_S, FLOOR_S, MMAP_THRESHOLD_MAX,  # noqa: F401
                         PAGE, _copy_costs, _cursor_step, _disk, _handoff, _mean_value_bytes, _page_fault,
                         _pfs_inflight, _plan_cost, _pread_costs, _queue_limits, _read_overlap)

__all__ = ["Calibration", "run_calibration", "save_calibration", "load_calibration",
           "DEFAULT_DIR"]

DEFAULT_DIR = REPO / "data" / "results" / "model_calibration"


@dataclass(frozen=True)
class Calibration:
    """Measured costs of this machine, in seconds (bytes/s for ``disk_bw``)."""

    cores: int
    cursor_step_s: float
    page_fault_s: float
    copy_record_s: float
    memcpy_byte_s: float
    pread_call_s: float
    pread_byte_s: float
    plan_record_s: float
    handoff_s: float
    mpi_alpha_s: float
    mpi_beta_s: float
    member_batch_s: float
    member_crowded_s: float
    crowd_per_core: int
    crowd_cpu_factor: float
    disk_latency_s: float
    disk_bw: float
    disk_readahead: int
    disk_max_request: int
    #: Mean CPU seconds of one 256-record read_batch() per variant family (None: not measured).
    batch_cpu_s: dict | None = None
    #: The same for 256 records of ``large_record_bytes`` each (None: not measured).
    batch_cpu_large_s: dict | None = None
    #: The same for 16 records of ``large_record_bytes`` each (None: not measured).
    batch_cpu_large16_s: dict | None = None
    large_record_bytes: int = 0
    #: Share of the CPU between cold explicit reads the local disk's readahead hides (None: not
    #: measured; the model then takes readahead to hide all of it).
    disk_read_overlap: float | None = None
    #: Effective explicit-read depth on the emulated PFS (NaN: not measured, see the source).
    pfs_inflight: float = float("nan")
    #: How pfs_inflight was measured (profile, reads, spread), or why it was skipped.
    pfs_inflight_source: str = "not measured (calibration written before this benchmark existed)"

    UNITS = {"cores": "count", "disk_bw": "bytes/s", "memcpy_byte_s": "s/byte",
             "pread_byte_s": "s/byte", "mpi_beta_s": "s/byte", "disk_readahead": "bytes",
             "disk_max_request": "bytes", "crowd_per_core": "ranks per core",
             "pfs_inflight": "requests in flight (effective)", "pfs_inflight_source": "text",
             "disk_read_overlap": "fraction", "large_record_bytes": "bytes"}
    #: Fields that may be absent from an older calibration.json (their defaults apply).
    OPTIONAL = ("pfs_inflight", "pfs_inflight_source", "batch_cpu_s", "batch_cpu_large_s",
                "batch_cpu_large16_s", "large_record_bytes", "disk_read_overlap")
    INTS = ("cores", "disk_readahead", "disk_max_request", "crowd_per_core", "record_bytes",
            "large_record_bytes")
    #: Fixed seconds of one read_batch() per variant (two-record batches, P = 1): the Python
    #: cost of each locate/fetch path apart from its per-record work.
    batch_s: dict = None
    #: Seconds per record of read_batch() per variant at P = 1: (t(256) - t(2)) / 254 on the
    #: scratch CIFAR-10 set, whose values are ``record_bytes`` long (all per-record work).
    record_s: dict = None
    record_bytes: int = 0

    def fixed_batch_s(self, variant: str) -> float:
        return float(self.batch_s[variant])

    def per_record_s(self, variant: str) -> float:
        """CPU seconds per record of a reader's read_batch(): the per-call median's slope, or,
        where ``batch_cpu_s`` was measured, its mean CPU per 256-record batch less the fixed cost
        (the whole per-batch Python, slow calls included), whichever is larger."""
        r = float(self.record_s[variant])
        if self.batch_cpu_s and variant in self.batch_cpu_s:
            r = max(r, (float(self.batch_cpu_s[variant]) - self.fixed_batch_s(variant)) / 254)
        return r

    def record_cpu_s(self, variant: str, record_bytes: float, per_byte_s: float,
                     batch_bytes: float | None = None) -> float:
        """CPU seconds per record of a reader's read_batch() for records of ``record_bytes``.

        Where both batch CPU measurements exist: linear in the record size
        between ``record_bytes`` (``per_record_s``) and ``large_record_bytes``
        (a large-record batch's mean CPU less the fixed cost, per record), and
        beyond them; the large-record batch is the one on the same side of
        :data:`MMAP_THRESHOLD_MAX` as ``batch_bytes`` (the reader's buffer per
        read; None: the 256-record one). Otherwise ``per_record_s`` plus the
        size difference times ``per_byte_s`` (the copy's or the pread's
        microbenchmark).
        """
        r = self.per_record_s(variant)
        big, n = self.batch_cpu_large_s or {}, 256
        small = self.batch_cpu_large16_s or {}
        if batch_bytes is not None and batch_bytes <= MMAP_THRESHOLD_MAX and variant in small:
            big, n = small, 16
        if variant in big and self.large_record_bytes > self.record_bytes:
            r_big = (float(big[variant]) - self.fixed_batch_s(variant)) / n
            span = self.large_record_bytes - self.record_bytes
            slope = max(FLOOR_PER_BYTE_S, (r_big - r) / span)
            return r + (float(record_bytes) - self.record_bytes) * slope
        return r + (float(record_bytes) - self.record_bytes) * per_byte_s

    def cpu_factor(self, ranks_per_core: float) -> float:
        """How much a reader's CPU per batch grows with ranks per core (cache and scheduler
        effects): 1 at one rank per core, ``crowd_cpu_factor`` at ``crowd_per_core``, linear
        between, flat beyond."""
        lo, hi = 1.0, float(max(2, self.crowd_per_core))
        x = min(max(float(ranks_per_core), lo), hi)
        return 1.0 + (max(1.0, self.crowd_cpu_factor) - 1.0) * (x - lo) / (hi - lo)

    def member_s(self, ranks_per_core: float) -> float:
        """A member's CPU per batch with this many ranks per core: linear between the
        uncrowded (1 per core) and the crowded measurement, flat beyond them."""
        lo, hi = 1.0, float(max(2, self.crowd_per_core))
        x = min(max(float(ranks_per_core), lo), hi)
        return self.member_batch_s + (self.member_crowded_s - self.member_batch_s) * (x - lo) / (hi - lo)

    def units(self) -> dict:
        return {f.name: self.UNITS.get(f.name, "s") for f in fields(self)}


# ------------------------------------------------------------------ driver

def run_calibration(workdir: str | os.PathLike | None = None, *, records: int = 4000,
                    progress: bool = True) -> Calibration:
    """Run every microbenchmark here (about 30-60 s) and return the costs."""
    from ..cluster import mpiexec
    from lmdbio.datasets import make_dataset

    base = Path(workdir) if workdir else REPO / "build"
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="model-calibration-", dir=base))

    def say(msg):
        if progress:
            print(f"[calibrate] {msg}", flush=True)
    try:
        db = make_dataset(tmp / "cifar10", preset="cifar10", records=records, progress=False)
        # Both copy sets larger than a last-level cache: copies run at memory speed, as a batch's.
        many = make_dataset(tmp / "cifar10-copy", preset="cifar10", records=24000, progress=False)
        scratch = tmp / "scratch.bin"
        scratch_bytes = 64 << 20
        write_random_file(scratch, scratch_bytes, seed=0)
        v: dict = {"cores": os.cpu_count() or 1}
        say("cursor step")
        v["cursor_step_s"] = _cursor_step(Path(db), records)
        say("copy out of the map")
        big = make_dataset(tmp / "imagenet", preset="imagenet", records=384, progress=False)
        v["copy_record_s"], v["memcpy_byte_s"] = _copy_costs(Path(many), Path(big))
        say("page fault")
        v["page_fault_s"] = _page_fault(scratch, 32 << 20)
        say("pread per call and per byte")
        v["pread_call_s"], v["pread_byte_s"] = _pread_costs(scratch, scratch_bytes)
        say("extent planning")
        v["plan_record_s"] = _plan_cost()
        say("futex hand-off")
        v["handoff_s"] = _handoff()
        say("MPI ping-pong and read_batch() fixed costs (mpiexec -n 2)")
        out = tmp / "mpi.json"
        cmd = [mpiexec(), "-n", "2", sys.executable, "-m", "lmdbio.lab.model.microbench",
               "--mpi-part", str(many), str(out), str(big)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 or not out.exists():
            raise LmdbioError("the MPI calibration (mpiexec -n 2) failed: "
                              + (proc.stderr or proc.stdout)[-800:]
                              + "; check that `mpiexec -n 2 python -c 'import mpi4py.MPI'` works")
        v.update(json.loads(out.read_text()))
        crowd = min(64, 8 * v["cores"])   # eight ranks per core (at most 64 ranks)
        v["crowd_per_core"] = max(1, crowd // v["cores"])
        cmd = [mpiexec(), "-n", str(crowd), sys.executable, "-m", "lmdbio.lab.model.microbench",
               "--crowded-part", str(db), str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise LmdbioError(f"the MPI calibration (mpiexec -n {crowd}) failed: "
                              + (proc.stderr or proc.stdout)[-800:])
        v.update(json.loads(out.read_text()))
        v["crowd_cpu_factor"] = max(1.0, v["reader_crowded_cpu_s"] / v["reader_solo_cpu_s"])
        say("cold disk")
        v["disk_latency_s"], v["disk_bw"] = _disk(scratch, scratch_bytes)
        v["disk_readahead"], v["disk_max_request"] = _queue_limits(scratch)
        v["disk_read_overlap"] = _read_overlap(scratch, scratch_bytes)
        say("explicit-read depth on the emulated PFS (FUSE mount of gpfs-2017)")
        v["pfs_inflight"], v["pfs_inflight_source"] = _pfs_inflight(tmp)
        say(f"  pfs_inflight = {v['pfs_inflight']:.3f}")
        v["record_bytes"] = _mean_value_bytes(Path(db))
        v["large_record_bytes"] = _mean_value_bytes(Path(big))
        return _build(v)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


HOW = {
    "cursor_step_s": "cursor.next() over a 4,000-record CIFAR-10-like LMDB, warm, best of 15 walks",
    "page_fault_s": "fresh mmap of a cached 32 MiB file, one byte read per page, minus the same strided read of mapped memory",
    "copy_record_s": "lmdbio.pipeline.fetch.copy_values into a fresh buffer per batch (128 CIFAR-10 or 64 ImageNet-size values, 12.5 MB: short enough to run uninterrupted) from sets (24,000 and 384 values) of about 75 MB, warm, 10th percentile of single batches: t = n a + bytes b, a",
    "memcpy_byte_s": "the same fit's b, seconds per byte copied out of the map",
    "pread_call_s": "a cached 4 KiB preadv minus 4 KiB x pread_byte_s (best of 15)",
    "pread_byte_s": "slope between cached 1 MiB and 8 MiB preadv times into a 64 MiB buffer (best of 15)",
    "plan_record_s": "lmdbio.plan.plan_extents over 200,000 records, per record",
    "handoff_s": "futex ping-pong between two processes (lmdbio.waiting), one way",
    "mpi_alpha_s": "MPI ping-pong of 8 bytes between two ranks, one way",
    "mpi_beta_s": "(4 MiB ping-pong one way - alpha) / 4 MiB",
    "batch_s": "read_batch() of each variant at P = 1, 2 records per batch (10th percentile of 400 single calls)",
    "record_s": "per record: (read_batch() with 256 records - with 2) / 254 on the 24,000-record CIFAR-10 set (74 MB, larger than a cache), warm (10th percentiles of single calls)",
    "record_bytes": "mean value size of the CIFAR-10 set record_s was measured on",
    "batch_cpu_large_s": "the same for 256-record batches of ImageNet-size values (mean CPU over 24 calls, after 20 untimed) on the 384-record ImageNet set: about 50 MB a batch",
    "batch_cpu_large16_s": "the same with 16-record batches (mean CPU over 96 calls, after 20 untimed): about 3 MB a batch, below glibc's largest mmap threshold (32 MiB), so the buffer is reused",
    "large_record_bytes": "mean value size of that ImageNet set",
    "batch_cpu_s": "the Reader's per-batch Python: mean CPU time (process_time over 300 calls) of one 256-record read_batch() per variant at P = 1 on the 24,000-record CIFAR-10 set, warm, per-phase stats on (as lmdbio bench runs it)",
    "member_batch_s": "CPU time (process_time) of a member's read_batch() in a 2-rank group",
    "member_crowded_s": "the same, mean over the members of one group of crowd_per_core ranks per core",
    "disk_latency_s": "256 random 4 KiB preads of an evicted 64 MiB scratch file",
    "disk_bw": "sequential 4 MiB preads of the evicted scratch file",
    "disk_read_overlap": "cold 1 MiB preads of the evicted 64 MiB scratch file back to back, alone, a busy wait of the same total alone, and both interleaved: (t_reads + t_cpu - t_both) / min(t_reads, t_cpu), median of 3, within 0-1: the CPU between explicit reads the readahead hides",
    "cores": "os.cpu_count()",
    "crowd_cpu_factor": "a reader's CPU per read_batch() in that crowded group / alone (2-record batches, lmdbio-lmm-dio-prov)",
    "crowd_per_core": "ranks per core of the crowded hand-off measurement (8, at most 64 ranks)",
    "disk_readahead": "read_ahead_kb of the scratch file's block device (sysfs); also mmap's read-around",
    "disk_max_request": "max_sectors_kb of that device (sysfs): the largest request the kernel sends",
    "pfs_inflight": "cold 4 MiB buffered preadv through an lmdbio.lab.pfs mount of gpfs-2017 (evicted before each of 8 reads): sum of the requests' unqueued service times (daemon counters) / wall time, median; the explicit-read depth for storage pfs:* (see pfs_inflight_source)",
    "pfs_inflight_source": "how pfs_inflight was measured, or why it was skipped",
}


def save_calibration(cal: Calibration, out_dir: str | os.PathLike = DEFAULT_DIR,
                     config: dict | None = None) -> Path:
    """Write ``calibration.json`` and ``meta.json`` into ``out_dir``."""
    from lmdbio.lab.meta import write_results_meta

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    values = asdict(cal)
    if values["pfs_inflight"] != values["pfs_inflight"]:   # NaN (not measured): JSON null
        values["pfs_inflight"] = None
    (out / "calibration.json").write_text(json.dumps(
        {"values": values, "units": cal.units(), "how": HOW}, indent=2) + "\n")
    write_results_meta(out, config or {}, files=["calibration.json", "requests_per_read.csv", "walk_reads.csv", "leaf_cut.csv"],
                       note="microbenchmarks on this machine only; no number from the papers")
    return out


_BATCH_CPU = ("batch_cpu_s", "batch_cpu_large_s", "batch_cpu_large16_s")


def _build(values: dict) -> Calibration:
    kw = {}
    for fl in fields(Calibration):
        if fl.name in Calibration.OPTIONAL and fl.name not in values:
            continue   # an older calibration: the field's default
        x = values[fl.name]
        kw[fl.name] = ({k: float(x[k]) for k in FIXED_VARIANTS} if fl.name in ("batch_s", "record_s")
                       else None if fl.name in _BATCH_CPU and not x
                       else {k: float(x[k]) for k in FIXED_VARIANTS} if fl.name in _BATCH_CPU
                       else str(x) if fl.name == "pfs_inflight_source"
                       else float("nan") if fl.name == "pfs_inflight" and x is None
                       else None if fl.name == "disk_read_overlap" and x is None
                       else int(x) if fl.name in Calibration.INTS else float(x))
    return Calibration(**kw)


def load_calibration(path: str | os.PathLike = DEFAULT_DIR) -> Calibration:
    """Read a calibration written by :func:`save_calibration` (a directory or the JSON file)."""
    p = Path(path)
    f = p / "calibration.json" if p.is_dir() else p
    if not f.exists():
        raise LmdbioError(f"no calibration at {f}; run `lmdbio model calibrate` first "
                          f"(about a minute)")
    try:
        values = json.loads(f.read_text())["values"]
        return _build(values)
    except (KeyError, TypeError, ValueError) as exc:
        raise LmdbioError(f"{f} is not a calibration this version reads ({exc}); "
                          "rerun `lmdbio model calibrate`") from None
