"""The Reader's epochs as a state machine: random sequences of epoch(e) (read whole or left
after k batches, or held open), read_batch(), set_epoch(), state_dict(), load_state_dict()
(here, or onto a new Reader), close(), checked call by call against a plain model of what
each call must deliver or raise. One rank (COMM_SELF), no mpiexec; every record compared
with py-lmdb's."""

import warnings

import lmdb
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule
from mpi4py import MPI

import lmdbio
from lmdbio.errors import ConfigurationError, LmdbioError
from lmdbio.pipeline import EpochPlan

N, B = 23, 4                 # 5 full batches and a short one of 3
NB = -(-N // B)
BLOCK, WINDOW, SEED = 5, 2, 7
EPOCHS = st.integers(0, 3)


@pytest.fixture(scope="module")
def tiny_db(tmp_path_factory):
    """23 records of 40 B to 6 KB (some on overflow pages), keys in order."""
    path = tmp_path_factory.mktemp("machine") / "db"
    rng = np.random.default_rng(5)
    values = [rng.bytes(int(s)) for s in rng.choice([40, 300, 6000], size=N)]
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i, v in enumerate(values):
            txn.put(b"%05d" % i, v)
    env.close()
    return path


class Model:
    """Where a Reader must be: the next stream batch ``t``, set_epoch's epoch, the last epoch
    and its batches taken, a loaded state not resumed yet, the live (held) epoch."""

    def __init__(self, k: int, epoch: int = 0, resume=None):
        self.k, self.t, self.epoch, self.resume = k, 0, epoch, resume
        self.last = None
        self.live = None   # [epoch, t0, taken]

    def start(self, e: int) -> int | None:
        """Epoch e starts: the batches to skip, or None when it must be refused."""
        if self.resume is not None and self.resume[0] != e and 0 < self.resume[1] < NB:
            return None
        skip = self.resume[1] if self.resume is not None and self.resume[0] == e else 0
        t0 = -(-self.t // self.k) * self.k
        self.live, self.t, self.resume = [e, t0, skip], t0 + skip, None
        return skip

    def took(self) -> None:
        self.t += 1
        if self.live is not None:
            self.live[2] += 1

    def end(self) -> None:
        e, t0, taken = self.live
        self.live, self.last = None, (e, taken)
        self.t = max(self.t, t0 + -(-NB // self.k) * self.k)   # rows padded to whole chunks

    def position(self) -> tuple[int, int]:
        if self.live is not None:
            return self.live[0], self.live[2]
        return self.resume or self.last or (self.epoch, 0)


class ReaderMachine(RuleBasedStateMachine):
    path = None

    def __init__(self):
        super().__init__()
        self.reader = self.held = None
        self.states: list[dict] = []
        with lmdb.open(str(self.path), readonly=True, lock=False) as env, env.begin() as txn:
            self.values = [bytes(v) for _, v in txn.cursor()]

    @initialize(mode=st.sampled_from([False, "window", "shard", "elastic"]),
                prefetch=st.sampled_from([0, 2]))
    def build(self, mode, prefetch):
        self.kw = {"shuffle": mode, "seed": SEED, "shuffle_block": BLOCK,
                   "shuffle_window": WINDOW, "prefetch": prefetch, "coalesce_bytes": 1 << 15,
                   "build_provenance": True}
        self.plan = EpochPlan(mode, SEED, BLOCK, WINDOW)
        self._new()

    def _new(self, state=None):
        self.reader = lmdbio.Reader(self.path, B, MPI.COMM_SELF, variant="lmdbio-direct",
                                    **self.kw)
        self.model = Model(self.reader.coalesce)
        self.closed = False

    # -- what a batch must hold
    def _check(self, batch, want: list[int]) -> None:
        assert np.asarray(batch.indices).tolist() == want
        assert [bytes(r) for r in batch] == [self.values[i] for i in want]

    def _epoch_batch(self, e: int, i: int) -> list[int]:
        order = self.plan.order(N, BLOCK, e, B, 1)
        return order[i * B:min((i + 1) * B, N)].tolist()

    def _take(self, gen, e: int, k: int | None) -> None:
        """Take up to k batches (None: all) of the epoch the model has started."""
        while k is None or k > 0:
            i = self.model.live[2]
            try:
                batch = next(gen)
            except StopIteration:
                assert i == NB
                return
            self._check(batch, self._epoch_batch(e, i))
            self.model.took()
            k = None if k is None else k - 1

    def _refused(self, call, error=ConfigurationError):
        with pytest.raises(error):
            call()

    # -- rules
    @precondition(lambda self: not self.closed and self.held is None)
    @rule(e=EPOCHS, k=st.one_of(st.none(), st.integers(1, NB)), default=st.booleans())
    def epoch(self, e, k, default):
        """Read epoch e (``for b in reader`` when ``default``: set_epoch's) whole or k batches."""
        if default:
            e = self.model.epoch
        gen = iter(self.reader) if default else self.reader.epoch(e)
        if self.model.start(e) is None:
            self._refused(lambda: next(gen))
            return
        self._take(gen, e, k)
        gen.close()
        self.model.end()

    @precondition(lambda self: not self.closed and self.held is None)
    @rule(e=EPOCHS, k=st.integers(1, NB - 1))
    def hold(self, e, k):
        """Start epoch e, take k batches and keep its iterator alive."""
        gen = self.reader.epoch(e)
        if self.model.start(e) is None:
            self._refused(lambda: next(gen))
            return
        self._take(gen, e, k)
        if self.model.live[2] >= NB:   # nothing left: the epoch ends with its iterator
            gen.close()
            self.model.end()
        else:
            self.held = (gen, e)
            self.state_dict()   # a state saved mid-epoch

    @precondition(lambda self: self.held is not None)
    @rule(k=st.one_of(st.none(), st.integers(1, 2)), release=st.booleans())
    def go_on(self, k, release):
        """Take more batches of the held epoch, then maybe close its iterator."""
        gen, e = self.held
        if not self.closed:
            self._take(gen, e, k)
        if release or self.closed or self.model.live[2] >= NB:
            gen.close()
            self.held = None
            if not self.closed:
                self.model.end()

    @precondition(lambda self: not self.closed and self.held is not None)
    @rule(e=EPOCHS)
    def calls_while_held(self, e):
        """One epoch at a time: another epoch, read_batch() and load_state_dict() refused."""
        self._refused(lambda: next(self.reader.epoch(e)))
        self._refused(self.reader.read_batch)
        self._refused(lambda: self.reader.load_state_dict(self.reader.state_dict()))

    @precondition(lambda self: not self.closed and self.held is None)
    @rule(count=st.integers(1, 3))
    def read_batch(self, count):
        for _ in range(count):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # prefetch does not read ahead here: said once
                batch = self.reader.read_batch()
            self._check(batch, [(self.model.t * B + j) % N for j in range(B)])
            self.model.took()

    @precondition(lambda self: not self.closed)
    @rule(e=EPOCHS)
    def set_epoch(self, e):
        self.reader.set_epoch(e)
        self.model.epoch = e

    @precondition(lambda self: not self.closed)
    @rule()
    def state_dict(self):
        state = self.reader.state_dict()
        assert (state["epoch"], state["batches"]) == self.model.position()
        self.states.append(state)

    @precondition(lambda self: not self.closed and self.held is None and self.states)
    @rule(data=st.data(), fresh=st.booleans())
    def load_state_dict(self, data, fresh):
        """Load a saved state here, or onto a new Reader (this one closed first)."""
        state = data.draw(st.sampled_from(self.states[-3:]))
        if fresh:
            self.reader.close()
            self._new()
        self.reader.load_state_dict(state)
        self.model.resume = (state["epoch"], state["batches"])
        self.model.epoch = state["epoch"]

    @precondition(lambda self: not self.closed and self.held is None
                  and any(0 < s["batches"] < NB for s in self.states))
    @rule(data=st.data(), fresh=st.booleans(), k=st.one_of(st.none(), st.integers(1, NB)))
    def resume(self, data, fresh, k):
        """Load a state saved mid-epoch and read on in that epoch (``for b in reader``)."""
        mid = [s for s in self.states if 0 < s["batches"] < NB]
        state = data.draw(st.sampled_from(mid[-3:]))
        if fresh:
            self.reader.close()
            self._new()
        self.reader.load_state_dict(state)
        self.model.resume = (state["epoch"], state["batches"])
        self.model.epoch = state["epoch"]
        self.epoch(state["epoch"], k, True)

    @precondition(lambda self: not self.closed)
    @rule()
    def close(self):
        self.reader.close()
        self.closed = True
        self._refused(self.reader.read_batch, LmdbioError)
        self._refused(lambda: next(self.reader.epoch(0)), LmdbioError)
        self._refused(self.reader.state_dict, LmdbioError)
        self._refused(lambda: self.reader.load_state_dict({}), LmdbioError)

    @precondition(lambda self: self.closed and self.held is None)
    @rule()
    def reopen(self):
        self._new()

    def teardown(self):
        if self.held is not None:
            self.held[0].close()
        if self.reader is not None and not self.closed:
            self.reader.close()


def test_reader_epochs_follow_the_model(tiny_db):
    ReaderMachine.path = tiny_db
    run = settings(max_examples=60, stateful_step_count=20, deadline=None,
                   suppress_health_check=list(HealthCheck))(ReaderMachine).TestCase
    run("runTest").runTest()
