"""The Reader's own communicator, one table of tags, bounded collective steps, an agreement
that scales, and STAG's bounded close (issue 28: items 3, 5, 6 and finding F).

Each MPI case runs its own ``mpiexec`` under a time bound, so a hang fails the test.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, run_bounded
from lmdbio import tags
from lmdbio.collective import _height, tree

# An MPI configuration that does not buffer small messages: ranks talk through UCX
# with rendezvous for every size, so a send completes only when its receiver takes it.
UNBUFFERED = {"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": "ucx", "UCX_RNDV_THRESH": "0"}


def run_coll(tmp_path, script, n, *args, env=None, timeout=60):
    """Run a coll_* script; returns (proc, every rank's lines, sorted) from COLL_OUT's files."""
    out_dir = tmp_path / f"out-{script}-{len(list(tmp_path.iterdir()))}"
    out_dir.mkdir()
    proc = run_bounded(script, n, *map(str, args), env={**(env or {}), "COLL_OUT": str(out_dir)},
                       timeout=timeout)
    got = sorted(l for f in out_dir.glob("rank*.txt") for l in f.read_text().splitlines())
    return proc, got


# ------------------------------------------------------------------ tags and the tree
def test_every_tag_comes_from_the_table():
    literal = re.compile(r"\btag\s*=\s*\d")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "lmdbio").rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if literal.search(line)]
    assert not found, f"message tags written as numbers, not from lmdbio.tags: {found}"
    tags.check_unique()
    assert len(set(tags.TAGS.values())) == len(tags.TAGS)
    with pytest.raises(RuntimeError, match="AGREE and RING"):
        tags.check_unique({"AGREE": 7, "RING": 7})


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.integers(1, 130), st.integers(131, 10_000)))
def test_the_agreement_tree_reaches_every_rank_in_log_p_hops(size):
    """tree() is a spanning tree rooted at rank 0: parent and children agree, rank r lies
    popcount(r) hops down, _height() is each subtree's real height, and a round sends
    2 (P - 1) messages, at most ceil(log2 P) from any rank."""
    bound = math.ceil(math.log2(size))
    links = [tree(r, size) for r in range(size)]
    assert links[0][0] is None
    for r, (parent, children) in enumerate(links):
        if r:
            assert r in links[parent][1], f"rank {r} is not a child of its parent {parent}"
        assert all(links[c][0] == r for c in children), f"rank {r}'s children {children}"
    depth = [0] * size
    for r in range(1, size):   # parents come before their children
        depth[r] = depth[links[r][0]] + 1
    assert depth == [bin(r).count("1") for r in range(size)] and max(depth) <= bound
    height = [0] * size
    for r in range(size - 1, -1, -1):
        height[r] = max((height[c] + 1 for c in links[r][1]), default=0)
    assert height == [_height(r, size) for r in range(size)]
    # A round: one report up from every rank but 0, one decision down to every child.
    sends = [(r > 0) + len(children) for r, (_, children) in enumerate(links)]
    assert sum(sends) == 2 * (size - 1) and max(sends) <= bound


# ------------------------------------------------------------------ collective()
@pytest.mark.mpi
def test_a_failing_step_raises_the_lowest_failure_on_every_rank(tmp_path):
    out, got = run_coll(tmp_path, "coll_collective.py", 4, "errors")
    assert out.returncode == 0, out.stderr[-3000:]
    for r in range(4):
        mine = [l[len(f"rank {r}: "):] for l in got if l.startswith(f"rank {r}: ")]
        by = dict(l.split(": ", 1) for l in mine)
        assert by["one"].startswith("ValueError: ") and "bad on two" in by["one"], mine
        assert by["two"].startswith("ConfigurationError: ") and "bad on one" in by["two"], mine
        # The error's fields travel with it (callers test fields, not text).
        assert by["two fields"] == "{'option': 'batch_size'}", mine
        local = "Local: " if r == 1 else "LmdbioError: rank 1: Local: "
        assert by["local"].startswith(local) and "only rank 1" in by["local"], mine
        assert by["fine"] == f"returned {r * 10}", mine
        assert by["allgather"] == "[0, 1, 4, 9]", mine
        if r != 2:
            assert "rank 2: bad on two" in by["one"], mine


@pytest.mark.mpi
@pytest.mark.gate
def test_a_step_a_rank_never_comes_to_names_it_within_the_timeout(tmp_path):
    out, got = run_coll(tmp_path, "coll_collective.py", 4, "missing",
                        env={"LMDBIO_TIMEOUT": "2"})
    assert out.returncode == 0, out.stderr[-3000:]
    for r in range(3):
        line = next(l for l in got if l.startswith(f"rank {r}: missing: "))
        assert "PeerTimeoutError" in line and "rank(s) [3] did not come" in line, got
        fields = next(l for l in got if l.startswith(f"rank {r}: missing fields: "))
        assert fields.endswith("{'missing': (3,), 'limit': 2.0}"), fields
        took = float(next(l for l in got if l.startswith(f"rank {r}: took")).split()[3])
        assert took <= 2 + 1, got
        # F25: the message says how long this rank waited, not the limit as if it had waited it.
        waited = float(re.search(r"this rank waited ([\d.]+) s of the 2 s limit", line).group(1))
        assert 0 < waited <= min(took, 2) + 0.1, (waited, took, line)
    late = next(l for l in got if l.startswith("rank 3: missing: "))
    assert "PeerTimeoutError" in late and "after the other ranks had given up" in late, got
    assert "rank 3: missing fields: {'missing': (3,), 'limit': 2.0}" in got, got
    # The communicator is still usable: the late messages are not taken for the next step.
    for r in range(4):
        assert f"rank {r}: after: returned {r}" in got, got


# ------------------------------------------------------------------ finding F
@pytest.mark.mpi
@pytest.mark.gate
@pytest.mark.parametrize("variant", ["lmdb", "lmdbio-lmm-dio"])
def test_a_rank_raising_mid_epoch_under_raise_releases_the_others(datasets, tmp_path, variant):
    """Before: rank 0 waited in epoch(1)'s blocking allgather until the job was killed."""
    out, got = run_coll(tmp_path, "coll_raise_mid_epoch.py", 2, datasets["cifar10"], variant,
                        env={"LMDBIO_TIMEOUT": "3"}, timeout=40)
    assert any(l.startswith("rank 1: caught Mistake") for l in got), (got, out.stderr[-2000:])
    zero = next(l for l in got if l.startswith("rank 0: caught "))
    assert re.match(r"rank 0: caught (PeerTimeoutError|PeerError): ", zero), got
    assert "rank(s) [1]" in zero or "rank 1 " in zero, zero
    # The field says whom, not only the words: rank 1 (the one that raised), never rank 0.
    assert "rank 0: blamed (1,)" in got, got
    assert float(zero.rsplit(" after ", 1)[1].split()[0]) <= 3 + 2, zero


# ------------------------------------------------------------------ the agreement at P = 64
#: The present round's limit: with every rank there, only a rank's slowness could reach it.
PRESENT_LIMIT = 20
#: The stopped round's limit, which every rank but the stopped one waits out.
STOPPED_LIMIT = 3
#: One job per size: its present round, then the round with this rank stopped.
STOPPED = {64: 8, 8: 0}   # a rank with a subtree; the root


@pytest.fixture(scope="module")
def agreement(tmp_path_factory):
    """``agreement(n, round)``: each rank's row of that round of coll_agree.py at P = n; one
    mpiexec job per n runs both rounds."""
    jobs: dict[int, list[dict]] = {}

    def rows(n: int, name: str) -> dict[int, dict]:
        if n not in jobs:
            args = [PRESENT_LIMIT] + ([STOPPED[n], STOPPED_LIMIT] if n in STOPPED else [])
            out, got = run_coll(tmp_path_factory.mktemp(f"agree{n}"), "coll_agree.py", n, *args,
                                timeout=240)
            assert out.returncode == 0, out.stderr[-3000:]
            jobs[n] = [json.loads(line) for line in got]
        mine = {r["rank"]: r for r in jobs[n] if r["round"] == name}
        assert sorted(mine) == list(range(n)), (name, jobs[n][:3])
        return mine
    return rows


@pytest.mark.mpi
@pytest.mark.gate
@pytest.mark.parametrize("n", [4, 64])
def test_every_rank_present_agrees_in_log_p_messages(agreement, n):
    rows = agreement(n, "present")
    for r in rows.values():
        assert (r["complete"], r["failed"], r["missing"]) == (True, sorted({1, n // 2, n - 1}), [])
    assert sum(r["sent"] for r in rows.values()) == 2 * (n - 1)
    assert max(r["sent"] for r in rows.values()) <= math.ceil(math.log2(n))


@pytest.mark.mpi
@pytest.mark.gate
@pytest.mark.parametrize("n,stopped", STOPPED.items())
def test_a_stopped_rank_is_named_by_every_other_rank(agreement, n, stopped):
    rows = agreement(n, "stopped")
    for rank, r in rows.items():
        if rank == stopped:
            assert r["complete"] is False, r   # it came after every other rank gave up
            continue
        assert (r["complete"], r["missing"]) == (False, [stopped]), r
        assert r["seconds"] <= STOPPED_LIMIT + 1, r
        assert r["sent"] <= 3 + math.ceil(math.log2(n)), r


# ------------------------------------------------------------------ one communicator, many Readers
@pytest.mark.mpi
@pytest.mark.gate
def test_readers_in_a_loop_on_one_communicator_never_hear_each_other(datasets, tmp_path):
    """20 Readers on one communicator: late ranks, early breaks, abandoned exit agreements
    and an application's own receive on the same communicator; every record right."""
    out, got = run_coll(tmp_path, "coll_dup.py", 4, datasets["cifar10"], 20, 1,
                        env={"LMDBIO_TIMEOUT": "5", "LMDBIO_EXIT_TIMEOUT": "1"}, timeout=180)
    assert len(got) == 4 and all(" ok records=" in l for l in got), (got, out.stderr[-3000:])
    assert out.returncode == 0, out.stderr[-3000:]


# ------------------------------------------------------------------ STAG's close
@pytest.mark.mpi
@pytest.mark.gate
@pytest.mark.parametrize("buffered", [True, False])
def test_stagger_waits_are_bounded_when_a_reader_never_comes(tmp_path, buffered):
    """Before: with an MPI that does not buffer, reader 0's close() waited for ever."""
    env = {"LMDBIO_TIMEOUT": "2", **({} if buffered else UNBUFFERED)}
    out, got = run_coll(tmp_path, "coll_stagger.py", 3, env=env, timeout=40)
    two = next(l for l in got if l.startswith("rank 2: "))
    assert "turn raised PeerTimeoutError" in two and "rank 1, a reader of the previous" in two, got
    zero = next(l for l in got if l.startswith("rank 0: "))
    if buffered:   # its sends completed when MPI buffered them
        assert "close ok" in zero, got
    else:
        assert "close raised PeerTimeoutError" in zero, got
        assert "rank 1, a reader of the next stagger group, did not take its turn" in zero, got
        assert float(zero.rsplit(" after ", 1)[1].split()[0]) <= 2 + 2, zero


# ------------------------------------------------------------------ abort_job
class _Aborted(Exception):
    pass


class _AbortRecorder:
    """The one call abort_job makes on a communicator: Abort(code). A real MPI_Abort ends the
    process (and the job), so the exit code rule is checked here, in-process."""

    def Abort(self, code):
        raise _Aborted(code)


@pytest.mark.parametrize("exc,code", [(KeyboardInterrupt(), 130), (RuntimeError("x"), 1)])
def test_abort_job_ends_with_a_shells_code_and_ignores_a_second_ctrl_c(exc, code):
    import signal

    from lmdbio.collective import abort_job

    before = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(_Aborted) as aborted:
            abort_job(_AbortRecorder(), exc)
        assert aborted.value.args == (code,)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
