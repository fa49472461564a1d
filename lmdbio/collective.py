"""Bounded agreement between ranks: every rank ends, and the failing rank is named.

:func:`collective` runs a step on every rank and raises the same error on
all of them if it fails anywhere; :func:`agree` finds out, within a time
limit, whether every rank came and which failed; :func:`allgather` gathers
one value per rank within the limit. All three run on one protocol, a
binomial tree of point-to-point messages (:func:`_round`), so each costs a
rank O(log P) messages and every rank ends within its limit, naming the
ranks that did not come. The limits come from ``LMDBIO_TIMEOUT`` and
``LMDBIO_EXIT_TIMEOUT``. Communicators are parameters; mpi4py itself is
imported only where a message is sent (importing it initializes MPI). Given a
:class:`lmdbio.comm.Comm` (a ``torch.distributed`` group under ``torchrun``),
the three run that communicator's own bounded steps.

A round that a rank gives up on leaves messages in flight on its
communicator. MPI gives a freed communicator's context to the next one
created, where those messages would be taken as new ones, so such a
communicator is parked, never freed (:func:`release_comms`).
"""

from __future__ import annotations

import functools
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from . import tags
from .errors import PeerTimeoutError
from .failures import lowest_error, portable, rebuild, union
from .settings import EXIT_TIMEOUT, check_settings, default_on_error, exit_timeout, timeout
from .waiting import wait_until

__all__ = ["collective", "abort_job", "agree", "allgather", "release_comms", "check_settings", "exit_timeout",
           "default_on_error", "messages_sent", "tree", "EXIT_TIMEOUT"]

# Sends of rounds a rank gave up on (a peer never came): MPI may still read their buffers.
_ABANDONED: list = []

# Communicators that may hold messages nobody will take (see release_comms).
_PARKED_COMMS: list = []
# Parked communicators kept before the oldest is drained and freed. MPICH has about 2,000
# contexts per process; a failed Reader parks up to four communicators.
_PARK_LIMIT = 256

_SENT = [0]   # point-to-point messages this process sent in rounds (messages_sent())


def _own_steps(comm) -> bool:
    """Whether ``comm`` is a :class:`lmdbio.comm.Comm` (it runs its own bounded steps), not
    an mpi4py communicator. (comm.py imports this module, so the check is by its methods.)"""
    return callable(getattr(comm, "allgather_within", None))


def messages_sent() -> int:
    """Point-to-point messages this process has sent in agreements and collective steps."""
    return _SENT[0]


# --------------------------------------------------------------------------- the tree
@lru_cache(maxsize=4096)
def tree(rank: int, size: int) -> tuple[int | None, tuple[int, ...]]:
    """``rank``'s parent (None for rank 0) and children in the binomial tree over ``size`` ranks.

    Rank r's parent is r with its lowest set bit cleared; its children are
    r + 2**k for every 2**k below that bit. Depth is the number of set bits,
    so no rank is more than ceil(log2 P) hops from rank 0, and no rank has
    more than that many children.
    """
    if rank == 0:
        parent, low = None, 1 << max(size - 1, 0).bit_length()
    else:
        parent, low = rank & (rank - 1), rank & -rank
    children = []
    step = 1
    while step < low and rank + step < size:
        children.append(rank + step)
        step <<= 1
    return parent, tuple(children)


def _height(rank: int, size: int) -> int:
    """Hops from ``rank`` down to the farthest leaf of its subtree.

    The subtree holds ranks ``rank .. rank + m - 1``; rank + x lies popcount(x)
    hops below, so the height is the most set bits of a number below m.
    """
    low = (rank & -rank) if rank else size
    n = min(low, size - rank) - 1
    return max(bin(n).count("1"), n.bit_length() - 1) if n > 0 else 0


# --------------------------------------------------------------------------- per-communicator state
@dataclass
class _CommState:
    """What the rounds keep on a communicator (an MPI attribute: it dies with the communicator,
    and a duplicate starts afresh)."""

    seq: dict = field(default_factory=dict)     # tag -> number of the next round
    early: dict = field(default_factory=dict)   # (tag, source) -> messages of later rounds
    unsettled: bool = False                     # a round here was given up: park, never free
    pending: list = field(default_factory=list)  # sends of rounds here not completed yet


_KEYVAL: list = []


def _state(comm) -> _CommState:
    from mpi4py import MPI

    if not _KEYVAL:
        _KEYVAL.append(MPI.Comm.Create_keyval())
    st = comm.Get_attr(_KEYVAL[0])
    if st is None:
        st = _CommState()
        comm.Set_attr(_KEYVAL[0], st)
    return st


def _next_seq(st: _CommState, tag: int) -> int:
    n = st.seq.get(tag, 0)
    st.seq[tag] = n + 1
    return n


# --------------------------------------------------------------------------- one round
_UP, _NOTE, _LEFT, _DOWN = "up", "note", "left", "down"


@dataclass
class _Kid:
    status: str | None = None   # None (nothing yet), note, up, left
    value: Any = None
    missing: tuple = ()


@dataclass
class _Outcome:
    """How a round ended on this rank."""

    complete: bool          # every rank came
    value: Any              # the combined value (of every rank, or of those heard from)
    missing: list[int]      # ranks that did not come (or gave up before this rank came)
    waited: float = 0.0     # seconds this rank spent in the round


def _round(comm, tag: int, value: Any, combine: Callable[[Any, Any], Any], limit: float,
           seq: int | None = None) -> _Outcome:
    """Combine ``value`` over every rank of ``comm`` along the binomial :func:`tree`, within
    ``limit`` seconds; rank 0 decides and the decision goes back down the tree.

    Why a tree of point-to-point messages, not MPI's own non-blocking
    collectives: this protocol runs where ranks have parted ways (one left
    its with-block, one timed out in an earlier step). An abandoned
    Iallgather or Ibarrier stays pending and would be matched by the next
    collective call of a rank that came late, with another operation's
    buffers; tagged messages with a round number cannot be mistaken. And
    the tree names who did not come, which an Ibarrier cannot.

    Messages: each rank sends one report up and one decision to each
    child, so ``2 (P - 1)`` in all and at most ceil(log2 P) on any rank (14
    at 9,216 ranks, where one message to every other rank would be 9,215);
    a rank whose subtree is incomplete sends a few more notes up.

    Times, as fractions of ``limit`` from this rank's start, with H the
    tree's height and s = 1/(4H): rank 0 decides at ``1 - H s`` (3/4) at the
    latest; a rank at depth d gives up on the decision at ``1 - (H - d) s``,
    so its parent's decision (or its parent's own giving up) reaches it
    first, and the ranks below a rank that stopped name that rank; a rank of
    height h whose subtree is incomplete sends a note of who is missing at
    ``1 - (2H - h) s``, in time for its parent's note or rank 0's decision.
    So one stopped rank is named exactly by every other rank, as long as
    the ranks started the round within ``s * limit`` of each other; with
    more skew the naming can point at a rank's ancestor instead. A rank
    that arrives more than about ``3/4 * limit`` after rank 0 counts as not
    come.
    """
    me, size = comm.rank, comm.size
    st = _state(comm)
    if seq is None:
        seq = _next_seq(st, tag)
    parent, children = tree(me, size)
    H = max(1, _height(0, size))
    s = 1.0 / (4 * H)
    t0 = time.monotonic()
    depth, height = bin(me).count("1"), _height(me, size)
    decide_at = t0 + limit * (1 - H * s)                     # rank 0
    give_up_at = t0 + limit * (1 - (H - depth) * s)          # the others
    note_at = t0 + limit * (1 - (2 * H - height) * s)
    kids = {c: _Kid() for c in children}
    sends: list = []
    decision: list = []       # [(complete, value, missing)] once decided
    noted = [None]            # the last note sent up
    sent_up = [False]
    # When a child was first seen to have given up on this rank.
    gone_at: list[float | None] = [None]

    def send(dest: int, kind: str, data) -> None:
        sends.append(comm.isend((seq, kind, data), dest=dest, tag=tag))
        _SENT[0] += 1

    def take(src: int):
        """The next message of the agreement under way from ``src``; ("later", None) for one of a later
        round (kept for it), None when there is none yet."""
        early = st.early.get((tag, src))
        while early:
            msg = early.pop(0)
            if msg[0] == seq:
                return msg[1], msg[2]
            if msg[0] > seq:
                early.insert(0, msg)
                return "later", None
        while True:
            m = comm.improbe(source=src, tag=tag)
            if m is None:
                return None
            msg = m.recv()
            if msg[0] == seq:
                return msg[1], msg[2]
            if msg[0] > seq:   # that rank already gave this agreement up and moved on
                st.early.setdefault((tag, src), []).append(msg)
                return "later", None
            # an older round's message, from a rank that came after this one gave up: dropped

    def known():
        """(value, missing) of this rank's subtree as far as heard."""
        v, missing = value, []
        for c, kid in kids.items():
            if kid.value is not None:
                v = combine(v, kid.value)
            if kid.status is None:
                missing.append(c)
            elif kid.status == _LEFT:
                missing.extend([c, *kid.missing])
            elif kid.status == _NOTE:
                missing.extend(kid.missing)
        return v, sorted(set(missing))

    def listen() -> bool:
        """Take what the children sent; True if anything came."""
        heard = False
        for c, kid in kids.items():
            while kid.status != _LEFT:   # after its report a child may still give up on us
                got = take(c)
                if got is None:
                    break
                heard = True
                kind, data = got
                if kind == _UP:
                    kid.status, kid.value = _UP, data
                elif kind == _NOTE:
                    kid.status, kid.value, kid.missing = _NOTE, data[0], tuple(data[1])
                else:   # left (gave up on us), or already in a later round
                    kid.status = _LEFT
        return heard

    def step() -> bool:
        listen()
        complete = all(k.status == _UP for k in kids.values())
        if complete and kids:
            # A child that gave up after its report has said so in a later message, which
            # one probe may not have matched yet: listen until the children are quiet.
            quiet = 0
            for _ in range(8):
                quiet = 0 if listen() else quiet + 1
                if quiet == 2:
                    break
            complete = all(k.status == _UP for k in kids.values())
        gone = any(k.status == _LEFT for k in kids.values())
        now = time.monotonic()
        if gone and gone_at[0] is None:
            gone_at[0] = now
        first_gone = gone_at[0]
        if parent is None:
            # A child gave up on us: the round cannot complete; decide once the other
            # children's last messages (already sent, maybe not yet matched) are in.
            if complete:
                decision.append((True, known()[0], []))
            elif now >= decide_at or (gone and first_gone is not None
                                      and now >= first_gone + min(0.5, 0.05 * limit)):
                v, missing = known()
                decision.append((False, v, missing))
            return bool(decision)
        got = take(parent)
        if got is not None:
            kind, data = got
            if kind == _DOWN:
                decision.append(tuple(data))
                return True
        if complete and not sent_up[0]:
            send(parent, _UP, known()[0])
            sent_up[0] = True
        elif not complete and (gone or now >= note_at):
            note = known()
            if note != noted[0]:
                send(parent, _NOTE, note)
                noted[0] = note
        if now >= give_up_at:
            v, missing = known()
            send(parent, _LEFT, None)
            decision.append((False, v, sorted(set(missing) | {parent})))
            return True
        return False

    try:
        wait_until(step, None)
    except BaseException:
        st.unsettled = True
        _ABANDONED.append(sends)
        raise
    complete, v, missing = decision[0]
    for c, kid in kids.items():
        if kid.status != _LEFT:
            send(c, _DOWN, (complete, v, missing))
    if not complete:
        st.unsettled = True
    pending = [q for q in sends if not q.Test()]
    if pending:
        _ABANDONED.append(pending)   # mpi4py's requests hold the pickled buffers
        st.pending = [q for q in st.pending if not q.Test()] + pending
    _prune()
    return _Outcome(bool(complete), v, list(missing), time.monotonic() - t0)


def _prune() -> None:
    """Drop abandoned sends that MPI has completed since."""
    if len(_ABANDONED) > 64:
        _ABANDONED[:] = [qs for qs in _ABANDONED if not all(q.Test() for q in qs)]


# --------------------------------------------------------------------------- the three uses
def agree(comm, failed: bool, limit: float) -> tuple[bool, list[int], list[int]]:
    """Find out within ``limit`` seconds whether every rank of ``comm`` came, and which failed.

    Returns (every rank came, ranks that failed, ranks that did not come).
    When a rank did not come, the failed ranks are those heard from, and
    the list of those that did not come names the rank that stopped (or the
    root of each subtree not heard from; see :func:`_round` for how skew
    between the ranks' arrivals affects the naming). A rank that came after
    the others gave up gets False and its own number among those that did
    not come. One agreement at a time per communicator; one that did not
    complete leaves messages on ``comm`` (:func:`release_comms` parks it).
    """
    if _own_steps(comm):
        return comm.agree(failed, limit)
    me = comm.rank
    if comm.size == 1:
        return True, [0] if failed else [], []
    out = _round(comm, tags.AGREE, [me] if failed else [], union, limit)
    return out.complete, union(out.value, [me] if failed else []), out.missing


def _not_come(comm, out: _Outcome, what: str, limit: float) -> PeerTimeoutError:
    me = comm.rank
    if me in out.missing:
        return PeerTimeoutError(
            f"rank {me}: reached {what} after the other ranks had given up waiting for it "
            f"({limit:g} s, LMDBIO_TIMEOUT): this rank was slower than the others by that long",
            missing=[me], limit=limit)
    return PeerTimeoutError(
        f"rank {me}: rank(s) {out.missing} did not come to {what}: this rank waited "
        f"{out.waited:.1f} s of the {limit:g} s limit (LMDBIO_TIMEOUT; the ranks give up "
        "before it, so that every rank hears who is missing within it): they stopped (an error "
        "outside lmdbio, an early break, a debugger) or exited. Every rank must take the same "
        "collective steps (constructing the Reader, each epoch(), close()) in the same order",
        missing=out.missing, limit=limit)


def collective(comm, fn: Callable, *args, **kwargs):
    """Run ``fn`` on every rank; if it fails anywhere, raise on every rank.

    The error raised is the failing rank's (lowest rank wins), re-raised with
    its type (LmdbioError where that type cannot be rebuilt from a message),
    so no rank is left waiting in a later collective. The ranks first agree
    that every one of them is here (``fn`` may hold blocking collective
    calls of its own), then on the outcome; each wait is bounded by
    ``LMDBIO_TIMEOUT``, after which PeerTimeoutError names the ranks that did
    not come. A rank doing long work of its own in ``fn`` counts as not
    come after that long too: raise LMDBIO_TIMEOUT for such steps.
    """
    if _own_steps(comm):
        return comm.collective(fn, *args, **kwargs)
    if comm.size == 1:
        return fn(*args, **kwargs)
    limit = timeout()
    what = f"the collective step {getattr(fn, '__qualname__', 'of the Reader')}"
    nothing: tuple[list, BaseException | None] = ([], None)
    # Both rounds' numbers are taken now, so every rank's count moves on by two whatever
    # happens: a later step on this communicator is not mistaken for this one.
    st = _state(comm)
    seq = _next_seq(st, tags.COLLECTIVE), _next_seq(st, tags.COLLECTIVE)
    arrived = _round(comm, tags.COLLECTIVE, nothing, lowest_error, limit, seq[0])
    if not arrived.complete:
        raise _not_come(comm, arrived, what, limit)
    me = comm.rank
    try:
        result, err = fn(*args, **kwargs), None
    except BaseException as exc:  # whatever it is (Ctrl-C too), it must not strand the other ranks
        result, err = None, exc
    mine = nothing if err is None else ([me], portable(me, err))
    out = _round(comm, tags.COLLECTIVE, mine, lowest_error, limit, seq[1])
    if not out.complete:
        if err is not None:
            raise err
        raise _not_come(comm, out, f"the end of {what}", limit)
    failure = out.value[1]
    if failure is not None:
        if err is not None and failure[0] == me:
            raise err
        raise rebuild(*failure)
    return result


def _merge(a: dict, b: dict) -> dict:
    return {**a, **b}


def allgather(comm, value: Any, limit: float | None = None, what: str = "an allgather") -> list:
    """``comm.allgather(value)`` bounded by ``limit`` seconds (default ``LMDBIO_TIMEOUT``).

    Raises PeerTimeoutError naming the ranks that did not come (``what`` says
    to what). The values travel up and down the tree: O(log P) messages per
    rank, O(P) values at rank 0.
    """
    if _own_steps(comm):
        return comm.allgather_within(value, limit, what)
    if comm.size == 1:
        return [value]
    limit = timeout() if limit is None else limit
    out = _round(comm, tags.COLLECTIVE, {comm.rank: value}, _merge, limit)
    if not out.complete:
        raise _not_come(comm, out, what, limit)
    return [out.value[r] for r in range(comm.size)]


# --------------------------------------------------------------------------- communicators
def release_comms(comms, settled: bool) -> None:
    """Free ``comms`` (None and ``MPI.COMM_NULL`` skipped) if ``settled``, else park them.

    Settled: every message sent on them was taken (the ranks all came to
    close and none failed, no round on them was given up, and the sends of
    the rounds completed, within a second). Otherwise a
    late message may still sit on one, and MPI hands a freed communicator's
    context to the next communicator created (the next Reader's), where that
    message would match a receive. Parked communicators are kept until more
    than a few hundred are; then the oldest is drained (every message still
    on it taken and dropped) and freed.
    """
    from mpi4py import MPI

    for c in comms:
        if c is None or c == MPI.COMM_NULL:
            continue
        st = _state(c)
        # A send still pending (its receiver has not taken it yet) must not outlive its
        # communicator: give it a moment, then park.
        if settled and not st.unsettled and wait_until(
                functools.partial(_all_done, st.pending), min(1.0, timeout())):
            c.Free()
        else:
            _PARKED_COMMS.append(c)
    while len(_PARKED_COMMS) > _PARK_LIMIT:
        old = _PARKED_COMMS.pop(0)
        while (m := old.improbe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)) is not None:
            m.recv()
        old.Free()


def _all_done(requests) -> bool:
    return all(q.Test() for q in requests)


def abort_job(comm, exc: BaseException) -> None:
    """End the whole job: 130 (128 + SIGINT) for a Ctrl-C, as a shell reports it; 1 otherwise.

    The half-second pause lets the launcher forward the message just printed
    before it tears the job down. A second Ctrl-C during it (users press it
    again) must not stop the abort halfway and leave the other ranks waiting,
    so the main thread ignores SIGINT from here on.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    time.sleep(0.5)
    comm.Abort(130 if isinstance(exc, KeyboardInterrupt) else 1)
