"""Under torchrun (no MPI): exact mid-epoch resume in every shuffle mode, and the elastic order
continued on another number of ranks.

usage: python -m torch.distributed.run --standalone --nproc_per_node P torchrun_resume.py
       DB OUT modes|save|resume [--stop J]

Every process joins a gloo default group and makes ``import mpi4py`` fail
(``sys.modules["mpi4py"] = None``): each Reader and LmdbDataset (``comm`` left out) talks on
torch.distributed's group, reading with ``lmdbio-direct``. A batch's records are checked byte
for byte against py-lmdb's values. "Global batches" are each batch's shares of every rank, in
rank order (what one process reading the whole batch would get).

``modes``: for file order, ``window``, ``shard`` and ``elastic`` (prefetch 2), a Reader reads
epochs 1 and 2 and saves ``state_dict()`` after every batch of epoch 1. For every stop j (0,
then after each batch), a fresh Reader loads that state (through JSON) and reads the rest of
epoch 1 and all of epoch 2: the first j batches plus the rest are the uninterrupted run's, on
every rank, epoch 2 is its epoch 2, and epoch 1 delivers every record once across the ranks.
Then for ``shard`` and ``elastic``, LmdbDataset in a DataLoader: with ``num_workers=0``
(``ds.state_dict()`` after J items) and ``num_workers=2`` (fork; ``ds.state_dict(batches=J)``,
the state a plain DataLoader's training process gives), a fresh dataset that loads the state
yields the rest of epoch 1, then epoch 2 after ``set_epoch(2)``, as the Reader.

``save`` (P = 4 in the test): ``elastic``; a Reader reads epoch 0, then J batches of epoch 1,
and writes ``OUT/state.json`` (its state, checked equal on every rank), an LmdbDataset
(``num_workers=0``) does the same and writes ``OUT/ds-state.json``, and a ``shard`` Reader's
state after one batch goes to ``OUT/shard-state.json``. ``OUT/save-P{P}.json``: the global
batches delivered (``epoch0``, ``epoch1``, ``dataset_epoch1``).

``resume`` (another P): a fresh Reader loads ``OUT/state.json`` and reads the rest of epoch 1
and epoch 2; LmdbDatasets with ``num_workers`` 0 and 2 load ``OUT/ds-state.json`` and yield
the rest of epoch 1; the global batches go to ``OUT/resume-P{P}.json``. The shard state must
be refused on every rank with ConfigurationError naming both rank counts.

Rank 0 prints "torchrun resume STEP: ok" and every rank exits 0, or the failures and 1.
"""

import sys

sys.modules["mpi4py"] = None   # any import of mpi4py raises ImportError: no MPI on this path

import argparse
import json
from collections import Counter
from pathlib import Path

N_STOPS_DATASET = 5
B = 12   # divides among 1, 2, 3 and 4 ranks
SETTINGS = dict(seed=3, shuffle_block=7, shuffle_window=3, shuffle_partitions=4,
                coalesce_bytes=1 << 16)
MODES = [False, "window", "shard", "elastic"]


def main() -> int:
    import numpy as np
    import torch
    import torch.distributed as dist

    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("out", type=Path)
    p.add_argument("step", choices=["modes", "save", "resume"])
    p.add_argument("--stop", type=int, default=N_STOPS_DATASET)
    args = p.parse_args()

    dist.init_process_group("gloo")
    from stored import stored_values

    import lmdbio
    from lmdbio.errors import ConfigurationError
    from lmdbio.torch import LmdbDataset

    rank, P = dist.get_rank(), dist.get_world_size()
    want = stored_values(args.db)
    failures = []

    def check(ok: bool, msg: str) -> None:
        if not ok:
            failures.append(f"rank {rank}: {msg}")

    def gather(obj) -> list:
        out = [None] * P
        dist.all_gather_object(out, obj)
        return out

    def indices(batches, label: str) -> list[list[int]]:
        """This rank's batches as lists of record positions, each record's bytes checked."""
        got = []
        for b in batches:
            idx = np.asarray(b.indices).tolist()
            bad = [j for i, j in enumerate(idx) if bytes(b[i]) != want[j]]
            check(not bad, f"{label}: records {bad[:5]} differ from py-lmdb's values")
            got.append(idx)
        return got

    def global_batches(mine: list[list[int]]) -> list[list[int]]:
        everyone = gather(mine)
        check(len({len(x) for x in everyone}) == 1,
              f"the ranks took {[len(x) for x in everyone]} batches")
        return [sum((shares[t] for shares in everyone), []) for t in range(len(mine))]

    def reader(mode, **kw):
        return lmdbio.Reader(args.db, B, variant="lmdbio-direct", shuffle=mode,
                             **{**SETTINGS, **kw})

    def dataset(mode):
        return LmdbDataset(args.db, B, decode=False, shuffle=mode, **SETTINGS)

    def loader(ds, workers: int):
        return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)

    def every_record_once(epoch: list[list[int]], label: str) -> None:
        count = Counter(i for b in global_batches(epoch) for i in b)
        check(count == Counter(range(len(want))),
              f"{label}: {sum(count.values())} records delivered, {len(count)} distinct, "
              f"of {len(want)}")

    if args.step == "modes":
        for mode in MODES:
            with reader(mode, prefetch=2) as r:
                r.set_epoch(1)
                ref1, states = [], [json.loads(json.dumps(r.state_dict()))]
                for b in r:
                    ref1 += indices([b], f"shuffle={mode!r}, epoch 1")
                    states.append(json.loads(json.dumps(r.state_dict())))
                ref2 = indices(r.epoch(2), f"shuffle={mode!r}, epoch 2")
            every_record_once(ref1, f"shuffle={mode!r}, epoch 1")
            for j, state in enumerate(states):
                label = f"shuffle={mode!r}, resumed after batch {j}"
                with reader(mode, prefetch=2) as r:
                    r.load_state_dict(state)
                    rest = indices(r, label)
                    again = indices(r.epoch(2), label)
                check(ref1[:j] + rest == ref1,
                      f"{label}: {len(rest)} batches, the run's {len(ref1) - j} after it differ")
                check(again == ref2, f"{label}: epoch 2 differs from the uninterrupted run's")
                every_record_once(ref1[:j] + rest, label)
            if mode not in ("shard", "elastic"):
                continue
            for workers in (0, 2):
                label = f"LmdbDataset shuffle={mode!r}, num_workers={workers}"
                ds = dataset(mode)
                ds.set_epoch(1)
                it = iter(loader(ds, workers))
                first = indices((next(it) for _ in range(args.stop)), label)
                state = ds.state_dict() if workers == 0 else ds.state_dict(batches=args.stop)
                state = json.loads(json.dumps(state))
                del it
                ds.close()
                ds2 = dataset(mode)
                ds2.load_state_dict(state)
                again = loader(ds2, workers)
                rest = indices(again, label)
                ds2.set_epoch(2)
                second = indices(again, label)
                ds2.close()
                del again
                check(first + rest == ref1, f"{label}: {len(first)} + {len(rest)} batches "
                      f"differ from the Reader's {len(ref1)} of epoch 1")
                check(second == ref2, f"{label}: epoch 2 differs from the Reader's")
    elif args.step == "save":
        with reader("elastic") as r:
            epoch0 = global_batches(indices(r.epoch(0), "save, epoch 0"))
            it = r.epoch(1)
            epoch1 = global_batches(indices((next(it) for _ in range(args.stop)), "save"))
            it.close()
            state = r.state_dict()
        check(gather(state) == [state] * P, "the ranks' states differ")
        ds = dataset("elastic")
        ds.set_epoch(1)
        it = iter(loader(ds, 0))
        ds_epoch1 = global_batches(indices((next(it) for _ in range(args.stop)), "save, dataset"))
        ds_state = ds.state_dict()
        del it
        ds.close()
        with reader("shard") as r:
            it = r.epoch(1)
            next(it)
            it.close()
            shard_state = r.state_dict()
        if rank == 0:
            (args.out / "state.json").write_text(json.dumps(state))
            (args.out / "ds-state.json").write_text(json.dumps(ds_state))
            (args.out / "shard-state.json").write_text(json.dumps(shard_state))
            (args.out / f"save-P{P}.json").write_text(json.dumps(
                {"epoch0": epoch0, "epoch1": epoch1, "dataset_epoch1": ds_epoch1}))
    else:
        with reader("elastic") as r:
            r.load_state_dict(json.loads((args.out / "state.json").read_text()))
            rest = global_batches(indices(r, "resume"))   # the state's epoch: ``for b in r``
            r.set_epoch(2)
            epoch2 = global_batches(indices(r, "resume, epoch 2"))
        got = {"epoch1": rest, "epoch2": epoch2}
        for workers in (0, 2):
            ds = dataset("elastic")
            ds.load_state_dict(json.loads((args.out / "ds-state.json").read_text()))
            got[f"dataset_w{workers}"] = global_batches(
                indices(loader(ds, workers), f"resume, LmdbDataset num_workers={workers}"))
            ds.close()
        try:
            with reader("shard") as r:
                r.load_state_dict(json.loads((args.out / "shard-state.json").read_text()))
            check(False, "a shard state saved on other ranks was loaded")
        except ConfigurationError as exc:
            check(f"runs on {P}" in str(exc) and "saved on 4 ranks" in str(exc),
                  f"unexpected message: {exc}")
            if rank == 0:
                print(f"shard state refused: {exc}")
        if rank == 0:
            (args.out / f"resume-P{P}.json").write_text(json.dumps(got))

    check("mpi4py.MPI" not in sys.modules, "mpi4py was imported")
    failed = [f for part in gather(failures) for f in part]
    dist.destroy_process_group()
    if rank == 0:
        print("\n".join(failed[:20]) if failed else f"torchrun resume {args.step}: ok", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
