"""Under mpiexec, with torch importable: LmdbDataset's state_dict / load_state_dict, called as
torchdata's StatefulDataLoader calls them on an iterable dataset.

usage: torch_resume.py DB

Every rank: a ``DataLoader(ds, batch_size=None)`` over epoch 1 (``set_epoch(1)``, elastic
shuffle, prefetch 2) stops after 5 items and takes ``ds.state_dict()`` (through JSON, as a
checkpoint would). A fresh LmdbDataset loads it (``load_state_dict`` before the loader's
iterator is made, StatefulDataLoader's order) and its loader yields the rest of epoch 1, then
epoch 2 after ``set_epoch(2)``: the same tensors, in the same order, as ``Reader.epoch(1)`` and
``Reader.epoch(2)``. With torchdata installed the resumed loader is its StatefulDataLoader,
given ``loader.state_dict()``. A state of another batch size is refused on every rank with
ConfigurationError. Rank 0 prints "torch resume: ok" and every rank exits 0, or the failures
and 1.
"""

import json
import sys

import numpy as np
import torch
from mpi4py import MPI

import lmdbio
from lmdbio.errors import ConfigurationError
from lmdbio.torch import LmdbDataset

try:
    from torchdata.stateful_dataloader import StatefulDataLoader
except ImportError:
    StatefulDataLoader = None

db = sys.argv[1]
comm = MPI.COMM_WORLD
B = 4 * comm.size
ARGS = dict(shuffle="elastic", seed=5, shuffle_block=6, shuffle_window=3, prefetch=2)
STOP = 5
failures = []


def check(ok: bool, what: str) -> None:
    if not ok:
        failures.append(f"rank {comm.rank}: {what}")


def arrays(items) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(x.numpy().copy(), y.numpy().copy()) for x, y in items]


with lmdbio.Reader(db, B, comm, variant="lmdbio-direct", **ARGS) as r:
    want = {e: [tuple(a.copy() for a in b.as_datum_array()) for b in r.epoch(e)] for e in (1, 2)}

loader_class = StatefulDataLoader or torch.utils.data.DataLoader
ds = LmdbDataset(db, B, comm=comm, **ARGS)
ds.set_epoch(1)
loader = loader_class(ds, batch_size=None)
it = iter(loader)
first = arrays(next(it) for _ in range(STOP))
ds_state = json.loads(json.dumps(ds.state_dict()))
saved = json.loads(json.dumps(loader.state_dict())) if StatefulDataLoader else ds_state
del it
ds.close()

ds2 = LmdbDataset(db, B, comm=comm, **ARGS)
loader2 = loader_class(ds2, batch_size=None)
if StatefulDataLoader:
    loader2.load_state_dict(saved)
else:
    ds2.load_state_dict(saved)
rest = arrays(loader2)
ds2.set_epoch(2)
second = arrays(loader2)
ds2.close()

for e, got in ((1, first + rest), (2, second)):
    check(len(got) == len(want[e]), f"epoch {e}: {len(got)} items, the Reader gave {len(want[e])}")
    check(all(np.array_equal(x, wx) and np.array_equal(y, wy)
              for (x, y), (wx, wy) in zip(got, want[e])),
          f"epoch {e}: the resumed loader's tensors differ from the Reader's")

ds3 = LmdbDataset(db, 2 * B, comm=comm, **ARGS)
ds3.load_state_dict(ds_state)
try:
    list(torch.utils.data.DataLoader(ds3, batch_size=None))
    check(False, "a state of another batch size was loaded")
except ConfigurationError as exc:
    check(f"batch_size {B} in the state, {2 * B} here" in str(exc), f"unexpected message: {exc}")
ds3.close()

failures = sum(comm.allgather(failures), [])
if comm.rank == 0:
    print("\n".join(failures) if failures else
          f"torch resume: ok ({'StatefulDataLoader' if StatefulDataLoader else 'DataLoader'})")
sys.exit(1 if failures else 0)
