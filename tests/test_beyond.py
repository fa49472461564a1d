"""lmdbio.lab.beyond (notebook 12's experiments): the epoch check counts from the file's keys, the
timed experiments return their rows, and the targets are judged by claims.direction."""

import numpy as np
import pandas as pd
import pytest
from mpi4py import MPI

from lmdbio.lab import beyond, claims

COMM = MPI.COMM_SELF
N, B = 203, 24   # 203 = 8 * 24 + 11: every policy has a last batch to cut


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    return make_dataset(tmp_path_factory.mktemp("beyond") / "c", "cifar10", N, commit_every=50, seed=2)


@pytest.mark.parametrize("variant,shuffle", [("lmdb", False), ("lmdbio-direct", True), ("lmdb-get", True)])
def test_short_epochs_deliver_every_key_once(db, variant, shuffle):
    rows = beyond.epoch_check(COMM, db, variant, B, shuffle=shuffle, epochs=2)
    assert [r["epoch"] for r in rows] == [0, 1]
    for r in rows:
        assert r["exactly_once"], r
        assert (r["delivered"], r["distinct_keys"], r["missing"], r["repeated"]) == (N, N, 0, 0)
        assert r["value_mismatches"] == 0
        assert r["batches"] == 9 and r["last_batch_records"] == N % B
    # Shuffled epochs differ from each other; file order is the same every epoch.
    assert (rows[1]["epoch_correlation"] < 0.5) == shuffle


def test_pad_and_drop_are_not_exactly_once_and_say_by_how_much(db):
    pad = beyond.epoch_check(COMM, db, "lmdbio-direct", B, last_batch="pad", epochs=1)[0]
    drop = beyond.epoch_check(COMM, db, "lmdbio-direct", B, last_batch="drop", epochs=1)[0]
    assert not pad["exactly_once"] and pad["repeated"] == B - N % B and pad["missing"] == 0
    assert not drop["exactly_once"] and drop["missing"] == N % B and drop["repeated"] == 0
    assert np.isnan(pad["epoch_correlation"])


def test_timed_experiments_return_their_rows(db):
    rate = beyond.epoch_rate(COMM, db, "lmdbio-direct", B, 3, shuffle=True, cache="cold", coalesce_bytes=1)
    assert len(rate) == 1 and rate[0]["records"] == 3 * B and rate[0]["records_per_s"] > 0
    ov = beyond.overlap(COMM, db, "lmdbio-direct", B, 3, depths=(0, 2), coalesce_bytes=1)
    assert [r["depth"] for r in ov] == [-1, 0, 2]
    assert all(0 <= r["io_share"] <= 1 and r["wall_s"] >= r["io_wait_s"] for r in ov)
    assert all(r["steady_wall_s"] <= r["wall_s"] and r["steady_io_wait_s"] <= r["io_wait_s"] for r in ov)
    assert ov[0]["compute_s"] == 0 and ov[1]["compute_s"] > 0
    dec = pd.DataFrame(beyond.decode_rate(COMM, db, "lmdbio-direct", B, 2, rounds=2))
    assert set(dec["series"]) == {"raw", "decoded", "dali-caffe"}
    assert (dec.groupby("series").size() == 2).all()
    ours = dec[dec["series"] != "dali-caffe"]
    assert (ours["records_per_s"] > 0).all()
    dali = dec[dec["series"] == "dali-caffe"]
    # DALI is optional: measured, or each row says why not.
    assert (dali["records_per_s"] > 0).all() or (dali["error"].str.len() > 0).all()


def _rate(ratios_shuffled, ratios_get):
    rows = []
    for r, (a, b) in enumerate(zip(ratios_shuffled, ratios_get)):
        rows += [dict(variant="auto", shuffle=False, nprocs=4, repeat=r, records_per_s=100.0),
                 dict(variant="auto", shuffle=True, nprocs=4, repeat=r, records_per_s=100.0 * a),
                 dict(variant="lmdb-get", shuffle=True, nprocs=4, repeat=r, records_per_s=100.0 * a / b)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("shuffled,get,expect", [
    ((0.9, 0.85, 0.95), (4, 5, 3.5), ("yes", "yes")),
    ((0.5, 0.9, 0.7), (2, 2.5, 2.9), ("inconclusive", "no")),
])
def test_targets_are_judged_by_the_claims_rule(shuffled, get, expect):
    t = beyond.verdicts(rate_gpfs=_rate(shuffled, get)).set_index("target")
    assert (t.loc["shuffle-vs-unshuffled", "verdict"], t.loc["shuffle-vs-get", "verdict"]) == expect
    row = t.loc["shuffle-vs-unshuffled"]
    assert row["lo"] == pytest.approx(min(shuffled)) and row["hi"] == pytest.approx(max(shuffled))
    assert row["verdict"] == claims.direction(row["lo"], row["hi"], 0.8)
    assert set(t["setting"]) == {"gpfs"}


def test_each_shuffle_mode_is_judged_on_its_own_rows():
    """Shard rows (shuffle_mode "shard") are judged as their own targets and never pulled into
    the window mode's (shuffle=True) ratios."""
    df = _rate((0.5, 0.55, 0.6), (2, 2, 2)).assign(shuffle_mode=lambda d: d["shuffle"].map(
        {True: "window", False: ""}))
    shard = df[df["shuffle_mode"] == "window"].query("variant == 'auto'").assign(
        shuffle_mode="shard", records_per_s=lambda d: d["records_per_s"] * 2)
    t = beyond.verdicts(rate_gpfs=pd.concat([df, shard], ignore_index=True)).set_index("target")
    assert t.loc["shuffle-vs-unshuffled", "value"] == pytest.approx(0.55)
    assert t.loc["shard-vs-unshuffled", "value"] == pytest.approx(1.1)
    assert t.loc["shard-vs-get", "value"] == pytest.approx(4.0)
    assert (t.loc["shuffle-vs-get", "verdict"], t.loc["shard-vs-get", "verdict"]) == ("no", "yes")
    # Results from before the shard mode (no column) give the window mode's targets only.
    old = beyond.verdicts(rate_gpfs=_rate((0.5, 0.55, 0.6), (2, 2, 2)))
    assert set(old["target"]) == {"shuffle-vs-unshuffled", "shuffle-vs-get"}


def test_prefetch_target_is_one_minus_the_io_share_at_depth_two():
    rows = [dict(nprocs=4, repeat=r, rank=q, depth=d, io_share_steady=s, io_share=1.0)
            for r, shares in enumerate([(0.4, 0.05), (0.45, 0.12)]) for q in range(2)
            for d, s in zip((0, 2), shares)]
    t = beyond.verdicts(overlap_gpfs=pd.DataFrame(rows)).iloc[0]
    assert t["target"] == "prefetch" and t["verdict"] == "inconclusive"
    assert t["lo"] == pytest.approx(0.88) and t["hi"] == pytest.approx(0.95)


def test_epoch_rate_from_start_times_the_whole_epoch(db):
    """Past the start (default) the epoch's first chunk is read untimed; from_start times it
    too, so a window longer than the epoch counts every record of the epoch once."""
    past = beyond.epoch_rate(COMM, db, "lmdbio-direct", B, 10_000, shuffle=True, cache="warm",
                             coalesce_bytes=1)[0]
    whole = beyond.epoch_rate(COMM, db, "lmdbio-direct", B, 10_000, shuffle=True, cache="warm",
                              coalesce_bytes=1, from_start=True)[0]
    assert whole["records"] == N
    assert past["records"] == N - past["coalesce"] * B
