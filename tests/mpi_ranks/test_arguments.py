"""Bad arguments raise the same clear error on every rank, and no rank hangs (issue #4)."""

import lmdb
import pytest

import lmdbio
from conftest import on_rank_0, sizes
from lmdbio.errors import LmdbioError

pytestmark = pytest.mark.mpi


def cases(db: str, empty: str, P: int, rank: int) -> dict[str, tuple[dict, str]]:
    """Each case's Reader arguments and what every rank's error must say."""
    return {
        "indivisible": (dict(path=db, batch_size=P * 4 + 1), f"does not divide among {P} ranks"),
        "zero": (dict(path=db, batch_size=0), "must be positive"),
        "negative": (dict(path=db, batch_size=-P), "must be positive"),
        "missing": (dict(path=db + "-missing", batch_size=P * 4), "does not exist"),
        # The last rank lacks the path; the others repeat its message, naming it.
        "missing-on-last-rank": (dict(path=db + "-gone" if rank == P - 1 else db,
                                      batch_size=P * 4),
                                 "does not exist" if rank == P - 1 else f"rank {P - 1}: "),
        "empty": (dict(path=empty, batch_size=P * 4), "holds no records"),
        "bad-variant": (dict(path=db, batch_size=P * 4, variant="lmdbio-lmm-prov"),
                        "add 'dio'"),
    }


def empty_db(path):
    """A database that holds no records."""
    lmdb.open(str(path)).close()
    return path


@pytest.mark.parametrize("variant", ["lmdb", "lmdbio-lmm-dio"])
@sizes(fast=(4,), gate=(3,))
def test_bad_arguments_raise_on_every_rank(comm, datasets, shared_tmp, nprocs, variant):
    empty = on_rank_0(comm, lambda: empty_db(shared_tmp / "empty"))
    table = cases(str(datasets["cifar10"]), str(empty), comm.size, comm.rank)
    raised: dict[str, Exception | None] = {}
    for name, (kw, _) in table.items():
        try:
            with lmdbio.Reader(comm=comm, **{"variant": variant, **kw}) as r:
                r.read_batch()
            raised[name] = None
        except Exception as exc:   # asserted below, once every rank has taken every step
            raised[name] = exc
        comm.Barrier()
    for name, (_, needle) in table.items():
        exc = raised[name]
        assert isinstance(exc, (ValueError, TypeError, LmdbioError)), f"{name}: {exc!r}"
        assert needle in str(exc), f"{name}: {exc!r} does not say {needle!r}"
