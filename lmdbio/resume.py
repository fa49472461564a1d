"""The state of a run of epochs, as :meth:`lmdbio.Reader.state_dict` and
:meth:`lmdbio.torch.LmdbDataset.state_dict` save it, and the checks before resuming one.

No MPI and no LMDB here: DataLoader workers import it.
"""

from __future__ import annotations

from .errors import ConfigurationError, SnapshotError
from .orders import get_order
from .shuffle import check_count

__all__ = ["STATE_VERSION", "run_state", "resume_point", "same_dataset"]

#: Version of the state's layout; a state of another version is refused.
STATE_VERSION = 1

# The order's settings, named as the Reader's arguments are (what users set).
_ARGS = {"block": "shuffle_block", "window": "shuffle_window", "partitions": "shuffle_partitions"}


def run_state(plan, epoch: int, batches: int, batch_size: int, nprocs: int,
              txnid: int, records: int, digest: str | None = None) -> dict:
    """The state after ``batches`` batches of ``epoch`` of an :class:`~lmdbio.pipeline.EpochPlan`.

    Plain JSON values: ``epoch``, ``batches``, then which order they are of:
    ``batch_size``, ``shuffle`` (the order's name, None for file order), ``seed``,
    ``block``, ``window``, ``partitions``, ``last_batch``, ``nprocs``, and ``dataset``.
    ``dataset`` is the snapshot: its txnid, record count and, given ``digest``
    (:func:`lmdbio.snapshot.content_digest`), what tells two files of the same txnid and
    record count apart."""
    dataset: dict = {"txnid": int(txnid), "records": int(records)}
    if digest is not None:
        dataset["digest"] = str(digest)
    return {"version": STATE_VERSION, "epoch": int(epoch), "batches": int(batches),
            "batch_size": int(batch_size), "shuffle": plan.mode, "seed": int(plan.seed),
            "block": int(plan.block), "window": int(plan.window),
            "partitions": int(plan.partitions), "last_batch": plan.last_batch,
            "nprocs": int(nprocs), "dataset": dataset}


def same_dataset(saved, mine: dict) -> bool:
    """Whether a state's ``dataset`` is the snapshot ``mine`` describes: the same txnid and
    record count, and the same content digest where both have one (a state saved without a
    digest is checked on txnid and record count only)."""
    if not isinstance(saved, dict):
        return False
    keys = ["txnid", "records"] + (["digest"] if "digest" in saved and "digest" in mine else [])
    return all(k in saved and saved[k] == mine[k] for k in keys)


def resume_point(state, mine: dict, *, what: str, opened: str, epoch_batches: int,
                 order=None) -> tuple[int, int]:
    """``(epoch, batches delivered)`` of ``state``, or the error saying why the run whose own
    state is ``mine`` cannot resume it. ``what`` names that run ("Reader", "dataset");
    ``opened`` says which file version it reads; ``epoch_batches`` is its batches per epoch;
    ``order``: the run's :class:`~lmdbio.orders.Order` (default: the registered one its state
    names), whose ``state_keys`` the state must match."""
    redo = (f"build the {what} with the state's settings to resume it, or start the epoch "
            "over without load_state_dict()")
    if not isinstance(state, dict):
        raise ConfigurationError(f"state must be a dict that Reader.state_dict() returned, "
                                 f"got a {type(state).__name__}")
    missing = [k for k in mine if k not in state]
    if missing:
        raise ConfigurationError(
            f"the state has no {', '.join(missing)}: pass a dict that Reader.state_dict() "
            "returned (LmdbDataset.state_dict() holds one under 'reader')")
    if state["version"] != STATE_VERSION:
        raise ConfigurationError(f"the state is of version {state['version']!r}; this lmdbio "
                                 f"reads version {STATE_VERSION}: start the epoch over "
                                 "without load_state_dict()")
    if not same_dataset(state["dataset"], mine["dataset"]):
        ds = state["dataset"]
        got = (f"snapshot txnid {ds.get('txnid')!r} of {ds.get('records')!r} records"
               + (f", content digest {ds['digest']}" if "digest" in ds else "")
               if isinstance(ds, dict) else repr(ds))
        raise SnapshotError(
            f"the state was saved from another version of the data set ({got}); {opened}. "
            "Resume on the version the state was saved from, or start the epoch over without "
            "load_state_dict()", expected=mine["dataset"], found=ds)
    kind = order if order is not None else get_order(mine["shuffle"] or "file")
    keys = ["batch_size", "shuffle", "last_batch", *kind.state_keys]
    diff = [f"{_ARGS.get(k, k)} {state[k]!r} in the state, {mine[k]!r} here"
            for k in keys if state[k] != mine[k]]
    if diff:
        raise ConfigurationError(
            f"the state does not match this {what}: {'; '.join(diff)}; {redo}")
    if kind.depends_on_nprocs and state["nprocs"] != mine["nprocs"]:
        raise ConfigurationError(
            f"the state was saved on {state['nprocs']!r} ranks and this {what} runs on "
            f"{mine['nprocs']}: the {kind.name} order depends on the rank count. Resume on "
            f"{state['nprocs']!r} ranks (shuffle='elastic' keeps one order on any number), "
            "or start the epoch over without load_state_dict()")
    epoch = check_count("the state's epoch", state["epoch"], 0)
    batches = check_count("the state's batches", state["batches"], 0)
    if batches > epoch_batches:
        raise ConfigurationError(f"the state says {batches} batches of epoch {epoch} were "
                                 f"delivered, but an epoch here has {epoch_batches}: {redo}")
    return epoch, batches
