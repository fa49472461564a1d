"""Under torchrun (no MPI): a DDP training loop on CPU over LmdbDataset.

usage: python -m torch.distributed.run --standalone --nproc_per_node P torchrun_ddp.py DB VARIANT
       [--block-mpi4py]

Each rank joins a gloo default group and trains a linear model with DistributedDataParallel
over ``LmdbDataset(DB, 4 * P, variant=VARIANT)`` (``comm`` left out: torch.distributed's
group) for epochs 0 and 1 with ``num_workers`` 0, then 2 (fork). Every epoch delivers every
record once across the ranks, byte for byte py-lmdb's value (shuffled, except for ``lmdb``,
whose cursor walk reads file order). Then a Reader with a node-group variant
(``lmdbio-lmm-dio``) is refused with a ConfigurationError naming the variants that work,
and ``auto`` reads with a per-rank variant. ``--block-mpi4py`` makes ``import mpi4py`` fail
in this process (``sys.modules["mpi4py"] = None``), so every step above runs without it.

Rank 0 prints "torchrun ddp: ok" and every rank exits 0, or the failures and 1.
"""

import sys

BLOCKED = "--block-mpi4py" in sys.argv
if BLOCKED:
    sys.modules["mpi4py"] = None   # any import of mpi4py raises ImportError


def main() -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    from stored import stored_values

    import lmdbio
    from lmdbio.errors import ConfigurationError
    from lmdbio.options import parse_variant
    from lmdbio.torch import LmdbDataset

    db, variant = sys.argv[1], sys.argv[2]
    rank, P = dist.get_rank(), dist.get_world_size()
    want = stored_values(db)
    failures = []

    def check(ok: bool, msg: str) -> None:
        if not ok:
            failures.append(f"rank {rank}: {msg}")

    def gather(obj) -> list:
        out = [None] * P
        dist.all_gather_object(out, obj)
        return out

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3 * 32 * 32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    shuffle = variant != "lmdb"
    for workers in (0, 2):
        ds = LmdbDataset(db, 4 * P, decode=False, variant=variant, shuffle=shuffle, seed=3)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
        for epoch in (0, 1):
            ds.set_epoch(epoch)
            got, steps = [], 0
            for batch in loader:
                got += [(int(i), bytes(r)) for i, r in zip(batch.indices, batch)]
                if len(batch):
                    images, labels = batch.as_datum_array()
                    x = torch.from_numpy(images).float().flatten(1) / 255
                    y = torch.from_numpy(labels).long()
                else:   # a short last batch may leave this rank nothing: it still steps
                    x, y = torch.zeros(0, 3 * 32 * 32), torch.zeros(0, dtype=torch.long)
                loss = torch.nn.functional.cross_entropy(model(x), y, reduction="sum")
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
            label = f"{variant}, num_workers={workers}, epoch {epoch}"
            every = [g for part in gather(got) for g in part]
            idx = sorted(i for i, _ in every)
            check(idx == list(range(len(want))),
                  f"{label}: {len(idx)} records delivered, {len(set(idx))} distinct, of "
                  f"{len(want)}")
            bad = [i for i, v in every if v != want[i]]
            check(not bad, f"{label}: records {bad[:5]} differ from py-lmdb's values")
            order = [i for i, _ in got]
            check(shuffle != (order == sorted(order)) or len(order) < 2,
                  f"{label}: this rank's order is {'file order' if shuffle else 'shuffled'}")
            check(steps > 0, f"{label}: no training step")
        ds.close()
        del loader

    try:
        lmdbio.Reader(db, 4 * P, variant="lmdbio-lmm-dio")
        check(False, "lmdbio-lmm-dio under torchrun was not refused")
    except ConfigurationError as exc:
        msg = str(exc)
        check("'lmdbio-direct'" in msg and "'lmdb-get'" in msg and "mpiexec" in msg,
              f"the refusal does not name the variants that work: {msg}")
        if rank == 0:
            print(f"refused: {msg}")
    with lmdbio.Reader(db, 4 * P, variant="auto") as r:
        check(not parse_variant(r.variant).localized, f"auto chose {r.variant} under torchrun")
        n = sum(len(b) for b in r.epoch(0))
        if rank == 0:
            print(f"auto: {r.variant} ({r.auto_reason})")
    total = gather(n)
    check(sum(total) == len(want), f"auto read {sum(total)} records of {len(want)}")
    if BLOCKED:
        check("mpi4py.MPI" not in sys.modules, "mpi4py was imported")

    failed = [f for part in gather(failures) for f in part]
    dist.destroy_process_group()
    if rank == 0:
        print("\n".join(failed) if failed else "torchrun ddp: ok", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
