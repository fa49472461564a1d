"""The scale model: each mechanism moves the right way, calibration round-trips, predict covers 9,216."""

from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd
import pytest

from lmdbio.errors import ConfigurationError, LmdbioError
from lmdbio.lab.model import mechanisms as mech
from lmdbio.lab.model.calibrate import Calibration, FIXED_VARIANTS, load_calibration, save_calibration
from lmdbio.lab.model.cli import _procs
from lmdbio.lab.model.platform import Workload, load_platform
from lmdbio.lab.model.predict import PHASES, POWERS, predict, predict_point
from lmdbio.lab.model.streams import Stream, run_phase
from lmdbio.options import VARIANTS
from lmdbio.lab.pfs.model import load_profile


def fake_calibration(**over) -> Calibration:
    """Plausible costs of a small machine (tests must not depend on a committed calibration)."""
    kw = dict(cores=2, cursor_step_s=1e-7, page_fault_s=1e-8, copy_record_s=5e-7, memcpy_byte_s=2e-10,
              pread_call_s=2e-6, pread_byte_s=2e-10, plan_record_s=3e-8, handoff_s=1e-5,
              mpi_alpha_s=5e-6, mpi_beta_s=3e-10, member_batch_s=3e-5, member_crowded_s=6e-5, crowd_per_core=8, crowd_cpu_factor=2.0,
              disk_latency_s=1e-4, disk_bw=1.5e9, disk_readahead=128 << 10,
              disk_max_request=1 << 20, batch_s={v: 5e-5 for v in FIXED_VARIANTS},
              record_s={v: 1e-6 for v in FIXED_VARIANTS}, record_bytes=3087,
              pfs_inflight=1.5, pfs_inflight_source="test: a plausible FUSE depth")
    kw.update(over)
    return Calibration(**kw)


CAL = fake_calibration()


# ---------------------------------------------------------------- mechanisms, one by one

def test_fault_cost_grows_with_waiting_processes():
    costs = [mech.fault_cpu(w, 1e-6, 1e-5) for w in (1, 2, 8, 36)]
    assert costs == sorted(costs) and costs[0] < costs[-1]
    assert mech.fault_cpu(1, 1e-6, 1e-5) == pytest.approx(1e-6)   # alone: no one else wakes it


def test_cursor_walk_is_p_fold_and_the_ring_walks_only_its_own_records():
    b = 64
    walks = [mech.cursor_steps("walk", b * p, b) for p in (1, 4, 16)]
    assert walks == [64, 256, 1024]
    assert [mech.cursor_steps("ring", b * p, b) for p in (1, 4, 16)] == [64, 64, 64]
    assert mech.cursor_steps("provenance", 1024, 64) == 0
    assert mech.ring_cycle(8, 64, 1e-7, 1e-6) > mech.ring_cycle(2, 64, 1e-7, 1e-6)


def test_implicit_requests_are_small_and_explicit_ones_follow_the_read_size():
    nbytes = 8 << 20
    faults_no_ra, size, _ = mech.mmap_requests(nbytes, 0, 256 << 10)
    assert size == 4096 and faults_no_ra == nbytes / 4096
    faults_ra, _, _ = mech.mmap_requests(nbytes, 128 << 10, 256 << 10)
    assert faults_ra < faults_no_ra
    small = mech.explicit_requests(nbytes, 256 << 10, 0)[0]
    large = mech.explicit_requests(nbytes, 4 << 20, 4 << 20)[0]
    assert large < small                      # larger requests, fewer of them
    assert mech.explicit_requests(1000, 4 << 20, 0)[1] == 4096   # never larger than the data


def test_explicit_read_depth_is_a_parameter_and_more_depth_is_faster():
    n, size, depth = mech.explicit_requests(4 << 20, 256 << 10, 64 << 10, 1.5)
    assert size == 128 << 10 and n == 32 and depth == 1.5
    assert mech.explicit_requests(4 << 20, 256 << 10, 64 << 10, 100)[2] == 32   # at most n
    with pytest.raises(ValueError, match="inflight"):
        mech.explicit_requests(4 << 20, 256 << 10, 64 << 10, 0.5)
    prof = load_profile("gpfs-2017", time_scale=1.0)
    times = [run_phase(prof, 1, [Stream(node=0, n=n, size=size, depth=d)])[0][0]
             for d in (1, 1.5, 2, 12)]
    assert times == sorted(times, reverse=True) and times[0] > 4 * times[-1]
    # One at a time: n x (latency + transfer). 1.5 in flight is simulated (alternating one and two
    # slots), no longer one / 1.5: it lies between depth 1 and depth 2.
    one = n * (prof.latency_s + size / prof.target_bw)
    assert times[0] == pytest.approx(one, rel=1e-6) and times[2] <= times[1] < times[0]


def test_predicted_explicit_read_time_falls_with_the_depth():
    w = Workload(name="w", record_bytes=196623, batch_size=256, records=2000, iterations=6)
    pfs = load_platform("this-machine").with_(storage="gpfs-2017")

    def read(plat, cal, variant="lmdbio-lmm-dio-prov"):
        return predict_point(plat, w, variant, 1, cal, cache="cold")["read_s"]
    # From the calibration (pfs storage, explicit_inflight = 0) ...
    r = [read(pfs, fake_calibration(pfs_inflight=d)) for d in (1.0, 1.5, 4.0, 12.0)]
    assert r == sorted(r, reverse=True) and r[0] > 2 * r[-1]
    # ... or from the platform, which wins over the calibration.
    fixed = [read(pfs.with_(explicit_inflight=d), fake_calibration(pfs_inflight=1.0)) for d in (1, 12)]
    assert fixed[0] > fixed[1]
    assert predict_point(pfs.with_(explicit_inflight=3), w, "lmdbio-lmm-dio", 1, CAL,
                         cache="cold")["explicit_inflight"] == 3
    # Page faults do not use the explicit depth.
    assert read(pfs, fake_calibration(pfs_inflight=1.0), "lmdbio-lmm") == pytest.approx(
        read(pfs, fake_calibration(pfs_inflight=12.0), "lmdbio-lmm"))
    # Without a measured depth the stated estimate applies, and says so.
    from lmdbio.lab.model.predict import explicit_depth
    d, why = explicit_depth(pfs, fake_calibration(pfs_inflight=float("nan"),
                                                  pfs_inflight_source="skipped: no FUSE"))
    assert d == mech.IN_FLIGHT and "skipped: no FUSE" in why
    assert explicit_depth(load_platform("bebop"), CAL) == (12.0, "platform bebop: explicit_inflight")


def test_larger_stripe_aligned_requests_mean_fewer_requests():
    stripe = 256 << 10
    per_byte = [mech.stripe_pieces(r, stripe) / r for r in (stripe, 4 * stripe, 16 * stripe)]
    assert per_byte == sorted(per_byte, reverse=True)
    assert mech.stripe_pieces(stripe, stripe) == 1
    assert mech.stripe_pieces(stripe + 1, stripe) == 2


def test_coalescing_picks_more_batches_for_smaller_batches():
    ks = [mech.coalesce_factor(g, 4 << 20, 10_000) for g in (4 << 20, 1 << 20, 100_000)]
    assert ks == sorted(ks) and ks[0] == 1
    assert all(k & (k - 1) == 0 for k in ks)      # powers of two
    assert mech.coalesce_factor(100_000, 4 << 20, 3) <= 3
    assert mech.coalesce_factor(100_000, 0, 100) == 1


def test_stagger_groups_split_the_readers():
    assert sum(mech.stagger_groups(10, 3)) == 10
    assert len(mech.stagger_groups(16, 2)) > len(mech.stagger_groups(16, 8))
    assert mech.stagger_groups(16, None) == [8, 8]        # the Reader's default: half


def test_member_cost_grows_with_ranks_per_core():
    costs = [CAL.member_s(x) for x in (0.5, 1, 4, 8, 32)]
    assert costs == sorted(costs)
    assert costs[0] == costs[1] == CAL.member_batch_s and costs[-1] == CAL.member_crowded_s
    factors = [CAL.cpu_factor(x) for x in (1, 4, 8, 64)]
    assert factors == sorted(factors) and factors[0] == 1.0 and factors[-1] == 2.0


def test_handoff_allreduce_and_cpu_sharing():
    assert mech.handoff(0, 1e-5, 1e-5) == 0.0
    assert mech.handoff(35, 1e-5, 1e-5) > 0
    assert mech.allreduce(1, 1 << 20, 1e-6, 1e-10) == 0.0
    a = [mech.allreduce(p, 100 << 20, 1e-6, 1e-10) for p in (2, 16, 9216)]
    assert a == sorted(a)
    assert mech.allreduce(16, 200 << 20, 1e-6, 1e-10) > mech.allreduce(16, 100 << 20, 1e-6, 1e-10)
    assert mech.cpu_bound(4.0, 2) == 2.0
    assert mech.overlapped(1.0, 2.0, 4096) == 2.0 and mech.overlapped(1.0, 2.0, 0) == 3.0


# ---------------------------------------------------------------- storage through lmdbio.lab.pfs.model

def test_more_streams_per_target_take_longer_each():
    prof = load_profile("gpfs-2017", time_scale=1.0)

    def per_stream(k):
        streams = [Stream(node=0, n=16, size=prof.stripe, offset=j * (64 << 20)) for j in range(k)]
        return max(run_phase(prof, 1, streams)[0])
    times = [per_stream(k) for k in (1, 8, 64)]
    assert times == sorted(times) and times[-1] > 4 * times[0]


def test_requests_in_flight_are_capped_and_counted_once():
    prof = load_profile("gpfs-2017", time_scale=1.0)
    t1, c1 = run_phase(prof, 1, [Stream(node=0, n=32, size=prof.stripe, depth=1)])
    t8, c8 = run_phase(prof, 1, [Stream(node=0, n=32, size=prof.stripe, depth=8)])
    assert c1["requests"] == c8["requests"] == 32
    assert c8["bytes"] == 32 * prof.stripe
    assert t8[0] < t1[0]          # eight in flight keep eight targets busy


def test_one_request_takes_latency_plus_transfer():
    prof = load_profile("gpfs-2017", time_scale=1.0)
    t, c = run_phase(prof, 1, [Stream(node=0, n=1, size=prof.stripe)])
    assert t[0] == pytest.approx(prof.latency_s + prof.stripe / prof.target_bw, rel=1e-6)
    assert c["requests"] == 1


def test_sampling_a_large_phase_agrees_with_simulating_it_whole():
    prof = load_profile("gpfs-2017", time_scale=1.0)
    streams = [Stream(node=j // 4, n=200, size=prof.stripe, offset=j * (256 << 20)) for j in range(32)]
    whole = max(run_phase(prof, 8, streams, budget=10**6)[0])
    sampled = max(run_phase(prof, 8, streams, budget=800)[0])
    assert sampled == pytest.approx(whole, rel=0.25)


# ---------------------------------------------------------------- the composed model

def _bebop():
    return load_platform("bebop")


def test_more_ranks_per_node_cost_lmdb_more_fault_time_not_lmm():
    plat = _bebop()
    w = Workload(name="w", record_bytes=3087, batch_per_process=32, iterations=8)
    quiet = fake_calibration(handoff_s=0.0)

    def herd(variant, rpn):
        p = plat.with_(ranks_per_node=rpn)
        return (predict_point(p, w, variant, rpn, CAL)["read_s"]
                - predict_point(p, w, variant, rpn, quiet)["read_s"])
    # Every waiting process is woken per completion: the cost grows with ranks per node.
    assert herd("lmdb", 36) > herd("lmdb", 4) > 0
    # A node's LMM reader faults alone: its data faults wake nobody else.
    assert herd("lmdbio-lmm", 36) < herd("lmdb", 36) / 10


def test_the_walk_grows_with_p_and_provenance_removes_it():
    plat, w = _bebop(), Workload(name="w", record_bytes=3087, batch_per_process=32, iterations=8)
    walk = [predict_point(plat, w, "lmdb", p, CAL)["locate_s"] for p in (36, 144, 576)]
    assert walk == sorted(walk) and walk[-1] > 3 * walk[0]
    prov = [predict_point(plat, w, "lmdbio-lmm-dio-prov", p, CAL)["locate_s"] for p in (36, 576)]
    assert prov[1] < walk[-1] / 100


def test_direct_io_issues_fewer_storage_requests_than_page_faults():
    # Without a client cache: with GPFS's pagepool every request is a whole block (tested below).
    plat = _bebop().with_(pagepool=0)
    w = Workload(name="w", record_bytes=3087, batch_per_process=32, iterations=8)
    lmm = predict_point(plat, w, "lmdbio-lmm", 72, CAL)
    dio = predict_point(plat, w, "lmdbio-lmm-dio-prov", 72, CAL)
    assert dio["storage_requests"] < lmm["storage_requests"]
    assert (dio["storage_bytes"] / dio["storage_requests"]
            > 1.5 * lmm["storage_bytes"] / lmm["storage_requests"])


def test_warm_cache_has_no_storage_time_and_ranks_beyond_cores_wait():
    plat = load_platform("this-machine")
    w = Workload(name="w", record_bytes=3087, batch_size=256, records=60000, iterations=10)
    warm = predict_point(plat, w, "lmdbio-lmm", 1, CAL, cache="warm")
    assert warm["storage_requests"] == 0
    crowded = predict_point(plat, w, "lmdb", 16, CAL, cache="warm")
    assert crowded["wait_s"] > 0 and crowded["dominant_mechanism"].startswith("ranks outnumber")


def test_dms_cursor_walk_is_named_as_a_walk_where_it_dominates():
    """DM locates by walking its cursor (handed around the ring): where that dominates (one
    reader over the whole file), the row names the walk, not index arithmetic."""
    plat = _bebop()
    w = plat.workload("cifar10-large-alexnet")
    row = predict_point(plat, w, "lmdbio-lmm-dm", 1, CAL)
    assert row["dominant_io_phase"] == "locate", row["dominant_io_phase"]
    assert row["dominant_mechanism"].startswith("(2) DM's cursor walk"), row["dominant_mechanism"]


def test_predict_is_finite_and_positive_for_every_variant_up_to_9216():
    rows = predict(_bebop(), POWERS, ["all"], cal=CAL, budget=400)
    df = pd.DataFrame(rows)
    assert set(df["variant"]) == set(VARIANTS)
    assert set(df["nprocs"]) == set(POWERS) and max(POWERS) == 9216
    assert len(df) == len(VARIANTS) * len(POWERS) * len(_bebop().workloads)
    for col in ["total_s", "per_iteration_s"]:
        assert df[col].map(math.isfinite).all() and (df[col] > 0).all()
    phases = df[[f"{p}_s" for p in PHASES]]
    assert (phases >= 0).all().all()
    assert (phases.sum(axis=1) - df["per_iteration_s"]).abs().max() < 1e-9
    assert (df["total_s"] >= df["iterations"] * df["per_iteration_s"] - 1e-9).all()


def test_predict_rejects_bad_inputs():
    plat, w = _bebop(), Workload(name="w", record_bytes=3087, batch_size=8, iterations=1)
    with pytest.raises(ConfigurationError, match="smaller than"):
        predict_point(plat, w, "lmdb", 16, CAL)
    with pytest.raises(ValueError):
        predict_point(plat, w, "lmdb", 0, CAL)
    with pytest.raises(ConfigurationError, match="unknown variant"):
        predict_point(plat, w, "lmdbio-xyz", 1, CAL)


# ---------------------------------------------------------------- files: calibration, platforms, CLI

def test_calibration_round_trips(tmp_path):
    cal = fake_calibration(cursor_step_s=1.234e-7, disk_readahead=8 << 20)
    out = save_calibration(cal, tmp_path / "cal", config={"x": 1})
    assert (out / "meta.json").exists()
    back = load_calibration(out)
    assert back == cal
    assert load_calibration(out / "calibration.json") == cal
    units = json.loads((out / "calibration.json").read_text())["units"]
    assert units["disk_bw"] == "bytes/s" and units["cursor_step_s"] == "s"
    # A skipped PFS measurement is written as null with its reason, and read back as NaN.
    skipped = fake_calibration(pfs_inflight=float("nan"), pfs_inflight_source="skipped: no /dev/fuse")
    raw = json.loads((save_calibration(skipped, tmp_path / "s") / "calibration.json").read_text())
    assert raw["values"]["pfs_inflight"] is None and "pfs_inflight" in raw["how"]
    back = load_calibration(tmp_path / "s")
    assert math.isnan(back.pfs_inflight) and back.pfs_inflight_source == "skipped: no /dev/fuse"
    # An older calibration without the PFS depth still loads (NaN: not measured).
    del raw["values"]["pfs_inflight"], raw["values"]["pfs_inflight_source"]
    (tmp_path / "s" / "calibration.json").write_text(json.dumps(raw))
    assert math.isnan(load_calibration(tmp_path / "s").pfs_inflight)


def test_missing_or_foreign_calibration_is_a_clear_error(tmp_path):
    with pytest.raises(LmdbioError, match="lmdbio model calibrate"):
        load_calibration(tmp_path)
    (tmp_path / "calibration.json").write_text(json.dumps({"values": {"cores": 2}}))
    with pytest.raises(LmdbioError, match="rerun"):
        load_calibration(tmp_path)


def test_platform_files_load_and_bad_ones_fail_clearly(tmp_path):
    b = _bebop()
    assert b.ranks_per_node == 36 and {w.name for w in b.workloads} >= {"cifar10-large-alexnet"}
    cifar = b.workload("cifar10-large-alexnet")
    # The reference code's reading (the default): a fixed global batch; the other: 256 per process.
    assert cifar.batch == "global" and cifar.global_batch(72) == cifar.global_batch(9216) == 9216
    assert cifar.reading("per-process").global_batch(72) == 72 * 256
    assert cifar.records == 500000 and b.workload("imagenet-caffenet").records == 1281167
    assert cifar.epochs(9216) == pytest.approx(512 * 9216 / 500000)
    with pytest.raises(ConfigurationError, match="batch reading"):
        cifar.reading("sideways")
    assert "source" in b.sources["ranks_per_node"]
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nranks_per_node = 4\ncores_per_node = 4\nstorage = "disk"\n'
                   '[[workload]]\nname = "w"\nrecord_bytes = 10\nbatch_size = 4\nbatch_per_process = 2\n')
    with pytest.raises(ConfigurationError, match="say which applies"):
        load_platform(bad)
    bad.write_text('name = "x"\nranks_per_node = 4\ncores_per_node = 4\nstorage = "disk"\n'
                   '[[workload]]\nname = "w"\nrecord_bytes = 10\nbatch_per_process = 2\nbatch = "global"\n')
    with pytest.raises(ConfigurationError, match="no batch_size"):
        load_platform(bad)
    with pytest.raises(ConfigurationError, match="no platform"):
        load_platform("no-such-cluster")
    assert b.explicit_inflight == 12 and "estimate" in b.sources["explicit_inflight"]
    assert load_platform("this-machine").explicit_inflight == 0
    bad.write_text('name = "x"\nranks_per_node = 4\ncores_per_node = 4\nstorage = "disk"\n'
                   'explicit_inflight = 0.5\n')
    with pytest.raises(ConfigurationError, match="explicit_inflight"):
        load_platform(bad)


def test_procs_ellipsis_follows_the_posters_axis():
    assert _procs("1,2,4,8,16,36,72,...,9216") == list(POWERS)
    assert _procs("1,...,8") == [1, 2, 4, 8]
    with pytest.raises(ValueError):
        _procs("0,4")


def test_cli_predict_writes_tidy_predictions(tmp_path, capsys):
    from lmdbio.cli import main

    cal_dir = save_calibration(CAL, tmp_path / "cal")
    rc = main(["model", "predict", "--platform", "bebop", "--procs", "1,36,...,288",
               "--variants", "lmdb,lmdbio-lmm-dio-prov", "--calibration", str(cal_dir),
               "--out", str(tmp_path / "pred"), "--budget", "300"])
    assert rc == 0
    df = pd.read_csv(tmp_path / "pred" / "predictions.csv")
    for col in ["platform", "variant", "nprocs", "total_s", *[f"{p}_s" for p in PHASES]]:
        assert col in df.columns
    assert sorted(set(df["nprocs"])) == [1, 36, 72, 144, 288]
    meta = json.loads((tmp_path / "pred" / "meta.json").read_text())
    assert meta["platform"]["name"] == "bebop" and meta["storage_profile"]["name"] == "gpfs-2017"
    assert main(["model", "predict", "--platform", "nowhere", "--out", str(tmp_path / "x"),
                 "--calibration", str(cal_dir)]) == 1
    assert "no platform" in capsys.readouterr().err


def test_validate_reports_errors_per_variant(tmp_path):
    from lmdbio.lab.model.validate import error_table, validate, write_validation

    d = tmp_path / "sweep"
    d.mkdir()
    rows = []
    for v in ("lmdb", "lmdbio-lmm-dio-prov"):
        for p in (1, 4):
            for rep, wall in enumerate((0.10, 0.12, 0.11)):
                rows.append(dict(dataset="x", dataset_name="cifar10", variant=v, nprocs=p, cache="warm",
                                 repeat=rep, batch_size=256, iters=100, ranks_per_node=None,
                                 readers_per_node=1, status="ok", wall_s=wall * p,
                                 records=25600, record_bytes=25600 * 3087))
    pd.DataFrame(rows).to_csv(d / "summary.csv", index=False)
    df = validate([d / "summary.csv"], "this-machine", CAL, budget=300)
    assert len(df) == 4
    assert set(["variant", "nprocs", "cache", "storage", "measured_s", "predicted_s",
                "rel_error"]) <= set(df.columns)
    assert df["measured_s"].tolist() == pytest.approx([0.11, 0.44, 0.11, 0.44])   # medians
    assert (df["rel_error"] == (df["predicted_s"] - df["measured_s"]) / df["measured_s"]).all()
    err = error_table(df)
    assert set(err["variant"]) == {"lmdb", "lmdbio-lmm-dio-prov"}
    out = write_validation(df, tmp_path / "val", {})
    assert (out / "summary.csv").exists() and (out / "errors.csv").exists()


def test_a_local_cold_point_is_predicted_with_its_own_disk_probe(tmp_path):
    """The sweep's same-sitting probe replaces calibration's disk_bw for local cold points
    only: a faster probe predicts shorter cold reads, warm points and probe-less sweeps keep
    the calibrated disk."""
    from lmdbio.lab.model.validate import criterion_table, validate

    d = tmp_path / "bench_issue6" / "cifar10"
    d.mkdir(parents=True)

    def write(probe):
        rows = [dict(dataset="x", dataset_name="cifar10", variant="lmdbio-lmm-dio-prov", nprocs=1,
                     cache=c, storage="local", repeat=rep, batch_size=256, iters=50, warmup=1,
                     ranks_per_node=0, readers_per_node=1, status="ok", wall_s=0.2,
                     records=12800, record_bytes=12800 * 3087,
                     **({"disk_probe_bw": probe * (1 + 0.1 * rep)} if c == "cold" and probe else {}))
                for c in ("cold", "warm") for rep in range(3)]
        pd.DataFrame(rows).to_csv(d / "summary.csv", index=False)
        return validate([d / "summary.csv"], "this-machine", CAL, budget=300).set_index("cache")

    plain, fast = write(None), write(4 * CAL.disk_bw)
    assert plain.loc["cold", "disk_bw_source"] == "calibration"
    assert plain.loc["cold", "disk_bw"] == CAL.disk_bw
    assert fast.loc["cold", "disk_bw_source"] == "same-sitting probe"
    assert fast.loc["cold", "disk_bw"] == pytest.approx(4.4 * CAL.disk_bw)   # median of 3 repeats
    assert fast.loc["cold", "pred_read_s"] < 0.8 * plain.loc["cold", "pred_read_s"]
    assert fast.loc["warm", "disk_bw_source"] == "calibration"
    assert fast.loc["warm", "predicted_s"] == plain.loc["warm", "predicted_s"]
    # The same cold point with calibration's disk is kept beside it, and counted apart.
    assert fast.loc["cold", "rel_error_calibrated_disk"] == pytest.approx(plain.loc["cold", "rel_error"])
    crit = criterion_table(fast.reset_index()).set_index("cache")
    assert crit.loc["cold", "disk_bw"].startswith("same-sitting probe") and "GB/s" in crit.loc["cold", "disk_bw"]
    assert crit.loc["cold", "variants_meeting_calibrated_disk"] in (0, 1)
    assert crit.loc["warm", "variants_meeting_calibrated_disk"] != crit.loc["warm", "variants_meeting_calibrated_disk"]


def test_validate_reads_an_emulated_pfs_sweep(tmp_path):
    from lmdbio.lab.model.validate import validate

    d = tmp_path / "pfs"
    d.mkdir()
    rows = [dict(dataset="x", dataset_name="cifar10", variant=v, nprocs=4, cache="cold",
                 storage="pfs:gpfs-2017", repeat=0, batch_size=256, iters=20, warmup=1,
                 ranks_per_node=4, readers_per_node=1, status="ok", wall_s=1.0, records=5120,
                 record_bytes=5120 * 3087) for v in ("lmdb", "lmdbio-lmm-dio-prov")]
    pd.DataFrame(rows).to_csv(d / "summary.csv", index=False)
    (d / "meta.json").write_text(json.dumps({"config": {"storage": "pfs:gpfs-2017",
                                                        "profile": {"time_scale": 4.0}}}))
    df = validate([d / "summary.csv"], "this-machine", CAL, budget=300)
    assert set(df["storage"]) == {"pfs:gpfs-2017"}
    # A slower emulated storage (time_scale 4) than the real one predicts longer reads.
    (d / "meta.json").write_text(json.dumps({"config": {"profile": {"time_scale": 1.0}}}))
    fast = validate([d / "summary.csv"], "this-machine", CAL, budget=300)
    assert (df["predicted_s"].to_numpy() > fast["predicted_s"].to_numpy()).all()


@pytest.mark.mpi
@pytest.mark.long
def test_calibrate_measures_positive_costs_here(tmp_path):
    from lmdbio.lab.model.calibrate import FLOOR_PER_BYTE_S, FLOOR_S, run_calibration

    cal = run_calibration(tmp_path, records=1000, progress=False)
    for f in dataclasses.fields(cal):
        v = getattr(cal, f.name)
        if f.name in ("batch_s", "record_s", "batch_cpu_s", "batch_cpu_large_s",
                      "batch_cpu_large16_s"):
            assert set(v) == set(FIXED_VARIANTS) and all(x > FLOOR_S for x in v.values())
        elif f.name == "pfs_inflight_source":
            assert v.startswith(("measured", "skipped")), v
        elif f.name == "pfs_inflight":
            assert (v >= 0.5 and v < 64) if v == v else cal.pfs_inflight_source.startswith("skipped")
        elif f.name == "disk_read_overlap":
            # A share, clipped to 0-1: 0 (nothing hidden) is a measurement, not a clamp.
            assert math.isfinite(v) and 0.0 <= v <= 1.0, f"{f.name} = {v}: not a share"
        else:
            # Strictly above the floor the fits clamp to (v > 0 could not fail on a clamped value).
            floor = FLOOR_PER_BYTE_S if f.name.endswith("byte_s") or f.name == "mpi_beta_s" else FLOOR_S
            assert math.isfinite(v) and v > floor, f"{f.name} = {v}: at or below its clamp floor {floor}"
    assert all(x > FLOOR_S for x in cal.record_s.values()), cal.record_s
    assert not list(tmp_path.iterdir())   # scratch removed


# --- fractional depth is simulated, not divided ----------------------------------------------------

@pytest.mark.parametrize("streams", [1, 4])
def test_time_is_monotone_non_increasing_in_depth(streams):
    from lmdbio.lab.pfs.model import load_profile

    prof = load_profile("gpfs-2017")
    times = [max(run_phase(prof, 4, [Stream(node=j % 4, n=200, size=128 << 10, depth=d, offset=j << 30)
                                     for j in range(streams)])[0]) for d in (1, 1.5, 2)]
    assert times[0] >= times[1] >= times[2], times
    assert times[0] > times[2]


def test_fractional_depth_near_two_is_near_two():
    # Dividing a saturated stream's time by the depth made depth 1.99 take 31.4 s where depth 2
    # took 49.8 (COAL, CIFAR, 9,216): a fractional depth must land near its neighbours.
    plat = load_platform("bebop")
    w = plat.workload("cifar10-large-alexnet")
    t = {d: predict_point(plat.with_(explicit_inflight=d), w, "lmdbio-lmm-dio-prov-coal", 9216, CAL,
                          budget=2000)["per_iteration_s"] for d in (1.0, 1.99, 2.0)}
    assert 0.9 * t[2.0] <= t[1.99] <= t[1.0], t


# --- estimates as ranges --------------------------------------------------------------------------

def _estimates(sources: dict) -> set:
    return {k for k, v in sources.items() if str(v).startswith("estimate")}


def test_every_estimate_has_a_range_with_a_reason():
    from lmdbio.lab.pfs.model import PROFILES, _RAW, profile_ranges

    for name in PROFILES:
        ranges = profile_ranges(name)
        missing = _estimates(_RAW[name].get("sources", {})) - set(ranges)
        assert not missing, f"profile {name}: estimates without a range: {missing}"
        assert all(why.strip() for _, _, why in ranges.values())
    for pname in ("bebop", "this-machine"):
        plat = load_platform(pname)
        missing = _estimates(plat.sources) - set(plat.ranges) - {"storage"}   # storage: the profile's
        assert not missing, f"platform {pname}: estimates without a range: {missing}"
        for w in plat.workloads:
            left = _estimates(w.sources) - set(w.ranges) - ({"compute"} if "compute" in plat.ranges else set())
            assert not left, f"platform {pname}, workload {w.name}: estimates without a range: {left}"


def test_sensitivity_moves_one_estimate_at_a_time(tmp_path):
    from lmdbio.lab.model.output import estimate_ends, sensitivity, write_predictions

    plat = load_platform("bebop")
    ends = list(estimate_ends(plat))
    names = {n for n, *_ in ends}
    assert {"gpfs-2017.seek_s", "explicit_inflight", "stagger_size", "core_flops"} <= names
    seek0 = next(p for n, e, *_, p in ends if n == "gpfs-2017.seek_s" and e == "low")
    from lmdbio.lab.model.predict import storage_profile
    assert storage_profile(seek0, CAL, "cold").seek_s == 0.0
    assert storage_profile(plat, CAL, "cold").seek_s == pytest.approx(0.0055)
    w = ["cifar10-large-alexnet"]
    rows = predict(plat, [36], ["lmdb", FULL_STACK], w, CAL, budget=300)
    sens = sensitivity(plat, [36], ["lmdb", FULL_STACK], w, CAL, budget=300)
    assert len(sens) == len(ends) * 2
    out = write_predictions(rows, tmp_path, {}, plat, CAL, sens=sens)
    pred = pd.read_csv(out / "predictions.csv")
    assert (pred["total_s_low"] <= pred["total_s"]).all() and (pred["total_s"] <= pred["total_s_high"]).all()
    s = pd.read_csv(out / "sensitivity.csv")
    full = s[s["variant"] == FULL_STACK].set_index(["estimate", "end"])["total_s"]
    # More requests in flight: less time for the explicit reads (the central is 12).
    assert full.loc[("explicit_inflight", "low")] > full.loc[("explicit_inflight", "high")]


FULL_STACK = "lmdbio-lmm-dio-prov-coal-stag"


# ---------------------------------------------------------------- issue 20: cache, requests, DM


def test_a_node_cache_serves_the_blocks_its_streams_share_and_no_other_node():
    prof = load_profile("gpfs-2017")
    same = [Stream(node=0, n=8, size=64 << 10), Stream(node=0, n=8, size=64 << 10)]
    apart = [Stream(node=0, n=8, size=64 << 10), Stream(node=1, n=8, size=64 << 10)]
    _, none = run_phase(prof, 2, same)
    t_same, shared = run_phase(prof, 2, same, cache_bytes=1 << 30)
    _, split = run_phase(prof, 2, apart, cache_bytes=1 << 30)
    # 2 x 512 KiB in 64 KiB requests: 16 requests uncached; with the cache two whole 256 KiB
    # blocks, fetched once for both streams of the node, and once per node when they differ.
    assert none["requests"] == 16
    assert shared["requests"] == 2 and shared["bytes"] == 2 * prof.stripe
    assert split["requests"] == 4
    assert shared["cache_hit_fraction"] > 0.8


def test_a_block_cache_evicts_the_least_recently_used_block():
    from lmdbio.lab.model.streams import BlockCache

    c = BlockCache(2 * 4096, 4096)
    c.put(1, 0.1)
    c.put(2, 0.2)
    assert c.ready(1) == 0.1          # 1 is now the most recent
    c.put(3, 0.3)
    assert c.ready(2) is None and c.ready(1) == 0.1 and c.ready(3) == 0.3
    with pytest.raises(ValueError):
        BlockCache(0, 4096)


def test_the_pagepool_absorbs_the_split_requests_of_a_nodes_faulters():
    plat = _bebop()
    w = Workload(name="w", record_bytes=3087, batch_per_process=32, iterations=8)
    off = predict_point(plat.with_(pagepool=0), w, "lmdb", 72, CAL)
    on = predict_point(plat, w, "lmdb", 72, CAL)
    assert plat.pagepool > 0 and off["faulter_factor"] > 1.2
    assert on["storage_requests"] < off["storage_requests"] / 1.2


def test_a_stream_can_wait_for_an_earlier_one_and_then_meets_no_contention():
    prof = load_profile("gpfs-2017")
    alone, _ = run_phase(prof, 1, [Stream(node=0, n=6, size=256 << 10)])
    together, _ = run_phase(prof, 1, [Stream(node=0, n=6, size=256 << 10),
                                      Stream(node=0, n=6, size=256 << 10, offset=8 << 20)])
    chained, _ = run_phase(prof, 1, [Stream(node=0, n=6, size=256 << 10),
                                     Stream(node=0, n=6, size=256 << 10, offset=8 << 20, after=0)])
    assert max(together) > alone[0]
    # The second starts when the first ends and queues behind nobody: it takes what it takes
    # alone plus one seek per request (each of its six blocks is on a target the first stream
    # used last).
    assert chained[0] == pytest.approx(alone[0])
    assert chained[1] == pytest.approx(alone[0] + 6 * prof.seek_s)
    with pytest.raises(ValueError):
        run_phase(prof, 1, [Stream(node=0, n=1, size=4096, after=0)])


def test_requests_per_read_curve_adds_the_measured_extra_requests_and_bytes(tmp_path):
    from lmdbio.lab.model.requests import curve_requests, load_curve

    f = tmp_path / "rpr.csv"
    pd.DataFrame({"length": [131072, 131072, 1048576], "requests": [2, 2, 10],
                  "bytes": [196608, 196608, 1310720]}).to_csv(f, index=False)
    curve = load_curve(f)
    assert curve == ((131072, 2.0, 196608.0), (1048576, 10.0, 1310720.0))
    n, moved = curve_requests(131072, 131072, curve)
    assert (n, moved) == (2.0, 196608.0)                 # ceil(1) + e = 1
    n, moved = curve_requests(1048576, 131072, curve)
    assert (n, moved) == (10.0, 1310720.0)               # ceil(8) + e = 2
    n, _ = curve_requests(4 << 20, 131072, curve)        # beyond: the last e
    assert n == 32 + 2
    plain = mech.explicit_requests(1 << 20, 256 << 10, 64 << 10, 1.5)
    measured = mech.explicit_requests(1 << 20, 256 << 10, 64 << 10, 1.5, measured=curve)
    assert plain[0] == 8 and measured[0] == 10 and measured[1] == 131072
    # The next read starting at this one's end uses the bytes read past it: only requests count.
    reused = mech.explicit_requests(1 << 20, 256 << 10, 64 << 10, 1.5, measured=curve, tail_reused=True)
    assert reused[0] == 10 and reused[0] * reused[1] == pytest.approx(1 << 20, rel=0.01)
    with pytest.raises(ConfigurationError):
        load_curve(tmp_path / "missing.csv")


def test_the_curve_changes_pfs_predictions_only(tmp_path):
    from dataclasses import replace

    f = tmp_path / "rpr.csv"
    pd.DataFrame({"length": [4096, 8 << 20], "requests": [5, 200], "bytes": [65536, 16 << 20]}
                 ).to_csv(f, index=False)
    w = Workload(name="w", record_bytes=3087, batch_size=256, iterations=4)
    pfs = load_platform("this-machine").with_(ranks_per_node=4, storage="gpfs-2017")
    a = predict_point(pfs.with_(requests_per_read=""), w, "lmdbio-lmm-dio", 16, CAL)
    b = predict_point(pfs.with_(requests_per_read=str(f)), w, "lmdbio-lmm-dio", 16, CAL)
    assert b["storage_requests"] > 1.5 * a["storage_requests"] and b["read_s"] > a["read_s"]
    disk = replace(load_platform("this-machine"), requests_per_read=str(f))
    c = predict_point(disk.with_(requests_per_read=""), w, "lmdbio-lmm-dio", 16, CAL)
    d = predict_point(disk, w, "lmdbio-lmm-dio", 16, CAL)
    assert c["read_s"] == d["read_s"]


@pytest.mark.fuse
@pytest.mark.gate
def test_requests_per_read_are_measured_through_a_pfs_mount(tmp_path):
    from lmdbio.lab.model.requests import measure
    from lmdbio.lab.pfs.mount import FuseUnavailable

    try:
        rows = measure(lengths=(16 << 10, 1 << 20), repeats=1, workdir=tmp_path)
    except FuseUnavailable as exc:
        pytest.skip(f"no FUSE here: {exc}")
    by = {r["length"]: r for r in rows}
    assert by[16 << 10]["requests"] >= 1 and by[16 << 10]["bytes"] >= 16 << 10
    assert by[1 << 20]["requests"] >= math.ceil((1 << 20) / by[1 << 20]["request_cap"])
    assert by[1 << 20]["bytes"] >= 1 << 20


def _speculation_csv(path, spec_majflt, ring_majflt=4.0, touched=1000, missed=250, extra=400):
    pd.DataFrame([
        {"mode": "ring + speculation (DM)", "majflt_per_batch_median": spec_majflt,
         "touched_pages_median": touched, "missed_pages_median": missed, "extra_pages_median": extra},
        {"mode": "ring only", "majflt_per_batch_median": ring_majflt,
         "touched_pages_median": 0, "missed_pages_median": 0, "extra_pages_median": 0}]).to_csv(path, index=False)
    return str(path)


def test_speculation_fractions_come_from_the_measured_pages_and_faults(tmp_path):
    sp = mech.load_speculation(_speculation_csv(tmp_path / "a.csv", spec_majflt=1.0))
    assert sp == {"miss": 0.25, "issued": 1.15, "served": 0.75}
    # More faults with speculation than without: it served none of the walk's waits.
    assert mech.load_speculation(_speculation_csv(tmp_path / "b.csv", spec_majflt=6.0))["served"] == 0.0
    with pytest.raises(ConfigurationError):
        mech.load_speculation(tmp_path / "missing.csv")


def test_dm_walk_faults_not_served_in_time_are_serialized_by_the_ring(tmp_path):
    good = _speculation_csv(tmp_path / "good.csv", spec_majflt=0.0, missed=0, extra=0)
    bad = _speculation_csv(tmp_path / "bad.csv", spec_majflt=6.0)
    w = Workload(name="w", record_bytes=3087, batch_size=256, iterations=4)
    pfs = load_platform("this-machine").with_(ranks_per_node=1, storage="gpfs-2017")
    rows = {(s, p): predict_point(pfs.with_(speculation=f), w, "lmdbio-lmm-dm", p, CAL)
            for s, f in (("good", good), ("bad", bad)) for p in (1, 4)}
    # Served in time: the advice hides the reads; not served: the walk waits in its turn.
    assert rows["bad", 1]["per_iteration_s"] > rows["good", 1]["per_iteration_s"]
    # Four readers take turns: the waits add up (each reads a quarter of the bytes).
    assert rows["bad", 4]["wait_s"] > 2 * rows["bad", 4]["locate_s"] - 1e-12
    assert rows["bad", 4]["wait_s"] > 10 * rows["good", 4]["wait_s"]
    assert rows["bad", 4]["storage_bytes"] > 1.1 * rows["good", 4]["storage_bytes"]   # extra pages


def test_the_validation_gap_names_the_request_count_or_the_time_per_request():
    from lmdbio.lab.model.validate import CRITERION, gap_of

    base = {"median_abs_error": CRITERION + 0.1, "bytes_ratio": 0.6}
    assert gap_of({**base, "median_abs_error": CRITERION, "requests_ratio": 0.5,
                   "time_per_request_ratio": 1.0}) == ""
    assert gap_of({**base, "requests_ratio": 0.5, "time_per_request_ratio": 1.0}).startswith("request count")
    assert gap_of({**base, "requests_ratio": 1.05, "time_per_request_ratio": 1.5}).startswith("time per request")
    assert gap_of({**base, "requests_ratio": float("nan"), "time_per_request_ratio": float("nan")}
                  ).startswith("no storage counters")


def test_coal_with_several_readers_reads_one_extent_per_batch(tmp_path):
    f = tmp_path / "rpr.csv"
    # Two extra requests per read, whatever its length: k extents pay them k times.
    pd.DataFrame({"length": [4096, 64 << 20], "requests": [3, 514], "bytes": [4096, 64 << 20]}
                 ).to_csv(f, index=False)
    w = Workload(name="w", record_bytes=3087, batch_size=256, iterations=64)
    pfs = load_platform("this-machine").with_(ranks_per_node=4, storage="gpfs-2017", requests_per_read=str(f))
    one = predict_point(pfs, w, "lmdbio-lmm-dio-prov-coal", 4, CAL)      # a lone reader
    four = predict_point(pfs, w, "lmdbio-lmm-dio-prov-coal", 16, CAL)    # four readers
    k1, k4 = one["coalesce"], four["coalesce"]
    assert k1 > 1 and k4 > 1
    # Per iteration: the lone reader's chunk is one range (2 extra requests per chunk); each
    # of four readers reads k extents (2 extra requests per batch).
    per_read_1 = one["storage_requests"] - 256 * 4150 / (128 << 10)
    assert per_read_1 == pytest.approx(2 / k1, rel=0.3)
    assert four["storage_requests"] > one["storage_requests"] + 4 * 2 * 0.8


# ---------------------------------------------------------------- the papers' workload, joint uncertainty


def test_a_fixed_global_batch_keeps_the_data_per_iteration_and_a_per_process_one_grows_it():
    plat = _bebop()
    w = plat.workload("cifar10-large-alexnet")
    strong = [predict_point(plat, w, "lmdb", p, CAL, budget=300) for p in (36, 576)]
    weak = [predict_point(plat, w.reading("per-process"), "lmdb", p, CAL, budget=300) for p in (36, 576)]
    assert [r["global_batch"] for r in strong] == [9216, 9216]
    assert [r["global_batch"] for r in weak] == [36 * 256, 576 * 256]
    # The walk steps over the global batch: it grows with P only when the batch does.
    assert weak[1]["locate_s"] > 4 * strong[1]["locate_s"]
    # predict runs both readings and skips a P with fewer records than processes.
    rows = predict(plat, [1, 9216], ["lmdb"], ["cifar10-large-alexnet"], CAL, budget=300,
                   batches=["global", "per-process"])
    assert {(r["batch"], r["nprocs"]) for r in rows} == {("global", 1), ("global", 9216),
                                                        ("per-process", 1), ("per-process", 9216)}
    assert {r["epochs"] for r in rows if r["batch"] == "global"} == {512 * 9216 / 500000}


def test_a_fixed_data_set_sets_dios_index_pass_not_the_run():
    plat = _bebop()
    w = plat.workload("cifar10-large-alexnet")
    small, large = (predict_point(plat, dataclasses.replace(w, records=n), "lmdbio-lmm-dio", 576, CAL,
                                  budget=300) for n in (50000, 5000000))
    assert large["setup_s"] > 10 * small["setup_s"]
    assert large["per_iteration_s"] == pytest.approx(small["per_iteration_s"], rel=0.05)


def test_the_walks_reads_follow_the_measured_microbenchmark():
    # walk_reads.csv (python -m lmdbio.lab.model.walkread): a cold next()-only walk through a 64 KiB
    # read-around. The model's walk touching the values reads what it read; leaf-only does not.
    from lmdbio.lab.model.walkread import DEFAULT_CSV

    d = pd.read_csv(DEFAULT_CSV)
    d = d[d["mode"] == "walk"].groupby("dataset").median(numeric_only=True)
    for ds, rb in (("cifar10", 3087), ("imagenet", 196623)):
        geo = mech.geometry(rb)
        r = d.loc[ds]
        _, touching = mech.walk_faults(r["records"], geo["records_per_leaf"], geo["file_bytes_per_record"],
                                       int(r["read_ahead_bytes"]), True)
        _, leaf = mech.walk_faults(r["records"], geo["records_per_leaf"], geo["file_bytes_per_record"],
                                   int(r["read_ahead_bytes"]), False)
        assert touching == pytest.approx(r["fraction_read"], abs=0.05)
        assert leaf < 0.5 * r["fraction_read"]
    assert load_platform("this-machine").walk_touches_values is True
    assert "walkread" in load_platform("this-machine").sources["walk_touches_values"]


def test_latin_hypercube_uses_each_stratum_once_and_is_seeded():
    from lmdbio.lab.model.uncertainty import latin_hypercube

    u = latin_hypercube(20, 5, seed=3)
    assert u.shape == (20, 5) and ((u >= 0) & (u < 1)).all()
    for j in range(5):
        assert sorted((u[:, j] * 20).astype(int)) == list(range(20))
    assert (latin_hypercube(20, 5, seed=3) == u).all() and not (latin_hypercube(20, 5, seed=4) == u).all()


def test_every_estimate_is_drawn_within_its_range_and_moves_some_prediction():
    from lmdbio.lab.model.uncertainty import apply, draw, estimates

    plat = _bebop()
    est = estimates(plat)
    names = {e.name for e in est}
    assert {"gpfs-2017.seek_s", "cifar10-large-alexnet.records", "cifar10-large-alexnet.batch_size",
            "walk_touches_values", "core_flops"} <= names
    # The estimates that changed nothing are gone.
    assert not names & {"cores_per_node", "cifar10-large-alexnet.records.low"}
    assert not hasattr(plat, "cpu")
    _, samples = draw(plat, 16, seed=2)
    for e in est:
        vals = [x[e.name] for x in samples]
        if e.kind == "switch":
            assert set(vals) == {e.low, e.high}
        else:
            assert min(vals) >= min(e.low, e.high) and max(vals) <= max(e.low, e.high)
    variants = ["lmdb", "lmdbio-lmm-dm", "lmdbio-lmm-dio", FULL_STACK]

    def run(p):
        return [r["total_s"] for r in predict(p, [576, 9216], variants, None, CAL, budget=300)]
    for e in est:
        lo, hi = run(apply(plat, {e.name: e.low})), run(apply(plat, {e.name: e.high}))
        assert lo != hi, f"estimate {e.name} moves no prediction: remove it or make it act"


def test_predict_in_forked_workers_gives_the_rows_of_one_process_in_order():
    # The platform does not pickle: the workers inherit it, and only indices and rows travel.
    args = (_bebop(), [1, 36, 576], ["lmdb", "lmdbio-lmm-dm", FULL_STACK], None, CAL)
    forked = predict(*args, budget=300, jobs=2)
    assert [(r["workload"], r["variant"], r["nprocs"]) for r in forked][:3] == [
        ("cifar10-large-alexnet", "lmdb", 1), ("cifar10-large-alexnet", "lmdb", 36),
        ("cifar10-large-alexnet", "lmdb", 576)]
    assert forked == predict(*args, budget=300, jobs=1)


def test_a_repeated_phase_is_simulated_once_and_each_caller_owns_its_results():
    from lmdbio.lab.model import streams

    prof = load_profile("gpfs-2017")
    phase = [Stream(node=0, n=40, size=64 << 10, depth=2), Stream(node=1, n=40, size=64 << 10, offset=1 << 30)]
    times, counters = run_phase(prof, 2, phase)
    hits = streams._phase.cache_info().hits
    times[0], counters["requests"] = -1.0, -1
    again, counters2 = run_phase(prof, 2, list(phase))
    assert streams._phase.cache_info().hits == hits + 1
    assert again[0] > 0 and counters2["requests"] == 80


def test_joint_samples_carry_every_estimate_and_run_the_model_at_each():
    from lmdbio.lab.model.uncertainty import PREFIX, apply, co_centrals, draw, joint

    plat = _bebop()
    rows = joint(plat, [576], ["lmdb", FULL_STACK], ["cifar10-large-alexnet"], CAL, n=4, seed=5, budget=300,
                 jobs=2)
    # Forked workers run the samples; the rows come back in sample order, as one process makes them.
    assert pd.DataFrame(rows).equals(pd.DataFrame(joint(
        plat, [576], ["lmdb", FULL_STACK], ["cifar10-large-alexnet"], CAL, n=4, seed=5, budget=300, jobs=1)))
    est, samples = draw(plat, 4, seed=5)
    # The 4 samples, then the walk's two co-central settings (samples 4 and 5).
    assert len(rows) == (4 + 2) * 2
    co = {4 + j: v for j, (_, v) in enumerate(co_centrals(est))}
    for r in rows:
        values = samples[r["sample"]] if r["sample"] < 4 else co[r["sample"]]
        want = predict_point(apply(plat, values), apply(plat, values).workload(r["workload"]),
                             r["variant"], 576, CAL, budget=300)["total_s"]
        assert r["total_s"] == pytest.approx(want, rel=1e-12)
        assert all(PREFIX + e.name in r for e in est)


def test_the_per_batch_cpu_microbenchmark_sets_the_per_record_cost_when_larger(tmp_path):
    # The mean CPU of a 256-record read_batch() (slow calls and garbage collection included)
    # against the per-call median's slope: the larger one is what a batch costs.
    cal = fake_calibration()
    assert cal.per_record_s("lmdb") == cal.record_s["lmdb"]          # not measured: the slope
    heavy = fake_calibration(batch_cpu_s={v: 5e-5 + 254 * 3e-6 for v in FIXED_VARIANTS})
    assert heavy.per_record_s("lmdb") == pytest.approx(3e-6)
    light = fake_calibration(batch_cpu_s={v: 5e-5 + 254 * 1e-7 for v in FIXED_VARIANTS})
    assert light.per_record_s("lmdb") == cal.record_s["lmdb"]
    w = Workload(name="w", record_bytes=3087, batch_size=256, iterations=8)
    plat = load_platform("this-machine")
    for v in ("lmdb", "lmdbio-lmm-dio-prov"):
        assert (predict_point(plat, w, v, 1, heavy, cache="warm")["per_iteration_s"]
                > predict_point(plat, w, v, 1, cal, cache="warm")["per_iteration_s"] + 200 * 1e-6)
    save_calibration(heavy, tmp_path)
    assert load_calibration(tmp_path).batch_cpu_s == heavy.batch_cpu_s
    save_calibration(cal, tmp_path)
    assert load_calibration(tmp_path).batch_cpu_s is None


def test_the_large_record_batch_cpu_sets_the_cost_per_record_size(tmp_path):
    # Two measured sizes: CIFAR-size (per_record_s) and ImageNet-size 256-record batches; the cost
    # per record is linear in the record size through both, and the model's warm read follows it.
    large = 5e-5 + 256 * 4e-5
    cal = fake_calibration(batch_cpu_s={v: 5e-5 + 254 * 2e-6 for v in FIXED_VARIANTS},
                           batch_cpu_large_s={v: large for v in FIXED_VARIANTS},
                           large_record_bytes=196623)
    assert cal.record_cpu_s("lmdb", 3087, 1e-12) == pytest.approx(2e-6)
    assert cal.record_cpu_s("lmdb", 196623, 1e-12) == pytest.approx((large - 5e-5) / 256)
    mid = cal.record_cpu_s("lmdb", (3087 + 196623) / 2, 1e-12)
    assert mid == pytest.approx((2e-6 + (large - 5e-5) / 256) / 2)
    plain = fake_calibration()
    assert plain.record_cpu_s("lmdb", 196623, 2e-10) == pytest.approx(1e-6 + (196623 - 3087) * 2e-10)
    w = Workload(name="w", record_bytes=196623, batch_size=256, iterations=8)
    plat = load_platform("this-machine")
    got = predict_point(plat, w, "lmdb", 1, cal, cache="warm")["read_s"]
    assert got == pytest.approx(256 * ((large - 5e-5) / 256 - cal.cursor_step_s), rel=1e-9)
    save_calibration(cal, tmp_path)
    back = load_calibration(tmp_path)
    assert back.batch_cpu_large_s == cal.batch_cpu_large_s and back.large_record_bytes == 196623


def test_the_measured_read_overlap_hides_its_share_on_the_local_disk_only():
    assert mech.overlapped(2.0, 1.0, 4096) == 2.0                      # all hidden: the longer one
    assert mech.overlapped(2.0, 1.0, 4096, 0.25) == pytest.approx(2.75)
    assert mech.overlapped(2.0, 1.0, 0, 1.0) == 3.0                     # no readahead: they add up
    w = Workload(name="w", record_bytes=3087, batch_size=256, iterations=8)
    disk = load_platform("this-machine")
    none = fake_calibration(disk_read_overlap=0.0)
    for v in ("lmdbio-lmm-dio-prov", "lmdbio-lmm"):
        assert (predict_point(disk, w, v, 1, none)["per_iteration_s"]
                > predict_point(disk, w, v, 1, CAL)["per_iteration_s"])
    pfs = disk.with_(storage="gpfs-2017")
    assert (predict_point(pfs, w, "lmdbio-lmm-dio-prov", 1, none)["per_iteration_s"]
            == predict_point(pfs, w, "lmdbio-lmm-dio-prov", 1, CAL)["per_iteration_s"])


def test_every_committed_model_series_is_of_this_model_version():
    """The notebooks' model panels and the claims read predictions the model of this version
    wrote: a series left from an earlier edition (another compute rate, other switches) would
    be drawn beside claims judged on the current one."""
    from pathlib import Path

    from lmdbio.lab.model.output import MODEL_VERSION

    root = Path(__file__).resolve().parents[1] / "data" / "results"
    metas = [*sorted(root.glob("*/model/meta.json")), root / "model_prediction" / "meta.json"]
    stale = [str(m.relative_to(root)) for m in metas
             if (json.loads(m.read_text()).get("model") or {}).get("version") != MODEL_VERSION]
    assert len(metas) >= 10 and not stale, f"written by another model version: {stale}"
