"""Every record exactly once per epoch: one property over the pure planning code.

An epoch is planned without MPI: :func:`lmdbio.pipeline.epoch_rows` lays the order
(:meth:`EpochPlan.order`: file order, ``"window"``, ``"shard"`` or ``"elastic"``) out
in global batches; each reader reads its group's columns of them chunk by chunk
(:class:`lmdbio.plan.EpochSchedule`), and each rank of the group takes its share
of every batch, the front of it in a short last batch (``EpochRows.kept``). The
groups are any split of the ranks into runs of consecutive ranks, which is what
``ranks_per_node`` and ``readers_per_node`` make (:func:`lmdbio.topology.make_topology`).
Under torch, a rank's batches from a resume point on are split among DataLoader workers
(:class:`lmdbio.torch.RankPlan`, :func:`lmdbio.torch.worker_batches`).
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lmdbio import shuffle as sh
from lmdbio.pipeline import EpochPlan, epoch_rows
from lmdbio.plan import Stream
from lmdbio.torch import RankPlan, worker_batches


class Case(NamedTuple):
    n: int
    batch: int
    nprocs: int
    groups: tuple[int, ...]   # ranks per reader, consecutive ranks
    k: int                    # batches per pipeline chunk
    t0: int                   # the epoch's first batch (a chunk boundary)
    epoch: int
    plan: EpochPlan
    workers: int              # DataLoader workers per rank
    start: int                # batches a resumed epoch had delivered


@st.composite
def cases(draw) -> Case:
    nprocs = draw(st.integers(1, 8))
    batch = nprocs * draw(st.integers(1, 6))
    n = batch * draw(st.integers(1, 5)) + draw(st.integers(0, batch - 1))
    cuts = sorted(draw(st.sets(st.integers(1, nprocs - 1))) if nprocs > 1 else set())
    groups = tuple(np.diff([0, *cuts, nprocs]).tolist())
    k = draw(st.integers(1, 4))
    plan = EpochPlan(shuffle=draw(st.sampled_from([False, *sh.MODES])),
                     seed=draw(st.integers(0, 2**32 - 1)),
                     block=draw(st.integers(1, n + 1)), window=draw(st.integers(1, 4)),
                     last_batch=draw(st.sampled_from(sh.POLICIES)),
                     partitions=draw(st.integers(1, 2 * batch + 1)))
    batches = sh.num_batches(n, batch, plan.last_batch)
    return Case(n, batch, nprocs, groups, k, k * draw(st.integers(0, 3)),
                draw(st.integers(0, 1000)), plan, draw(st.integers(1, 4)),
                draw(st.integers(0, batches)))


def delivered(c: Case, rows) -> list[list[np.ndarray]]:
    """Each rank's batches of the epoch: its group's reader reads the chunks, the rank takes its
    share of each batch as the reader lays it out (the positions its Batch's bytes come from)."""
    share = c.batch // c.nprocs
    out: list[list[np.ndarray]] = [[] for _ in range(c.nprocs)]
    first = 0
    for size in c.groups:
        schedule = Stream(c.n, c.batch, first * share, size * share, c.k).epoch(rows.rows, c.t0)
        for chunk in range(c.t0 // c.k, (c.t0 + len(rows.rows)) // c.k):
            block = schedule.chunk_positions(chunk).reshape(c.k, size * share)
            for it in range(c.k):
                i = chunk * c.k + it - c.t0
                for m in range(size if i < rows.batches else 0):
                    r = first + m
                    out[r].append(block[it, m * share:(m + 1) * share][:rows.kept(i, r, share)])
        first += size
    return out


def in_turn(c: Case, batches: int) -> list[int]:
    """The batches a rank's DataLoader yields: one from each worker in turn, worker 0 first,
    a worker that is done skipped."""
    its = [iter(worker_batches(batches, c.start, w, c.workers)) for w in range(c.workers)]
    out: list[int] = []
    while its:
        for it in list(its):
            i = next(it, None)
            if i is None:
                its.remove(it)
            else:
                out.append(i)
    return out


@settings(max_examples=300, deadline=None)
@given(cases())
def test_every_record_once_per_epoch(c):
    n, batch, nprocs, plan = c.n, c.batch, c.nprocs, c.plan
    share, (full, rest) = batch // nprocs, divmod(n, batch)
    rows = epoch_rows(plan, n, batch, nprocs, c.k, c.epoch)
    batches = sh.num_batches(n, batch, plan.last_batch)
    assert rows.rows.dtype == np.int64 and rows.rows.shape[1] == batch
    assert rows.batches == batches and len(rows.rows) >= batches and len(rows.rows) % c.k == 0
    assert ((0 <= rows.rows) & (rows.rows < n)).all()

    # The order: a permutation of the records, a pure function of (seed, epoch) and the plan.
    order = plan.order(n, plan.block, c.epoch, batch, nprocs)
    assert sorted(order.tolist()) == list(range(n))
    assert np.array_equal(order, plan.order(n, plan.block, c.epoch, batch, nprocs))
    if plan.mode != "shard":   # the one order that depends on the rank count
        assert np.array_equal(order, plan.order(n, plan.block, c.epoch, batch, 1))
    if plan.mode is None:
        assert order.tolist() == list(range(n))
    again = epoch_rows(plan, n, batch, nprocs, 1, c.epoch)
    assert np.array_equal(again.rows[:batches], rows.rows[:batches])

    # Each rank: a batch of its share each, but its part of a short last batch; the ranks'
    # parts of that one differ by one record at most.
    mine = delivered(c, rows)
    for r in range(nprocs):
        assert len(mine[r]) == batches
        assert all(len(b) == share for b in mine[r][:full])
        assert [b.tolist() for b in mine[r]] == \
            [b.tolist() for b in sh.rank_batches(order, batch, nprocs, r, plan.last_batch)]
        direct = [rows.rows[i, r * share:(r + 1) * share][:rows.kept(i, r, share)]
                  for i in range(batches)]
        assert [b.tolist() for b in mine[r]] == [b.tolist() for b in direct]
        loader = RankPlan("", r, nprocs, batch, n, 0, plan)   # lmdbio.torch's
        loader_rows = loader.rows(c.epoch)
        assert [loader.share(loader_rows, i).tolist() for i in in_turn(c, batches)] == \
            [b.tolist() for b in mine[r][c.start:]]
    if batches > full:
        last = [len(mine[r][-1]) for r in range(nprocs)]
        want = rest if plan.last_batch == "short" else batch
        assert sum(last) == want and max(last) - min(last) <= 1

    # The union over ranks and batches, rank after rank in each batch: the order itself
    # (short), the order then its first B - n % B records again (pad), its kept prefix (drop).
    got = [int(x) for i in range(batches) for r in range(nprocs) for x in mine[r][i]]
    if plan.last_batch == "short":
        assert got == order.tolist()
    elif plan.last_batch == "pad":
        assert got == order.tolist() + order[:-n % batch].tolist()
        assert Counter(got) - Counter(range(n)) == Counter(order[:-n % batch].tolist())
    else:
        assert got == order[:full * batch].tolist()
    assert len(set(got)) == (full * batch if plan.last_batch == "drop" else n)

    # position_ranks names the rank that delivers each position (pad's repeats aside).
    owner = sh.position_ranks(n, batch, nprocs, plan.last_batch)
    assert np.count_nonzero(owner == nprocs) == n - len(set(got))   # nobody's: a dropped batch
    for r in range(nprocs):
        flat = np.concatenate(mine[r])
        assert flat[:np.count_nonzero(owner == r)].tolist() == order[owner == r].tolist()
