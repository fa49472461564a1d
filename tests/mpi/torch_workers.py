"""Under mpiexec, with torch importable: LmdbDataset through DataLoaders with workers.

usage: torch_workers.py DB CHECK

CHECK is one of:

- ``order``: ``num_workers`` 0, 2 started with fork and 2 started with spawn deliver
  epoch 1 as the Reader does (the same records, byte for byte, in the same order), every
  record once across the ranks, in file order and under ``shuffle="shard"`` (whose order
  depends on the rank count); decoded tensors from workers equal the Reader's decode; the
  dataset pickles without its communicator or Reader.
- ``persistent``: ``persistent_workers=True`` over epochs 0, 1, 0 with ``set_epoch`` before
  each: the same worker processes deliver each epoch's own order.
- ``resume``: with 2 workers, epoch 1 stopped after 5 items and ``ds.state_dict(batches=5)``
  taken in the training process; a new dataset that loads it (through JSON) yields the rest
  of epoch 1, then epoch 2. Then the workers' own states, as StatefulDataLoader keeps them
  (torchdata's when it imports; otherwise each item's worker state taken in the worker after
  the item, as StatefulDataLoader does, and loaded in each worker before its iterator is
  made, through ``worker_init_fn``): stopped after 4 items, resumed in order; loaded into 3
  workers, refused.
- ``readers``: ``max_readers=2`` with 2 workers on 2 ranks raises ConfigurationError naming
  ``max_readers`` and the 6 readers needed.

Rank 0 prints "torch workers CHECK: ok" and every rank exits 0, or the failures and 1.
Spawned workers import this file, so nothing but the standard library and numpy is
imported outside ``main()``.
"""

import json
import pickle
import sys

import numpy as np

ARGS = dict(seed=5, shuffle_block=6, shuffle_window=3)


def worker_state(item):
    """collate_fn: the item and its worker's dataset state, taken after the item (as
    StatefulDataLoader snapshots a worker)."""
    import torch

    info = torch.utils.data.get_worker_info()
    return item, info.id, info.dataset.state_dict()


def records(batches) -> list[tuple[np.ndarray, list[bytes]]]:
    return [(np.asarray(b.indices).copy(), [bytes(r) for r in b]) for b in batches]


def main() -> int:
    import torch
    from mpi4py import MPI

    import lmdbio
    from lmdbio.errors import ConfigurationError
    from lmdbio.format import read_meta
    from lmdbio.torch import LmdbDataset

    db, what = sys.argv[1], sys.argv[2]
    comm = MPI.COMM_WORLD
    B = 4 * comm.size
    failures = []

    def check(ok: bool, msg: str) -> None:
        if not ok:
            failures.append(f"rank {comm.rank}: {msg}")

    def reader_epochs(epochs, **args):
        with lmdbio.Reader(db, B, comm, variant="lmdbio-direct", **args) as r:
            return {e: [(np.asarray(b.indices).copy(), [bytes(x) for x in b],
                         *(a.copy() for a in b.as_datum_array())) for b in r.epoch(e)]
                    for e in epochs}

    def same(got, want, label: str) -> None:
        check(len(got) == len(want), f"{label}: {len(got)} batches, the Reader {len(want)}")
        for t, ((gi, gv), w) in enumerate(zip(got, want)):
            if not np.array_equal(gi, w[0]):
                check(False, f"{label}: batch {t} holds records {gi.tolist()}, the Reader's "
                             f"{w[0].tolist()}")
                return
            if gv != w[1]:
                check(False, f"{label}: batch {t}'s bytes differ from the Reader's")
                return

    def once(got, label: str) -> None:
        every = np.sort(np.concatenate(sum(comm.allgather([g[0] for g in got]), [])))
        check(np.array_equal(every, np.arange(n)),
              f"{label}: {len(every)} records delivered, {len(np.unique(every))} distinct, "
              f"of {n}")

    def tensors(items):
        return [(x.numpy().copy(), y.numpy().copy()) for x, y in items]

    n = read_meta(db).entries

    if what == "order":
        for shuffle in (False, "shard"):
            args = dict(ARGS, shuffle=shuffle)
            want = reader_epochs([1], **args)[1]
            for workers, start in ((0, None), (2, "fork"), (2, "spawn")):
                label = f"shuffle={shuffle!r}, num_workers={workers} ({start})"
                ds = LmdbDataset(db, B, decode=False, comm=comm, **args)
                ds.set_epoch(1)
                got = records(torch.utils.data.DataLoader(ds, batch_size=None,
                                                          num_workers=workers,
                                                          multiprocessing_context=start))
                same(got, want, label)
                once(got, label)
                if workers == 0:   # the Reader is open: a copy carries none of it
                    copy = pickle.loads(pickle.dumps(ds))
                    check(copy.comm is None and copy.reader is None and copy.plan == ds.plan,
                          "the pickled dataset carries its communicator or Reader")
                ds.close()
            ds = LmdbDataset(db, B, comm=comm, **args)
            ds.set_epoch(1)
            got = tensors(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
            ds.close()
            check(len(got) == len(want) and all(np.array_equal(x, w[2]) and np.array_equal(y, w[3])
                                                for (x, y), w in zip(got, want)),
                  f"shuffle={shuffle!r}: the workers' decoded tensors differ from the Reader's")
    elif what == "persistent":
        args = dict(ARGS, shuffle=True)
        want = reader_epochs([0, 1], **args)
        ds = LmdbDataset(db, B, decode=False, comm=comm, **args)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                             persistent_workers=True)
        pids = []
        for e in (0, 1, 0):
            ds.set_epoch(e)
            got = records(loader)
            pids.append(tuple(w.pid for w in loader._iterator._workers))
            same(got, want[e], f"persistent workers, epoch {e}")
            once(got, f"persistent workers, epoch {e}")
        check(len(set(pids)) == 1, f"the workers were started again: {pids}")
        check(not np.array_equal(want[0][0][0], want[1][0][0]), "epochs 0 and 1 share an order")
        del loader
        ds.close()
    elif what == "resume":
        args = dict(ARGS, shuffle="elastic")
        want = reader_epochs([1, 2], **args)
        want = {e: [(w[2], w[3]) for w in v] for e, v in want.items()}

        def agree(got, label):
            for e, items in got.items():
                check(len(items) == len(want[e]) and all(
                    np.array_equal(x, wx) and np.array_equal(y, wy)
                    for (x, y), (wx, wy) in zip(items, want[e])),
                    f"{label}: epoch {e}'s tensors ({len(items)}) are not the Reader's "
                    f"({len(want[e])})")

        # The training process's state, with the count it cannot see.
        ds = LmdbDataset(db, B, comm=comm, **args)
        ds.set_epoch(1)
        it = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
        first = tensors(next(it) for _ in range(5))
        state = json.loads(json.dumps(ds.state_dict(batches=5)))
        del it
        ds.close()
        ds = LmdbDataset(db, B, comm=comm, **args)
        ds.load_state_dict(state)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
        rest = tensors(loader)
        ds.set_epoch(2)
        agree({1: first + rest, 2: tensors(loader)}, "state_dict(batches=5) with 2 workers")
        ds.close()

        # The workers' own states.
        try:
            from torchdata.stateful_dataloader import StatefulDataLoader
        except ImportError:
            StatefulDataLoader = None
        if StatefulDataLoader is not None:
            ds = LmdbDataset(db, B, comm=comm, **args)
            ds.set_epoch(1)
            loader = StatefulDataLoader(ds, batch_size=None, num_workers=2)
            it = iter(loader)
            first = tensors(next(it) for _ in range(5))
            saved = json.loads(json.dumps(loader.state_dict()))
            del it, loader
            ds.close()
            ds = LmdbDataset(db, B, comm=comm, **args)
            loader = StatefulDataLoader(ds, batch_size=None, num_workers=2)
            loader.load_state_dict(saved)
            ds.set_epoch(1)
            rest = tensors(loader)
            ds.set_epoch(2)
            agree({1: first + rest, 2: tensors(loader)}, "StatefulDataLoader, 2 workers")
            ds.close()
        else:
            ds = LmdbDataset(db, B, comm=comm, **args)
            ds.set_epoch(1)
            it = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                                  collate_fn=worker_state))
            first, states = [], {}
            for _ in range(4):
                item, w, s = next(it)
                first.append(item)
                states[w] = json.loads(json.dumps(s))
            first = tensors(first)
            del it
            ds.close()

            def loads(worker_id):
                info = torch.utils.data.get_worker_info()
                info.dataset.load_state_dict(states[worker_id])

            ds = LmdbDataset(db, B, comm=comm, **args)
            rest = tensors(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                                       worker_init_fn=loads))
            ds.set_epoch(2)
            second = tensors(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
            agree({1: first + rest, 2: second}, "the workers' own states, 2 workers")
            try:
                list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=3,
                                                 worker_init_fn=lambda w: loads(w % 2)))
                check(False, "2 workers' states were loaded into 3 workers")
            except ConfigurationError as exc:
                check("resume with num_workers=2" in str(exc), f"unexpected message: {exc}")
            ds.close()
    elif what == "readers":
        ds = LmdbDataset(db, B, comm=comm, max_readers=2)
        try:
            list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
            check(False, "max_readers=2 was accepted for 2 ranks x 3 readers")
        except ConfigurationError as exc:
            check("max_readers=2 is too small" in str(exc)
                  and f"{comm.size} rank(s) on this node x (2 DataLoader workers" in str(exc)
                  and f"max_readers={3 * comm.size} or more" in str(exc),
                  f"unexpected message: {exc}")
        ds.close()
    else:
        raise SystemExit(f"unknown check {what!r}")

    failures = sum(comm.allgather(failures), [])
    if comm.rank == 0:
        print("\n".join(failures) if failures else f"torch workers {what}: ok", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
