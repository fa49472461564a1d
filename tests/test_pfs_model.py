"""The storage model of the emulated parallel file system (no FUSE needed)."""

import dataclasses
import json
import math

import pytest

from lmdbio.errors import ConfigurationError
from lmdbio.lab.pfs import PROFILES, StorageModel, load_profile, simulate
from lmdbio.lab.pfs.model import size_bin

KiB, MiB = 1 << 10, 1 << 20


def profile(**kw):
    """gpfs-2017 at scale 1 with some values replaced (for exact arithmetic)."""
    return dataclasses.replace(load_profile("gpfs-2017", time_scale=1.0), **kw)


def test_profiles_exist_with_sources():
    assert {"local", "gpfs-2017", "lustre"} <= set(PROFILES)
    for name in PROFILES:
        p = load_profile(name)
        for key in ("targets", "stripe", "latency_s", "target_bw", "seek_s", "read_size", "readahead"):
            assert key in p.sources, f"{name}.{key} has no source"
        for key, text in p.sources.items():
            if name != "local":
                kinds = ("source", "estimate", "choice") if key == "time_scale" else ("source", "estimate")
                assert text.startswith(kinds), f"{name}.{key}: {text}"
        json.dumps(p.as_dict())


def test_time_scale_keeps_ratios():
    a = load_profile("gpfs-2017", time_scale=1.0)
    b = load_profile("gpfs-2017", time_scale=10.0)
    assert b.latency_s == pytest.approx(10 * a.latency_s)
    assert b.seek_s == pytest.approx(10 * a.seek_s)
    assert b.target_bw == pytest.approx(a.target_bw / 10)
    assert (b.targets, b.stripe, b.read_size, b.readahead) == (a.targets, a.stripe, a.read_size, a.readahead)
    # the same requests take 10x as long
    reqs = [(0, s, s * 3 * MiB, 300 * KiB, 0.0) for s in range(5)]
    ta = simulate(a, reqs)
    tb = simulate(b, reqs)
    assert tb == pytest.approx([10 * x for x in ta])
    assert load_profile("gpfs-2017").time_scale == b.scaled(load_profile("gpfs-2017").time_scale).time_scale


def test_unknown_profile_and_bad_scale():
    with pytest.raises(ConfigurationError, match="gpfs-2017"):
        load_profile("nfs")
    with pytest.raises(ConfigurationError):
        load_profile("lustre", time_scale=0)


@pytest.mark.parametrize("name", ["gpfs-2017", "lustre"])
@pytest.mark.parametrize("size", [4 * KiB, 64 * KiB, 200 * KiB])
def test_single_request_is_latency_plus_size_over_bw(name, size):
    p = load_profile(name)
    m = StorageModel(p, nodes=1)
    t0 = 5.0
    done = m.submit(0, 0, 0, size, t0)
    expect = p.latency_s + size / p.target_bw
    if p.node_link_bw is not None:
        expect = max(expect, size / p.node_link_bw)
    assert done - t0 == pytest.approx(expect, rel=0.10)


def test_local_profile_costs_nothing():
    m = StorageModel("local", nodes=2)
    assert m.submit(1, 3, 123, 4 * MiB, 7.5) == 7.5
    c = m.counters()
    assert c["nodes"][1]["requests"] == 1 and c["nodes"][1]["bytes"] == 4 * MiB


def test_k_streams_share_one_target():
    p = profile(targets=1, stripe=1 * MiB, seek_s=0.0, latency_s=0.001, target_bw=1e8, node_link_bw=None)
    size = 1 * MiB
    one = size / p.target_bw + p.latency_s
    for k in (1, 2, 4, 8):
        m = StorageModel(p, nodes=k)
        done = [m.submit(i, i, 0, size, 0.0) for i in range(k)]
        # FIFO: the i-th request ends after i+1 services; the last after k
        assert done == pytest.approx([(i + 1) * one for i in range(k)])
        # aggregate throughput stays at one target's bandwidth (less latency)
        assert k * size / max(done) == pytest.approx(size / one)
        c = m.counters()
        assert c["targets"][0]["queue_wait_s"] == pytest.approx(sum(i * one for i in range(k)))


def test_more_targets_serve_streams_in_parallel():
    p = profile(targets=4, stripe=1 * MiB, seek_s=0.0, latency_s=0.0, target_bw=1e8, node_link_bw=None)
    m = StorageModel(p, nodes=4)
    # stream i reads stripe unit i: one per target, all in parallel
    done = [m.submit(i, i, i * MiB, MiB, 0.0) for i in range(4)]
    assert done == pytest.approx([MiB / 1e8] * 4)


def test_stripe_splitting():
    p = profile(targets=4, stripe=256 * KiB)
    m = StorageModel(p)
    pieces = m.pieces(100 * KiB, 1 * MiB)
    assert sum(n for _, _, n in pieces) == 1 * MiB
    assert [t for t, _, _ in pieces] == [0, 1, 2, 3, 0]
    assert pieces[0] == (0, 100 * KiB, 156 * KiB)
    assert pieces[1] == (1, 0, 256 * KiB)
    # unit 4 is target 0's second unit: it continues target 0's byte space
    assert pieces[4] == (0, 256 * KiB, 100 * KiB)
    # another file starts on another target
    assert m.pieces(0, 10, file=3)[0][0] == 3
    # a request inside one unit is one piece; crossing a boundary is two
    assert len(m.pieces(10, 1000)) == 1
    assert len(m.pieces(256 * KiB - 10, 20)) == 2
    # counters see pieces per target and one request per node
    m.submit(0, 0, 100 * KiB, 1 * MiB, 0.0)
    c = m.counters()
    assert [t["requests"] for t in c["targets"]] == [2, 1, 1, 1]
    assert c["nodes"][0]["requests"] == 1 and c["nodes"][0]["bytes"] == 1 * MiB
    assert c["nodes"][0]["hist"] == {str(size_bin(MiB)): 1}


def test_request_completes_with_its_last_piece():
    p = profile(targets=2, stripe=64 * KiB, latency_s=0.001, target_bw=1e8, seek_s=0.0, node_link_bw=None)
    m = StorageModel(p)
    # 4 units: 2 per target, served back to back on each target in parallel
    done = m.submit(0, 0, 0, 256 * KiB, 0.0)
    assert done == pytest.approx(2 * (0.001 + 64 * KiB / 1e8))


def test_interleaved_random_streams_pay_seek_sequential_ones_do_not():
    p = profile(targets=1, latency_s=0.001, target_bw=1e9, seek_s=0.005, node_link_bw=None)
    size = 4 * KiB
    # two streams, each reading its own region sequentially, interleaved on the target
    m = StorageModel(p, nodes=2)
    t = 0.0
    for i in range(10):
        for s in range(2):
            m.submit(s, s, s * 64 * MiB + i * size, size, t)
    interleaved = m.counters()["total"]["seeks"]
    assert interleaved == 19  # every switch except the first piece

    # the same streams one after the other: no seek but the one switch
    m = StorageModel(p, nodes=2)
    for s in range(2):
        for i in range(10):
            m.submit(s, s, s * 64 * MiB + i * size, size, 0.0)
    assert m.counters()["total"]["seeks"] == 1

    # two streams that continue each other's reads (a shared sequential scan): no seek
    m = StorageModel(p, nodes=2)
    for i in range(20):
        m.submit(i % 2, i % 2, i * size, size, 0.0)
    assert m.counters()["total"]["seeks"] == 0

    # one stream reading at random pays no seek (only latency)
    m = StorageModel(p)
    done = m.simulate([(0, 0, (7919 * i % 1000) * size, size, 0.0) for i in range(10)])
    assert m.counters()["total"]["seeks"] == 0
    assert done[-1] == pytest.approx(10 * (0.001 + size / 1e9))


def test_seek_penalty_costs_time():
    p = profile(targets=1, latency_s=0.001, target_bw=1e9, seek_s=0.005, node_link_bw=None)
    size = 4 * KiB
    reqs = [(s, s, s * 64 * MiB + i * size, size, 0.0) for i in range(10) for s in range(2)]
    done = simulate(p, reqs, nodes=2)
    assert done[-1] == pytest.approx(20 * (0.001 + size / 1e9) + 19 * 0.005)


def test_node_link_limits_one_node():
    p = profile(targets=8, stripe=256 * KiB, latency_s=0.0, target_bw=1e9, seek_s=0.0, node_link_bw=1e8)
    m = StorageModel(p, nodes=2)
    a = m.submit(0, 0, 0, 8 * 256 * KiB, 0.0)
    assert a == pytest.approx(8 * 256 * KiB / 1e8)
    # node 1 has its own link: its request is not slowed by node 0's link
    b = m.submit(1, 1, 16 * MiB, 256 * KiB, 0.0)
    assert b == pytest.approx(256 * KiB / 1e8)


def test_deterministic_and_counters_json():
    p = load_profile("gpfs-2017")
    reqs = [(i % 3, i % 5, (i * 7919 % 500) * 4096, 4096 * (1 + i % 4), i * 1e-4) for i in range(300)]
    a = simulate(p, reqs, nodes=3)
    m = StorageModel(p, nodes=3)
    b = m.simulate(reqs)
    assert a == b
    assert all(d >= r[4] for d, r in zip(a, reqs))
    c = m.counters()
    json.dumps(c)
    assert c["total"]["requests"] == 300
    assert sum(n["requests"] for n in c["nodes"]) == 300
    assert sum(n["bytes"] for n in c["nodes"]) == sum(r[3] for r in reqs)
    assert sum(t["bytes"] for t in c["targets"]) == sum(r[3] for r in reqs)
    assert sum(sum(n["hist"].values()) for n in c["nodes"]) == 300
    assert c["total"]["queue_wait_s"] > 0
    m.reset_counters()
    assert m.counters()["total"]["requests"] == 0


def test_bad_arguments():
    m = StorageModel("gpfs-2017", nodes=2)
    with pytest.raises(ValueError):
        m.submit(2, 0, 0, 10, 0.0)
    with pytest.raises(ValueError):
        m.submit(0, 0, -1, 10, 0.0)
    with pytest.raises(ValueError):
        StorageModel("gpfs-2017", nodes=0)


def test_size_bin():
    assert size_bin(1) == 4096 and size_bin(4096) == 4096 and size_bin(4097) == 8192
    assert size_bin(MiB) == MiB and math.log2(size_bin(3 * MiB)) == 22
