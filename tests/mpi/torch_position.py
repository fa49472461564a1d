"""With torch importable: LmdbDataset's lengths, and its epoch kept without a file.

usage: torch_position.py DB CHECK

CHECK is one of:

- ``len``: under each last-batch policy, ``len(ds)`` and ``ds.batches_per_epoch`` are the
  items a DataLoader yields per epoch with 0 and 3 workers (``len(loader)`` too), and in
  each worker ``len`` of its copy is the items that worker yields. Rank 0 prints
  "torch position len: ok".
- ``close``, ``sigterm``, ``exit``: one rank sets the epoch, loads a state and reads the rest
  of that epoch with 2 persistent workers, so the position goes to its workers; prints
  "pid PID"; then ends by ``close()`` followed by ``set_epoch`` and a normal exit, by SIGTERM
  to itself, or by ``os._exit(0)``. The test looks for files left behind.

Spawned workers import this file: nothing but the standard library and numpy outside
``main()``.
"""

import os
import signal
import sys


def with_worker(item):
    """collate_fn: the item, the worker that read it and the length of that worker's copy."""
    import torch

    info = torch.utils.data.get_worker_info()
    return item, info.id, len(info.dataset)


def lengths(db, comm) -> list[str]:
    import torch

    from lmdbio.torch import LmdbDataset

    failures = []
    B = 4 * comm.size
    for policy in ("short", "drop", "pad"):
        ds = LmdbDataset(db, B, decode=False, comm=comm, last_batch=policy, shuffle="elastic",
                         shuffle_block=6)
        want = ds.plan.batches
        ds.set_epoch(1)
        direct = list(torch.utils.data.DataLoader(ds, batch_size=None))
        ds.close()
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=3,
                                             collate_fn=with_worker)
        got = list(loader)
        per = {w: (n, sum(1 for _, v, _ in got if v == w)) for _, w, n in got}
        sizes = (len(ds), ds.batches_per_epoch, len(loader), len(direct), len(got))
        if sizes != (want,) * 5:
            failures.append(f"{policy}: len(ds), batches_per_epoch, len(loader), items with 0 "
                            f"and 3 workers are {sizes}, the epoch has {want} batches")
        if any(n != yielded for n, yielded in per.values()):
            failures.append(f"{policy}: each worker's (len, items yielded): {per}")
        ds.close()
    return failures


def leave(db, how: str) -> None:
    import torch
    from mpi4py import MPI

    from lmdbio.torch import LmdbDataset

    ds = LmdbDataset(db, 8, decode=False, comm=MPI.COMM_SELF, shuffle="shard", shuffle_block=6)
    ds.set_epoch(1)
    state = ds.state_dict(batches=2)
    ds.load_state_dict(state)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         persistent_workers=True)
    got = list(loader)
    assert len(got) == ds.plan.batches - 2, (len(got), ds.plan.batches)
    print(f"pid {os.getpid()}", flush=True)
    if how == "close":
        del loader
        ds.close()
        ds.set_epoch(2)
        ds.load_state_dict(state)
    elif how == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    elif how == "exit":
        os._exit(0)
    else:
        raise SystemExit(f"unknown check {how!r}")


def main() -> int:
    from mpi4py import MPI

    db, what = sys.argv[1], sys.argv[2]
    comm = MPI.COMM_WORLD
    if what != "len":
        leave(db, what)
        return 0
    mine = [f"rank {comm.rank}: {f}" for f in lengths(db, comm)]
    failures = [f for rank in comm.allgather(mine) for f in rank]
    if comm.rank == 0:
        print("\n".join(failures) if failures else "torch position len: ok", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
