"""What the optimizations do, seen in the readers' counters and opens, never in times: DM walks
only its own records and speculates ahead, COAL divides read calls, STAG's groups never
overlap, ranks that are not readers never open the database."""

import os
import shutil
import sys
from collections import defaultdict

import lmdb
import pytest

import lmdbio
from conftest import on_rank_0, sizes
from lmdbio import Options
from lmdbio.lab.pagecache import evict

pytestmark = pytest.mark.mpi


def run(comm, db, B: int, batches: int, **kw) -> tuple[list[dict], list[dict], int]:
    """Read ``batches`` batches: (this rank's stats rows, every rank's, COAL's factor)."""
    with lmdbio.Reader(db, B, comm, build_provenance=True, **kw) as r:
        for _ in range(batches):
            r.read_batch()
        mine = r.stats()
        coalesce = getattr(r, "coalesce", 1)
    return mine, [x for rows in comm.allgather(mine) for x in rows], coalesce


def walked(rows: list[dict]) -> int:
    return sum(x.get("records_walked", 0) for x in rows
               if x["phase"] == "locate" and x["batch"] >= 0)


def read_calls(rows: list[dict]) -> int:
    return sum(x["calls"] for x in rows if x["phase"] == "read")


def overlapping_groups(rows: list[dict], size: int) -> int:
    """Pairs of consecutive stagger groups whose read phases overlap in a batch."""
    reads: dict[int, dict[int, tuple]] = defaultdict(dict)
    for x in rows:
        if x["phase"] == "read":
            reads[x["batch"]][x["rank"]] = (x["t_start"], x["t_end"])
    overlaps = 0
    for per in reads.values():
        groups = defaultdict(list)
        for rank, interval in per.items():
            groups[rank // size].append(interval)
        order = sorted(groups)
        overlaps += sum(max(e for _, e in groups[g0]) > min(s for s, _ in groups[g1])
                        for g0, g1 in zip(order, order[1:]))
    return overlaps


@sizes(fast=(4,))
def test_dm_coal_and_stag_counters(comm, datasets, nprocs):
    """DM: every reader walks exactly its own records (LMM's last reader walks past the
    others'); COAL: the same bytes in read calls divided by its factor; STAG: a group's reads
    start after the previous group's end, in groups of 1, 2 and P."""
    db, P = datasets["one_txn"], comm.size
    B = 8 * P
    dm, _, _ = run(comm, db, B, 10, variant="lmdbio-lmm-dm", ranks_per_node=1)
    lmm_walks = comm.allgather(walked(run(comm, db, B, 10, variant="lmdbio-lmm",
                                          ranks_per_node=1)[0]))
    cb = int(B * (3087 + 1024) * 4 * 1.2)   # 4 batches of a cifar10 record and its padding
    _, dio, _ = run(comm, db, B, 16, options=Options(locate="index", fetch="pread"))
    _, coal, k = run(comm, db, B, 16, options=Options(locate="index", fetch="pread",
                                                      coalesce_bytes=cb))
    stag = {size: run(comm, db, B, 12, variant="lmdbio-lmm-dio-prov-coal-stag",
                      ranks_per_node=1, stagger_size=size, coalesce_bytes=1)[1]
            for size in (1, 2, P)}
    mine = walked(dm)
    assert mine == 10 * (B // P), f"this DM reader walked {mine} records, its own are {10 * B // P}"
    if comm.rank == P - 1:
        assert lmm_walks[-1] > lmm_walks[0], f"LMM's last reader walked no further: {lmm_walks}"
    assert k >= 2 and read_calls(coal) * k <= read_calls(dio) + k, \
        f"COAL (k = {k}) did not divide read calls: {read_calls(coal)} vs {read_calls(dio)}"
    for size, rows in stag.items():
        assert overlapping_groups(rows, size) == 0, f"STAG groups of {size} overlapped"
        assert any(x["phase"] == "stagger_wait" for x in rows), "STAG recorded no stagger_wait"


@sizes(gate=(2,))
def test_dm_speculation_is_issued_and_scored(comm, made, nprocs):
    """Cold, one reader per rank: each reader asks for pages ahead (map_addr is 0 without
    MDB_FIXEDMAP, and code that needed it never speculated), and most of what it touches was
    asked for."""
    db = made("speculation", "cifar10", 3000, commit_every=1000, seed=31)
    on_rank_0(comm, lambda: evict(db / "data.mdb"))
    with lmdbio.Reader(db, 16 * comm.size, comm, variant="lmdbio-lmm-dm", ranks_per_node=1) as r:
        for _ in range(40):
            r.read_batch()
        rows, psize = r.stats(), r.meta.psize
    spec = [x for x in rows if x["phase"] == "speculate"]
    scored = [x for x in rows if x["phase"] == "read" and "missed_pages" in x]
    touched = sum(-(-x["bytes"] // psize) for x in scored)
    assert sum(x.get("bytes", 0) for x in spec) > 0 and sum(x.get("pages", 0) for x in spec) > 0
    assert len(scored) >= 30
    assert sum(x["missed_pages"] for x in scored) < touched // 4


class OpenSpy:
    """Every open of a file under ``root`` (an audit hook, installed once per process: hooks
    cannot be removed) and every ``lmdb.open``, while ``root`` is set."""

    root: str | None = None
    opened: list[str] = []
    installed = False

    @classmethod
    def hook(cls, event, args):
        if cls.root and event == "open" and args and isinstance(args[0], (str, bytes,
                                                                         os.PathLike)):
            name = os.fsdecode(os.fspath(args[0]))
            if name.startswith(cls.root):
                cls.opened.append(name)

    @classmethod
    def watch(cls, root: str, monkeypatch) -> None:
        if not cls.installed:
            sys.addaudithook(cls.hook)
            cls.installed = True
        cls.root, cls.opened = root, []
        real_open = lmdb.open

        def spy_open(path, *a, **kw):
            cls.opened.append(f"lmdb.open({path})")
            return real_open(path, *a, **kw)
        monkeypatch.setattr(lmdb, "open", spy_open)

    @classmethod
    def take(cls) -> list[str]:
        """What was opened since the last call."""
        opened, cls.opened = cls.opened, []
        return opened


@sizes(gate=(4,))
def test_non_readers_never_open_the_database(comm, datasets, shared_tmp, nprocs, monkeypatch):
    """Every variant but lmdb: a rank that is not a reader neither opens a file of the
    database nor maps data.mdb; a reader does open it (else the check would be blind)."""
    # A copy no earlier test of this process has opened or mapped.
    db = os.path.realpath(on_rank_0(comm, lambda: shutil.copytree(datasets["cifar10"],
                                                                  shared_tmp / "db")))
    report = []
    OpenSpy.watch(db, monkeypatch)
    try:
        for variant in lmdbio.VARIANTS[1:]:
            OpenSpy.take()
            with lmdbio.Reader(db, 4 * comm.size, comm, variant=variant,
                               build_provenance=True) as r:
                for _ in range(5):
                    r.read_batch()
                with open("/proc/self/maps") as f:
                    maps = [line for line in f if db in line and "data.mdb" in line]
                report.append((variant, r.is_reader, OpenSpy.take(), len(maps)))
    finally:
        OpenSpy.root = None
    for variant, is_reader, opened, maps in report:
        if is_reader:
            assert opened, f"{variant}: the reader opened nothing (the check is blind)"
        else:
            assert not opened and not maps, f"{variant}: non-reader opened {opened}, maps {maps}"
