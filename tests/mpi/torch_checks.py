"""Under mpiexec, with torch importable: lmdbio.torch.LmdbDataset through a real DataLoader.

usage: torch_checks.py DB

Every rank, under a gloo process group whose ranks are MPI's:

- ``DataLoader(ds, batch_size=None)`` over three epochs (``set_epoch`` each
  time, shuffled, prefetch 2) yields this rank's batches of the Reader's
  epoch, the same records in the same order as ``Reader.epoch(e)``;
- across the ranks every record comes exactly once per epoch (so every rank
  shuffled with the same permutation), the epochs' orders differ, and epoch 0
  read again is epoch 0;
- decoded items are ``torch.from_numpy`` views of the arrays
  ``Batch.as_datum_array`` returned (same address, shared memory), equal to
  the Reader's own decode.

Rank 0 prints "torch checks: ok" and every rank exits 0, or the failures and 1.
"""

import socket
import sys

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

import lmdbio
from lmdbio.batch import Batch
from lmdbio.torch import LmdbDataset

db = sys.argv[1]
comm = MPI.COMM_WORLD
B = 4 * comm.size
ARGS = dict(shuffle=True, seed=5, shuffle_block=6, shuffle_window=3)
EPOCHS = (0, 1, 2, 0)
failures = []


def check(ok: bool, what: str) -> None:
    if not ok:
        failures.append(f"rank {comm.rank}: {what}")


# A process group with MPI's ranks, as under torchrun next to mpiexec.
port = None
if comm.rank == 0:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
port = comm.bcast(port)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                        world_size=comm.size)

# What the Reader itself delivers, epoch by epoch.
with lmdbio.Reader(db, B, comm, variant="lmdbio-direct", **ARGS) as r:
    want = {e: [(np.asarray(b.indices).copy(), *(a.copy() for a in b.as_datum_array()))
                for b in r.epoch(e)] for e in set(EPOCHS)}
    n = r.n

# Records: Batches through the DataLoader (decode=False).
raw = LmdbDataset(db, B, decode=False, comm=comm, prefetch=2, **ARGS)
loader = torch.utils.data.DataLoader(raw, batch_size=None)
orders = []
for e in EPOCHS:
    raw.set_epoch(e)
    got = [np.asarray(b.indices).copy() for b in loader]
    check(len(got) == len(want[e]), f"epoch {e}: {len(got)} batches, the Reader {len(want[e])}")
    check(all(np.array_equal(g, w[0]) for g, w in zip(got, want[e])),
          f"epoch {e}: the DataLoader's records are not the Reader's")
    everyone = comm.allgather(np.concatenate(got))
    every = np.sort(np.concatenate(everyone))
    check(np.array_equal(every, np.arange(n)),
          f"epoch {e}: records not exactly once across the ranks "
          f"({len(every)} delivered, {len(np.unique(every))} distinct)")
    orders.append(np.concatenate(everyone))
raw.close()
check(not np.array_equal(orders[0], orders[1]) and not np.array_equal(orders[1], orders[2]),
      "set_epoch did not reshuffle: two epochs in the same order")
check(np.array_equal(orders[0], orders[3]), "epoch 0 read again is in another order")

# Decoded tensors: views of the arrays the batch decoder returned.
returned = []
decode = Batch.as_datum_array


def recording(self, out=None):
    arrays = decode(self, out=out)
    returned.append(arrays)
    return arrays


Batch.as_datum_array = recording
tensors = LmdbDataset(db, B, comm=comm, prefetch=2, **ARGS)
for e in (1, 2):
    tensors.set_epoch(e)
    returned.clear()
    items = list(torch.utils.data.DataLoader(tensors, batch_size=None))
    check(len(items) == len(want[e]) == len(returned), f"epoch {e}: {len(items)} tensors")
    for (x, y), (images, labels), (_, wx, wy) in zip(items, returned, want[e]):
        check(x.dtype == torch.uint8 and y.dtype == torch.int64 and x.dim() == 4,
              f"tensor types {x.dtype} {y.dtype} {tuple(x.shape)}")
        check(x.data_ptr() == images.ctypes.data and y.data_ptr() == labels.ctypes.data,
              "a tensor is a copy, not a view of the decoded arrays")
        check(np.shares_memory(x.numpy(), images), "a tensor does not share the images' memory")
        check(np.array_equal(x.numpy(), wx) and np.array_equal(y.numpy(), wy),
              f"epoch {e}: decoded tensors differ from the Reader's decode")
tensors.close()
Batch.as_datum_array = decode
dist.destroy_process_group()

failures = sum(comm.allgather(failures), [])
if comm.rank == 0:
    print("\n".join(failures) if failures else "torch checks: ok", flush=True)
sys.exit(1 if failures else 0)
