"""The model's mechanism functions (lmdbio.lab.model.phases), one behaviour each."""

from __future__ import annotations

import json

import pytest

from lmdbio.lab.model import phases
from lmdbio.lab.model.calibrate import load_calibration
from lmdbio.lab.model.output import MODEL_VERSION, model_hash, write_predictions
from lmdbio.lab.model.platform import Workload, load_platform
from lmdbio.lab.model.point import point
from lmdbio.lab.model.predict import predict, predict_point

CAL = load_calibration()
BEBOP = load_platform("bebop")
CIFAR = BEBOP.workload("cifar10-large-alexnet")


def _pt(variant, P, platform=BEBOP, workload=CIFAR, cache=None):
    return point(platform, workload, variant, P, CAL, cache, 2000)


def test_fixed_batch_is_paid_once_per_coalesced_chunk():
    one, coal = _pt("lmdbio-lmm-dio-prov", 576), _pt("lmdbio-lmm-dio-prov-coal", 576)
    assert coal.k > 1
    fixed = phases.fixed_batch(one)
    assert phases.fixed_batch(coal) == pytest.approx(fixed / coal.k + CAL.member_batch_s)
    assert one.ph["locate"] == one.reader_cpu == fixed > 0


def test_the_walk_steps_over_the_global_batch_and_the_ring_only_over_its_own():
    walk, ring = _pt("lmdbio-lmm", 72), _pt("lmdbio-lmm-dm", 72)
    phases.cursor_walk(walk)
    phases.cursor_walk(ring)
    assert walk.steps == walk.B and ring.steps == pytest.approx(ring.g)
    assert walk.walk_cpu > ring.walk_cpu


def test_a_walk_longer_than_a_file_that_fits_in_memory_faults_it_once():
    w = CIFAR.reading("per-process")                 # 256 x 9,216 records > the 500,000 of the file
    pt = _pt("lmdb", 9216, workload=w)
    phases.cursor_walk(pt)
    assert pt.steps > pt.N
    assert phases.walked_records(pt) == pt.N
    small = _pt("lmdb", 9216, platform=BEBOP.with_(node_memory=1 << 20), workload=w)
    phases.cursor_walk(small)
    assert phases.walked_records(small) == small.steps   # the file does not fit: every step faults


def test_the_ring_waits_for_every_other_reader():
    two, many = _pt("lmdbio-lmm-dm", 72), _pt("lmdbio-lmm-dm", 576)
    for pt in (two, many):
        phases.cursor_walk(pt)
    assert phases.ring_turn(many) > phases.ring_turn(two) >= 0


def test_copy_and_explicit_cpu_grow_with_the_group():
    assert phases.mmap_copy_cpu(_pt("lmdbio-lmm", 36)) > phases.mmap_copy_cpu(_pt("lmdbio-lmm", 72))
    a, b = _pt("lmdbio-lmm-dio", 36), _pt("lmdbio-lmm-dio", 72)
    assert phases.explicit_cpu(a) > phases.explicit_cpu(b) > 0
    assert a.ph["locate"] > 0                          # the planning


def test_perfect_speculation_leaves_no_page_to_wait_for():
    plat = BEBOP.with_(speculation="")
    pt = _pt("lmdbio-lmm-dm", 72, platform=plat)
    phases.cursor_walk(pt)
    phases.read_speculative(pt, 0.0)
    measured = _pt("lmdbio-lmm-dm", 72)
    phases.cursor_walk(measured)
    phases.read_speculative(measured, 0.0)
    assert pt.ring_wait < measured.ring_wait
    assert measured.info["speculation_served"] < 1.0 == pt.info["speculation_served"]


def test_a_walk_that_touches_values_reads_more_than_one_that_touches_leaves():
    leaves, values = (_pt("lmdb", 72, platform=BEBOP.with_(walk_touches_values=t)) for t in (False, True))
    for pt in (leaves, values):
        phases.cursor_walk(pt)
        phases.read_walk_faults(pt, 0.0)
    assert values.info["storage_bytes"] > leaves.info["storage_bytes"] > 0


def test_stag_turns_are_waiting():
    plain, stag = _pt("lmdbio-lmm-dio-prov-coal", 576), _pt("lmdbio-lmm-dio-prov-coal-stag", 576)
    for pt in (plain, stag):
        phases.read_explicit(pt, phases.explicit_cpu(pt))
    assert plain.ph["wait"] == 0 < stag.ph["wait"]


def test_the_index_pass_reads_every_leaf_once_cold_and_none_warm():
    cold, warm = _pt("lmdbio-lmm-dio", 72), _pt("lmdbio-lmm-dio", 72, cache="warm")
    assert phases.index_setup(cold) > phases.index_setup(warm) > 0


def test_compute_comes_from_the_flops_and_the_core_rate():
    pt = _pt("lmdb", 36)
    phases.training(pt, 0.0)
    assert pt.ph["compute"] == pytest.approx(pt.b * CIFAR.flops_per_sample / BEBOP.core_flops)
    preset = _pt("lmdb", 36, platform=BEBOP.with_(core_flops=0.0))
    phases.training(preset, 0.0)
    assert preset.ph["compute"] == pytest.approx(preset.b * CIFAR.compute_s_per_sample)


def test_ranks_outnumbering_cores_wait():
    few = BEBOP.with_(cores_per_node=36)
    crowded = BEBOP.with_(cores_per_node=1)
    a, b = _pt("lmdb", 36, platform=few), _pt("lmdb", 36, platform=crowded)
    for pt in (a, b):
        phases.fixed_batch(pt)
        phases.cursor_walk(pt)
    assert not phases.cpu_sharing(a, 0.0, 1.0)
    assert phases.cpu_sharing(b, 0.0, 1.0) and b.ph["wait"] > 0


def test_no_cifar_point_is_below_the_compute_floor():
    from lmdbio.lab.model.absolute import bounds

    for r in predict(BEBOP, [1, 36, 576, 9216], ("lmdb", "lmdbio-lmm-dio-prov-coal-stag"),
                     [CIFAR.name], CAL, 500, batches=["global", "per-process"]):
        w = CIFAR.reading(r["batch"])
        floor = [b for b in bounds(BEBOP, w, r["nprocs"]) if b.name.startswith("compute")][0]
        assert r["total_s"] >= floor.seconds, r


def test_predictions_carry_the_model_version_and_code_hash(tmp_path):
    rows = [predict_point(BEBOP, CIFAR, "lmdb", 36, CAL, budget=500)]
    write_predictions(rows, tmp_path, {}, BEBOP, CAL)
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["model"] == {"version": MODEL_VERSION, "sha256": model_hash(),
                             "hashed": "lmdbio/lab/model/*.py"}
    assert len(model_hash()) == 64


def test_a_workload_without_flops_keeps_its_compute_preset():
    w = Workload("w", record_bytes=3087, records=1000, batch_size=64, compute_s_per_sample=0.01)
    assert BEBOP.compute_s(w) == 0.01


def test_later_epochs_read_what_the_nodes_cache_kept():
    small = Workload("small", record_bytes=3087, records=4096, batch_size=256, iterations=64)
    one = _pt("lmdb", 16, platform=BEBOP.with_(ranks_per_node=16), workload=small)
    assert phases.epoch_reuse(one) == pytest.approx(1 - 16 / 64)      # 16 iterations per epoch
    off = _pt("lmdb", 16, platform=BEBOP.with_(ranks_per_node=16, epoch_cache=False), workload=small)
    tiny = _pt("lmdb", 16, platform=BEBOP.with_(ranks_per_node=16, node_memory=1 << 20), workload=small)
    assert phases.epoch_reuse(off) == phases.epoch_reuse(tiny) == 0.0
    # Records that move between nodes each epoch: a node finds only its own share again.
    odd = Workload("odd", record_bytes=3087, records=4000, batch_size=256, iterations=64)
    four = _pt("lmdb", 16, platform=BEBOP.with_(ranks_per_node=4), workload=odd)
    assert phases.epoch_reuse(four) == pytest.approx((64 - 4000 / 256) / 64 / 4)
    cold = predict_point(BEBOP.with_(ranks_per_node=16, epoch_cache=False), small, "lmdb", 16, CAL,
                         budget=500)
    kept = predict_point(BEBOP.with_(ranks_per_node=16), small, "lmdb", 16, CAL, budget=500)
    assert kept["epoch_cache_share"] == pytest.approx(0.75)
    assert kept["read_s"] + kept["locate_s"] < cold["read_s"] + cold["locate_s"]
    assert kept["storage_bytes"] == pytest.approx(0.25 * cold["storage_bytes"])


def test_per_process_mmap_faults_multiply_the_walks_reads_by_the_ranks_of_a_node():
    def walk(plat, variant):
        pt = _pt(variant, 72, platform=plat)
        phases.cursor_walk(pt)
        phases.read_walk_faults(pt, 0.0)
        return pt.info["storage_requests"]

    own = BEBOP.with_(mmap_per_process=True)
    # 36 walkers per node instead of one, and no pagepool between them and the targets.
    assert walk(own, "lmdb") > 10 * walk(BEBOP.with_(pagepool=0), "lmdb")
    assert walk(own.with_(pagepool=0), "lmdbio-lmm") == walk(BEBOP.with_(pagepool=0), "lmdbio-lmm")


def test_a_server_cache_serves_the_other_walkers_leaf_pages():
    def walk(plat, P):
        pt = _pt("lmdb", P, platform=plat)
        phases.cursor_walk(pt)
        phases.read_walk_faults(pt, 0.0)
        return pt.ph["locate"], pt.info["storage_requests"]

    plain, cached = BEBOP.with_(pagepool=0), BEBOP.with_(pagepool=0, server_cache=True)
    (t0, n0), (t1, n1) = walk(plain, 2304), walk(cached, 2304)
    assert t1 < t0 and n1 == pytest.approx(n0, rel=0.05)     # the same requests, served faster
    assert walk(cached, 36) == walk(plain, 36)                 # one walker: nothing to share
