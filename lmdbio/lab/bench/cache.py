"""Cache preparation: make a point's records warm or cold on every node, and measure residency."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from lmdbio.waiting import polite_barrier

__all__ = ["EvictionWarning", "page_mask", "batch_positions", "warm", "prepare_cache",
           "measure_residency", "PageCache", "write_random_file", "cold_read_bw", "DiskProbe"]


class EvictionWarning(UserWarning):
    """Eviction left a cold point's data in the page cache: the point is not cold."""


def page_mask(offsets: np.ndarray, sizes: np.ndarray, npages: int) -> np.ndarray:
    """Bool per page: some byte of some record (offset, size) lies in it."""
    ps = mmap.PAGESIZE
    first = offsets.astype(np.int64) // ps
    last = (offsets.astype(np.int64) + np.maximum(sizes.astype(np.int64), 1) - 1) // ps
    diff = np.zeros(npages + 1, dtype=np.int64)
    np.add.at(diff, np.clip(first, 0, npages), 1)
    np.add.at(diff, np.clip(last + 1, 0, npages), -1)
    return np.cumsum(diff[:npages]) > 0


def batch_positions(first_batch: int, nbatches: int, batch_size: int, n: int) -> np.ndarray:
    """Record positions read by global batches first_batch .. first_batch+nbatches-1."""
    start = first_batch * batch_size
    return (start + np.arange(nbatches * batch_size, dtype=np.int64)) % n


def warm(path, offsets: np.ndarray | None = None, sizes: np.ndarray | None = None,
         chunk: int = 16 << 20) -> None:
    """Read the pages holding the given records (None: the whole file) once, so they are in
    the page cache."""
    from lmdbio.plan import plan_extents

    if offsets is None:
        ext_start, ext_len = [0], [os.path.getsize(path)]
    else:
        ext_start, ext_len, _ = plan_extents(offsets, sizes, max_gap=1 << 20)
        ext_start, ext_len = ext_start.tolist(), ext_len.tolist()
    buf = np.empty(chunk, dtype=np.uint8)
    mv = memoryview(buf)
    fd = os.open(path, os.O_RDONLY)
    try:
        for off, length in zip(ext_start, ext_len):
            end = off + length
            while off < end:
                got = os.preadv(fd, [mv[:min(chunk, end - off)]], off)
                if got <= 0:
                    break
                off += got
    finally:
        os.close(fd)


def _residency(path, offsets: np.ndarray | None, sizes: np.ndarray | None) -> tuple[float, float]:
    from lmdbio.lab import pagecache

    pages = pagecache.resident_pages(path)
    whole = float(pages.mean()) if len(pages) else 0.0
    if offsets is None:
        return whole, whole
    mask = page_mask(offsets, sizes, len(pages))
    return (float(pages[mask].mean()) if mask.any() else 0.0), whole


def _at(values: np.ndarray | None, positions: np.ndarray | None) -> np.ndarray | None:
    return None if values is None or positions is None else values[positions]


def measure_residency(comm, path: Path, leader: bool, cache: str, offsets: np.ndarray | None,
                      sizes: np.ndarray | None, positions: np.ndarray | None
                      ) -> tuple[float, float]:
    """Fraction of the records' pages (and of the file) resident, worst over nodes. Collective.

    Worst means the highest for a cold point and the lowest for a warm one;
    ``leader`` marks the one rank per page cache (node) that measures.
    Without ``offsets`` or ``positions`` the records are the whole file.
    """
    from mpi4py import MPI

    res = file_res = 1.0 if cache == "warm" else 0.0
    if leader:
        res, file_res = _residency(path, _at(offsets, positions), _at(sizes, positions))
    op = MPI.MAX if cache == "cold" else MPI.MIN
    return comm.allreduce(res, op=op), comm.allreduce(file_res, op=op)


def prepare_cache(comm, path: Path, leader: bool, cache: str, offsets: np.ndarray | None,
                  sizes: np.ndarray | None, positions: np.ndarray | None,
                  evict=None) -> tuple[float, float]:
    """Make the records at ``positions`` warm (read them) or the file cold (evict it). Collective.

    One rank per page cache (``leader``) does it for its node, on ``path``
    (the file as its node sees it). Without ``offsets`` or ``positions`` warm
    reads the whole file. ``evict`` replaces
    :func:`lmdbio.lab.pagecache.evict` (an emulated PFS evicts through its node view).
    Returns :func:`measure_residency` right after.
    """
    from lmdbio.lab import pagecache

    polite_barrier(comm)   # nobody is still reading
    if leader:
        if cache == "cold":
            (evict or pagecache.evict)(path)
        else:
            warm(path, _at(offsets, positions), _at(sizes, positions))
    out = measure_residency(comm, path, leader, cache, offsets, sizes, positions)
    polite_barrier(comm)
    return out


class PageCache:
    """A point's page cache on every node, made warm or cold the one way the lab does it.

    Warm: each node's cache leader reads the records of the batches asked
    for once (without a record index, the whole file); cold: it evicts the
    file from its node's view (through the storage setting's evictor: an
    emulated PFS's or a throttled device's node view). Residency is
    measured with mincore right after, worst over nodes, and kept as
    :attr:`resident` and :attr:`file_resident`.

    Args:
        comm: the point's communicator (every call is collective).
        storage: a :class:`~lmdbio.lab.bench.settings.Storage` (where the ranks read).
        dataset: LMDB directory or data.mdb.
        state: ``"warm"`` or ``"cold"``.
        records: ``(offsets, sizes)`` of the record index, or None (the whole file).
        plan: ``plan(first, count)``: the record positions of batches
            ``first .. first+count-1`` (with ``records``).
    """

    def __init__(self, comm, storage, dataset, state: str, *, records=None, plan=None):
        if state not in ("warm", "cold"):
            raise ValueError(f"cache must be 'warm' or 'cold', got {state!r}")
        self.comm, self.storage, self.state = comm, storage, state
        self.path = storage.rank_file(comm, dataset)
        self.leader = storage.is_cache_leader(comm)
        self.offsets, self.sizes = records if records is not None else (None, None)
        self.plan = plan
        self.evicted = False
        self.resident = self.file_resident = float("nan")

    def _positions(self, first: int, count: int | None):
        if self.offsets is None or self.plan is None or count is None:
            return None
        return self.plan(first, count)

    def _apply(self, first: int, count: int | None) -> tuple[float, float]:
        out = prepare_cache(self.comm, self.path, self.leader, self.state, self.offsets,
                            self.sizes, self._positions(first, count),
                            evict=self.storage.evictor(self.comm))
        self.resident, self.file_resident = out
        return out

    def prepare(self, first: int = 0, count: int | None = None) -> tuple[float, float]:
        """Warm the records of batches ``first .. first+count-1`` (None: every record), or
        evict the file; returns the residency after.

        Called before the source is built, a cold cache then stays as the
        source's setup and warm-up leave it (:meth:`before_timing`).
        """
        out = self._apply(first, count)
        self.evicted = self.state == "cold"
        return out

    def measure(self, first: int = 0, count: int | None = None) -> tuple[float, float]:
        """Residency of the records of batches ``first .. first+count-1`` and of the file."""
        return measure_residency(self.comm, self.path, self.leader, self.state, self.offsets,
                                 self.sizes, self._positions(first, count))

    def before_timing(self, first: int, count: int) -> tuple[float, float]:
        """Make the timed batches' records warm or cold; returns their residency.

        Warm reads them (again); cold evicts the file unless it was evicted
        before the source was built (then the point is cold from its setup
        on, and what the warm-up read stays, as it would in a training job).
        """
        if self.state == "cold" and self.evicted:
            return self.measure(first, count)
        return self._apply(first, count)


def write_random_file(path, nbytes: int, seed: int = 7) -> None:
    """``nbytes`` of random bytes (1 MiB blocks of one seed), flushed to the device: a scratch
    file for the disk microbenchmarks, with no holes or runs for the device to skip."""
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        done = 0
        while done < nbytes:
            n = min(1 << 20, nbytes - done)
            f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            done += n
        f.flush()
        os.fsync(f.fileno())


def cold_read_bw(path, nbytes: int | None = None, read: int = 4 << 20) -> float:
    """Bytes per second of one cold sequential pass of ``read``-byte preads over a file.

    The file is flushed and evicted first (:func:`lmdbio.lab.pagecache.evict`), so the
    pass measures the disk under it. The model's ``disk_bw`` microbenchmark
    and the sweep's same-sitting disk probe (:class:`DiskProbe`) both use it.
    """
    import time

    from lmdbio.lab.pagecache import evict

    nbytes = os.path.getsize(path) if nbytes is None else nbytes
    fd = os.open(path, os.O_RDONLY)
    try:
        evict(path)
        t0 = time.perf_counter()
        done = 0
        while done < nbytes:
            got = len(os.pread(fd, min(read, nbytes - done), done))
            if got == 0:
                raise ValueError(f"{path} is shorter than the {nbytes} bytes to read")
            done += got
        return nbytes / (time.perf_counter() - t0)
    finally:
        os.close(fd)


class DiskProbe:
    """The disk's cold sequential bandwidth measured just before each cold local point.

    A local disk's throughput drifts (on a VM, by tens of percent within
    minutes), so a bandwidth measured once, at calibration time, cannot say
    what the disk gave a sweep's points. The probe is a 64 MiB scratch file
    of random bytes, written once beside the dataset (same file system) and
    read cold (:func:`cold_read_bw`) before each cold point: the rows carry
    it as ``disk_probe_bw``. It reads no dataset page and runs before the
    point's own eviction, so the point is as cold as without it.
    """

    def __init__(self, nbytes: int = 64 << 20):
        self.nbytes = nbytes
        self._files: dict[int, Path] = {}

    def _file(self, dataset) -> Path | None:
        home = Path(dataset)
        where = (home.parent if home.is_file() else home).parent
        dev = os.stat(where).st_dev
        if dev not in self._files:
            import tempfile

            try:
                fd, name = tempfile.mkstemp(prefix=".lmdbio-disk-probe-", dir=where)
            except OSError:
                return None   # a read-only dataset folder: no probe, the rows say NaN
            os.close(fd)
            self._files[dev] = Path(name)
            write_random_file(name, self.nbytes)
        return self._files[dev]

    def measure(self, dataset) -> float:
        f = self._file(dataset)
        return cold_read_bw(f, self.nbytes) if f is not None else float("nan")

    def close(self) -> None:
        for f in self._files.values():
            f.unlink(missing_ok=True)
        self._files.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
