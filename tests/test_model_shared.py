"""The model on the shared target: the probe's rows become S's requests per read, for shared:* only.

The probe itself (root, loop devices) is marked ``throttled`` and skips, saying
why, where a shared target cannot be made.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from lmdbio.errors import ConfigurationError
from lmdbio.lab.model import mechanisms as mech
from lmdbio.lab.model import sharedprobe as sp
from lmdbio.lab.model.platform import Workload, load_platform
from lmdbio.lab.model.predict import predict_point
from lmdbio.lab.model.validate import shared_profile, throttled_profile

from test_model import fake_calibration

CAL = fake_calibration()
W = Workload(name="cifar10", record_bytes=3087, batch_size=256, iterations=4)


def _row(kind, length, s_ios, s_bytes, K=1, pieces=1, node=0, repeat=0):
    return {"kind": kind, "node": node, "length": length, "K": K, "stride": 0, "repeat": repeat,
            "offset": 7 * 4096, "calls": 1, "pieces": pieces, "start_resident": 0.0,
            "s_ios": s_ios, "s_bytes": s_bytes, "s_dev_requests": s_ios, "s_dev_bytes": s_bytes,
            "node_ios": s_ios, "node_bytes": s_bytes, "wall_s": 0.01}


@pytest.fixture()
def probe_dir(tmp_path):
    """A probe as sharedprobe.write leaves it: a read passes as one request up to 1280 KiB."""
    rows = [_row("pread", 64 << 10, 1, 64 << 10), _row("pread", 1 << 20, 1, 1 << 20),
            _row("pread", 1 << 20, 3, 1 << 20, repeat=1),
            _row("pread", 1 << 20, 1, 1 << 20, repeat=2),
            _row("pread", 4 << 20, 4, 4 << 20), _row("pread", 1 << 20, 1, 1 << 20, node=1),
            _row("pread-seq", 1 << 20, sp.SEQ_READS, sp.SEQ_READS << 20),
            _row("pread-cached", 1 << 20, 4, 1 << 20, pieces=4),
            _row("willneed", 256 << 10, 1, 256 << 10), _row("willneed", 1 << 20, 2, 1 << 20),
            _row("mmap", sp.FAULT_BYTES, 512, sp.FAULT_BYTES, K=1),
            _row("mmap", sp.FAULT_BYTES, 540, sp.FAULT_BYTES, K=4)]
    queue = [{"role": "node0", "device": "/dev/loop1", "dio": "1", "read_ahead_kb": 64,
              "max_sectors_kb": 1280, "max_hw_sectors_kb": 1280, "max_segments": 128,
              "max_segment_size": 65536, "logical_block_size": 512},
             {"role": "S", "device": "/dev/loop0", "dio": "0", "read_ahead_kb": 128,
              "max_sectors_kb": 1280, "max_hw_sectors_kb": 1280, "max_segments": 128,
              "max_segment_size": 65536, "logical_block_size": 512}]
    return sp.write(rows, queue, {"kind": "shared"}, {"read_bps": 1, "read_iops": 1},
                    tmp_path / "shared", config={"test": True})


def _shared(probe_dir, nprocs=4):
    probe = sp.load_probe(probe_dir)
    plat = load_platform("this-machine").with_(ranks_per_node=4, shared_probe=str(probe_dir))
    return plat.with_(storage=shared_profile("gpfs-2017", {}, nprocs, probe))


def test_pieces_counts_the_runs_between_cached_pages():
    # 256 pages from page 7: pages 75, 150 and 225 are cached, four runs around them.
    assert sp.pieces(1 << 20, 7 * 4096, 75) == 4
    assert sp.pieces(75 * 4096, 75 * 4096, 75) == 1          # starts on a cached page
    assert sp.pieces(77 * 4096, 0, 75) == 2                  # pages 0 and 75 cached, 76 not
    assert sp.pieces(10 * 4096, 4096, 0) == 1                # nothing cached


def test_load_probe_takes_medians_per_read_and_the_node_devices_limits(probe_dir):
    p = sp.load_probe(probe_dir)
    assert p.pread == ((64 << 10, 1.0, 65536.0), (1 << 20, 1.0, 1048576.0),
                       (4 << 20, 4.0, 4194304.0))           # node 0 only; the median of 1, 3, 1
    assert p.seq == ((1 << 20, 1.0, 1048576.0),)           # per read of the back-to-back six
    assert p.cached == ((1 << 20, 4.0, 4.0),)
    assert (p.node_read_ahead, p.node_max_request, p.s_max_request) == (64 << 10, 1280 << 10,
                                                                         1280 << 10)
    assert mech.load_faulters(p.faulters_csv) == ((1, 1.0), (4, 540 / 512))


def test_load_probe_names_what_is_missing(probe_dir, tmp_path):
    (probe_dir / "queue.csv").unlink()
    with pytest.raises(ConfigurationError, match="queue.csv"):
        sp.load_probe(probe_dir)
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in ("faulters.csv", "queue.csv"):
        (bad / f).write_text("K,dev_read_ios\n1,1\n")
    pd.DataFrame({"kind": ["mmap"], "length": [1]}).to_csv(bad / "requests.csv", index=False)
    with pytest.raises(ConfigurationError, match="pread rows"):
        sp.load_probe(bad)


def test_explicit_reads_on_the_shared_target_take_the_probes_requests(probe_dir):
    plat = _shared(probe_dir)
    plain = plat.with_(shared_probe="")
    # P = 4: one node, one reader, one 1 MiB extent per batch: one request at S, not 128 KiB ones.
    got = predict_point(plat, W, "lmdbio-lmm-dio-prov", 4, CAL)
    was = predict_point(plain, W, "lmdbio-lmm-dio-prov", 4, CAL)
    assert got["storage_requests"] == pytest.approx(1.0)
    assert was["storage_requests"] >= 8
    assert got["read_s"] < was["read_s"]
    # P = 16: four readers of 64 records each, one request each (the isolated pread rows).
    got16 = predict_point(_shared(probe_dir, 16), W, "lmdbio-lmm-dio-prov", 16, CAL)
    assert got16["storage_requests"] == pytest.approx(4.0)


def test_dio_reads_on_the_index_node_are_cut_by_its_cached_leaf_pages(probe_dir):
    plat = _shared(probe_dir)
    dio = predict_point(plat, W, "lmdbio-lmm-dio", 4, CAL)
    prov = predict_point(plat, W, "lmdbio-lmm-dio-prov", 4, CAL)
    geo = mech.geometry(3087)
    cut = mech.leaf_pieces(256 * geo["file_bytes_per_record"],
                           geo["records_per_leaf"] * geo["file_bytes_per_record"])
    assert 4 < cut < 5
    assert dio["storage_requests"] == pytest.approx(cut * prov["storage_requests"])
    # Only node 0 ran the index pass: at P = 16 the other three readers read whole extents.
    dio16 = predict_point(_shared(probe_dir, 16), W, "lmdbio-lmm-dio", 16, CAL)
    cut16 = mech.leaf_pieces(64 * geo["file_bytes_per_record"],
                             geo["records_per_leaf"] * geo["file_bytes_per_record"])
    assert dio16["storage_requests"] == pytest.approx(cut16 + 3)


def test_faulters_on_the_shared_target_come_from_the_probe(probe_dir):
    plat = _shared(probe_dir)
    got = predict_point(plat, W, "lmdb", 4, CAL)
    assert got["faulter_factor"] == pytest.approx(540 / 512)
    thr = predict_point(plat.with_(shared_probe=""), W, "lmdb", 4, CAL)
    assert thr["faulter_factor"] > 1.3          # the throttled device's curve (this-machine.toml)


def test_the_probe_changes_shared_predictions_only(probe_dir):
    plat = load_platform("this-machine").with_(ranks_per_node=4, shared_probe=str(probe_dir))
    thr = plat.with_(storage=throttled_profile("gpfs-2017", {"time_scale": 1.0}, 4))
    for v in ("lmdb", "lmdbio-lmm-dio", "lmdbio-lmm-dm"):
        a = predict_point(thr, W, v, 4, CAL)
        b = predict_point(thr.with_(shared_probe=""), W, v, 4, CAL)
        assert a["per_iteration_s"] == b["per_iteration_s"]
        assert a["storage_requests"] == b["storage_requests"]


def test_shared_profile_takes_the_node_devices_window_and_request():
    fields = ["node_read_ahead", "node_max_request"]
    probe = dataclasses.make_dataclass("P", fields)(128 << 10, 512 << 10)
    prof = shared_profile("gpfs-2017", {}, 16, probe)
    assert (prof.readahead, prof.read_size) == (128 << 10, 512 << 10)
    assert shared_profile("gpfs-2017", {}, 16).read_size == 1280 << 10


def test_dm_edge_readaround_is_one_window_per_reader_on_block_devices_only():
    plat = load_platform("this-machine").with_(ranks_per_node=4)
    thr = plat.with_(storage=throttled_profile("gpfs-2017", {"time_scale": 1.0}, 4))
    ra = thr.storage.readahead
    assert mech.edge_readaround(1, ra) == 0.0 and mech.edge_readaround(4, ra) == ra
    one = predict_point(thr, W, "lmdbio-lmm-dm", 4, CAL, cache="cold")       # 1 node, 1 reader
    four = predict_point(thr, W, "lmdbio-lmm-dm", 16, CAL, cache="cold")     # 4 nodes, 4 readers
    assert one["edge_readaround_bytes"] == 0.0 and four["edge_readaround_bytes"] == ra
    # The same global batch's bytes in 4 groups (their block alignment adds a little), plus one
    # window per reader.
    assert 4 * ra <= four["storage_bytes"] - one["storage_bytes"] <= 6 * ra
    # A PFS profile's mmap faults are its daemon's: no edge read-around there.
    bebop = load_platform("bebop")
    gpfs = predict_point(bebop, bebop.workloads[0], "lmdbio-lmm-dm", 288, CAL)
    assert gpfs.get("edge_readaround_bytes", 0.0) == 0.0


def test_the_committed_probe_reads_as_the_model_uses_it():
    """The probe in data/results/model_calibration/shared: its cached-page rows up to the node
    device's largest request (DIO's extents in the sweeps are at most 1.06 MB) agree with the
    model's pieces times its pread curve. A longer read also reads ahead past its end (the 4 MiB
    row: 21 requests for 14 pieces), which the pieces do not count."""
    try:
        p = sp.load_probe()
    except ConfigurationError as exc:
        pytest.skip(f"no committed probe: {exc}")
    from lmdbio.lab.model.requests import curve_requests

    assert p.node_max_request >= 128 << 10
    checked = [c for c in p.cached if c[0] <= p.node_max_request]
    assert checked
    for L, n_pieces, requests in checked:
        cut = mech.leaf_pieces(L, sp.STRIDE_PAGES * sp.PAGE)      # the model's expected pieces
        assert cut == pytest.approx(n_pieces, rel=0.25), (L, n_pieces, cut)
        per, _ = curve_requests(L / cut, p.node_max_request, p.pread)
        assert requests == pytest.approx(cut * per, rel=0.25), (L, n_pieces, requests)


@pytest.mark.throttled
@pytest.mark.gate
def test_the_probe_measures_a_real_shared_target(tmp_path):
    from lmdbio.lab.storage.shared import shared_available

    ok, why = shared_available()
    if not ok:
        pytest.skip(f"no shared storage target here: {why}")
    rows, queue, stats, budget = sp.measure(repeats=1, workdir=tmp_path, progress=False,
                                            lengths=(64 << 10, 1 << 20), faulter_counts=(1,))
    d = pd.DataFrame(rows)
    pr = d[(d["kind"] == "pread") & (d["node"] == 0)].set_index("length")
    assert (pr["s_bytes"] >= pr.index).all()             # at least what was asked, from S
    assert (d["start_resident"] == 0).all()              # every measurement started cold
    one = d[(d["kind"] == "pread") & (d["length"] == 1 << 20)]
    assert one["s_bytes"].min() > 0 and (one["node"] == 1).sum() == 1   # caches are private
    assert {q["role"] for q in queue} == {"node0", "node1", "S"}
    sp.write(rows, queue, stats, budget, tmp_path / "out")
    assert sp.load_probe(tmp_path / "out").pread


def test_validation_counts_the_storage_traffic_of_the_timed_iterations(tmp_path):
    # The bench takes the storage counters just inside the timed loop: the warm-up is not in them.
    from lmdbio.lab.model.validate import validate

    d = tmp_path / "local"
    d.mkdir()
    pd.DataFrame([{"dataset_name": "cifar10", "variant": "lmdbio-lmm-dio-prov", "nprocs": 1,
                   "cache": "cold", "storage": "local", "batch_size": 256, "iters": 64,
                   "warmup": 40, "ranks_per_node": 0, "readers_per_node": 1, "status": "ok",
                   "wall_s": 1.0, "records": 16384, "record_bytes": 16384 * 3087,
                   "pfs_requests": 64.0, "pfs_bytes": 64 * 256 * 4151.0}]).to_csv(d / "summary.csv",
                                                                                  index=False)
    row = validate([d / "summary.csv"], "this-machine", CAL, budget=2000).iloc[0]
    w = Workload(name="cifar10", record_bytes=3087, batch_size=256, iterations=64)
    one = predict_point(load_platform("this-machine"), w, "lmdbio-lmm-dio-prov", 1, CAL,
                        cache="cold", budget=2000)
    assert row["pred_storage_bytes"] == pytest.approx(64 * one["storage_bytes"])
    assert row["pred_storage_requests"] == pytest.approx(64 * one["storage_requests"])
