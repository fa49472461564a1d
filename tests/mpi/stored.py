"""What the MPI test scripts compare with: the records as LMDB itself returns them."""

import lmdb


def stored_values(db) -> list[bytes]:
    """Every value of ``db`` in key order, read by py-lmdb (the reference for every reader)."""
    env = lmdb.open(str(db), readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return [bytes(v) for _, v in txn.cursor()]
    finally:
        env.close()


def ranks_per_node(arg: str) -> int | None:
    """The scripts' RANKS_PER_NODE argument: ``None`` (the machine's nodes) or a number."""
    return None if arg == "None" else int(arg)
