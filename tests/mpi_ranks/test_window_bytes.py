"""Bytes each node reader reads in a shuffled epoch, per shuffle mode, from the pipeline's own
counters: the window mode reads whole windows, shard and elastic each reader's run, and
lmdbio.lab.shuffle_quality.node_reader_bytes predicts them."""

import numpy as np
import pytest

import lmdbio
from conftest import sizes
from lmdbio import shuffle as sh
from lmdbio.lab import shuffle_quality as quality

pytestmark = pytest.mark.mpi

VARIANT = "lmdbio-lmm-dio-prov-coal"
N = 4000
# 64-record chunks, 32 per window: a window is 2,048 records (~8 MB of overflow pages).
BLOCK, WINDOW, SEED = 64, 32, 7
SETTINGS = dict(seed=SEED, shuffle_block=BLOCK, shuffle_window=WINDOW, coalesce_bytes=1 << 19)
MODES = {"file": False, "window": "window", "shard": "shard", "elastic": "elastic"}
RANKS_PER_NODE = {4: 2, 16: 4}
_measured: dict[tuple, dict] = {}


def window_db(made):
    return made("cifar10_4000", "cifar10", N, seed=2)


def reads(comm, db, rpn: int) -> dict[str, dict]:
    """Per mode, epoch 1 (epoch 0 first, untimed: it builds the locator's tables): ``bytes`` and
    ``calls`` of each reader's ``read`` phases, and whether the ranks' records were each record
    once (``once``). Measured once per session, for each test that asks."""
    key = (str(db), rpn)
    if key not in _measured:
        _measured[key] = {mode: one_epoch(comm, db, rpn, shuffle)
                          for mode, shuffle in MODES.items()}
    return _measured[key]


def one_epoch(comm, db, rpn: int, shuffle) -> dict:
    with lmdbio.Reader(db, 8 * comm.size, comm, variant=VARIANT, ranks_per_node=rpn,
                       build_provenance=True, shuffle=shuffle, **SETTINGS) as r:
        for _ in r.epoch(0):
            pass
        before = len([x for x in r.stats() if x["phase"] == "read"])
        idx = [b.indices.copy() for b in r.epoch(1)]
        mine = [x for x in r.stats() if x["phase"] == "read"][before:]
        counts = r.is_reader, sum(x["bytes"] for x in mine), sum(x["calls"] for x in mine)
    got = np.sort(np.concatenate([np.concatenate(i) for i in comm.allgather(idx)]))
    readers = [(b, c) for is_reader, b, c in comm.allgather(counts) if is_reader]
    return {"bytes": [b for b, _ in readers], "calls": [c for _, c in readers],
            "once": np.array_equal(got, np.arange(N))}


def every_record_once(got: dict) -> None:
    missed = [mode for mode, m in got.items() if not m["once"]]
    assert not missed, f"epochs that miss or repeat a record: {missed}"


@sizes(fast=(4,), gate=(16,))
def test_shard_mode_node_readers_read_their_part_of_each_window(comm, made, nprocs):
    """Node readers (LMM, R = P / rpn) read whole windows in window mode, R times the file
    order's bytes; in shard mode their ranks' records are one run: about file order's."""
    rpn = RANKS_PER_NODE[nprocs]
    got = reads(comm, window_db(made), rpn)
    every_record_once(got)
    R = nprocs // rpn
    assert len(got["shard"]["bytes"]) == len(got["window"]["bytes"]) == R
    assert len(got["file"]["bytes"]) == R
    for f, w, s in zip(got["file"]["bytes"], got["window"]["bytes"], got["shard"]["bytes"]):
        assert w > 0.8 * R * f, (got, "the window mode should read about R times the bytes")
        assert s < 1.15 * f, got


@sizes(gate=(4,))
def test_elastic_node_readers_read_about_file_order_bytes(comm, made, nprocs):
    """2 node readers: the window mode reads whole windows (about twice file order's bytes per
    reader); elastic reads each reader's run."""
    got = reads(comm, window_db(made), 2)
    every_record_once(got)
    assert len(got["file"]["bytes"]) == len(got["elastic"]["bytes"]) == 2
    for f, w, e in zip(got["file"]["bytes"], got["window"]["bytes"], got["elastic"]["bytes"]):
        assert w > 1.6 * f and e < 1.15 * f, got


@sizes(gate=(4,))
def test_node_reader_bytes_match_the_readers_counters(comm, made, nprocs):
    """The node readers (2 per node, the full LMDBIO stack) read within 3% of the bytes
    node_reader_bytes gives, in as many requests when shuffled."""
    rpn, batch = 2, 8 * nprocs
    got = reads(comm, window_db(made), rpn)
    every_record_once(got)
    orders = {"file": np.arange(N), "window": sh.epoch_order(N, BLOCK, WINDOW, SEED, 1),
              "shard": sh.shard_order(N, BLOCK, WINDOW, SEED, 1, batch, nprocs),
              "elastic": sh.elastic_order(N, BLOCK, WINDOW, SEED, 1, batch)}
    windows = sh.record_windows(N, BLOCK, WINDOW, SEED, 1)
    for mode, order in orders.items():
        units = np.arange(N) // batch if mode == "file" else windows[order]
        nbytes, requests = quality.node_reader_bytes(order, batch, nprocs, rpn, units)
        assert np.allclose(got[mode]["bytes"], nbytes, rtol=0.03), (mode, got[mode], nbytes)
        if mode != "file":
            assert got[mode]["calls"] == requests.tolist(), (mode, got[mode], requests)
