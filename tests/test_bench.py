"""lmdbio bench: schema of the tidy rows and summary, the raw limit, cold cache, failures, CLI."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from lmdbio import bench, metrics
from lmdbio.errors import LmdbioError
from lmdbio.emulation import (COMPUTE_PRESETS, MODEL_PRESETS, TrainingEmulator,
                              parse_compute_time, parse_model_bytes)

VARIANT = "lmdbio-lmm-dio"
ROW_COLUMNS = {"dataset", "variant", "nprocs", "cache", "repeat", "rank", "is_reader", "level",
               "phase", "wall_s", "point_wall_s", "records", "record_bytes", "resident_fraction",
               "file_resident_fraction", "evict_ok", "status", "error"}


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    # On disk (pytest's tmp is ext4 here, not tmpfs: eviction must really drop pages).
    return str(make_dataset(tmp_path_factory.mktemp("bench") / "cifar", "cifar10", 320,
                            commit_every=100, seed=1))


@pytest.fixture(scope="module")
def comm():
    from mpi4py import MPI

    return MPI.COMM_SELF


def test_run_point_rows_and_summary(db, comm):
    rows = []
    for v in (bench.RAW, "lmdb", VARIANT):
        rows += bench.run_point(comm, db, v, batch_size=32, iters=4, cache="warm", repeat=0)
    df = pd.DataFrame(rows)
    assert ROW_COLUMNS <= set(df.columns)
    assert set(df["variant"]) == {bench.RAW, "lmdb", VARIANT}
    assert (df["status"] == "ok").all() and (df["nprocs"] == 1).all()
    for v, g in df.groupby("variant"):
        phases = set(zip(g["level"], g["phase"]))
        assert {("step", p) for p in ("io", "compute", "comm", "barrier", "total")} <= phases, v
        assert g["records"].iloc[0] == 4 * 32
    # Every variant delivers the same records, so the same bytes.
    assert df.groupby("variant")["record_bytes"].first().nunique() == 1
    raw_read = df[(df["variant"] == bench.RAW) & (df["phase"] == "read")]
    assert len(raw_read) == 1 and raw_read["bytes"].iloc[0] >= df["record_bytes"].iloc[0]
    assert (df.loc[df["phase"] == "total", "user_s"] >= 0).all()

    s = bench.summarize(df)
    assert list(s.columns) == list(bench.SUMMARY_COLUMNS)
    assert len(s) == 3 and (s["status"] == "ok").all()
    by = s.set_index("variant")
    assert by.loc[bench.RAW, "fraction_of_limit"] == pytest.approx(1.0)
    assert by.loc["lmdb", "speedup_vs_lmdb"] == pytest.approx(1.0)
    for v in (bench.RAW, "lmdb", VARIANT):
        assert by.loc[v, "records_per_s"] > 0 and by.loc[v, "cpu_s_per_gb"] > 0
        assert by.loc[v, "resident_fraction"] == pytest.approx(1.0)  # warm means warm
    assert by.loc[VARIANT, "fraction_of_limit"] == pytest.approx(
        by.loc[VARIANT, "records_per_s"] / by.loc[bench.RAW, "records_per_s"])


def test_cold_point_is_evicted(db, comm):
    rows = bench.run_point(comm, db, bench.RAW, batch_size=32, iters=4, cache="cold")
    assert rows[0]["cache"] == "cold"
    assert rows[0]["resident_fraction"] == pytest.approx(0.0, abs=0.02)
    assert rows[0]["evict_ok"] is True


def test_evict_and_residency_on_a_file(tmp_path):
    f = tmp_path / "blob"
    f.write_bytes(os.urandom(4 << 20))
    with open(f, "rb") as fh:
        fh.read()
    assert metrics.residency(f) > 0.9
    metrics.evict(f)
    assert metrics.residency(f) < 0.05
    pages = metrics.resident_pages(f)
    assert pages.dtype == bool and len(pages) == (4 << 20) // 4096 and not pages.any()


def test_failed_eviction_warns_loudly(db, comm, monkeypatch, capsys):
    monkeypatch.setattr(metrics, "evict", lambda path: None)
    with pytest.warns(bench.EvictionWarning, match="COLD CACHE NOT COLD"):
        rows = bench.run_point(comm, db, bench.RAW, batch_size=32, iters=2, cache="cold")
    assert rows[0]["evict_ok"] is False and rows[0]["resident_fraction"] > 0.5
    assert "WARNING" in capsys.readouterr().err
    s = bench.summarize(pd.DataFrame(rows))
    assert s["evict_ok"].iloc[0] == False  # noqa: E712 (numpy bool)
    assert "evict_ok=False" in bench.format_report(s)


def test_compute_emulation_breakdown(db, comm):
    rows = bench.run_point(comm, db, bench.RAW, batch_size=32, iters=3, cache="warm",
                           compute_time=0.001, model_bytes="1MB")
    s = bench.summarize(pd.DataFrame(rows)).iloc[0]
    assert s["compute_s"] == pytest.approx(3 * 32 * 0.001, rel=0.5)
    assert 0 < s["au"] <= 1
    assert s["compute_s"] + s["read_s"] + s["comm_s"] + s["wait_s"] <= s["wall_s"] * 1.01
    assert s["model_bytes"] == 10**6


def test_emulation_parsing():
    assert parse_compute_time("resnet50") == COMPUTE_PRESETS["resnet50"]
    assert parse_compute_time("0.002") == 0.002 and parse_compute_time(None) == 0.0
    assert parse_model_bytes("alexnet") == MODEL_PRESETS["alexnet"]
    assert parse_model_bytes("1.5MiB") == int(1.5 * 2**20) and parse_model_bytes("100MB") == 10**8
    assert parse_model_bytes(0) == 0
    with pytest.raises(ValueError, match="preset"):
        parse_compute_time("vgg")
    with pytest.raises(ValueError, match="size"):
        parse_model_bytes("12 parsecs")
    from mpi4py import MPI

    with TrainingEmulator(MPI.COMM_SELF, 0.0, 1000) as emu:
        c, m = emu.step(8)
        assert c >= 0 and m >= 0


def test_run_point_rejects_bad_arguments(db, comm):
    with pytest.raises(ValueError, match="unknown variant"):
        bench.run_point(comm, db, "lmdbio-fast", batch_size=32, iters=1)
    with pytest.raises(ValueError, match="cache"):
        bench.run_point(comm, db, bench.RAW, batch_size=32, iters=1, cache="tepid")
    with pytest.raises(LmdbioError, match="does not exist"):
        bench.run_point(comm, db + "-missing", bench.RAW, batch_size=32, iters=1)


def test_make_points_adds_limit_and_baseline():
    pts = bench.make_points(["d"], ["lmdbio-lmm"], [1, 2], ["warm", "cold"], 32, 2)
    assert len(pts) == 2 * 2 * 3
    assert [p["variant"] for p in pts[:3]] == [bench.RAW, "lmdb", "lmdbio-lmm"]
    pts = bench.make_points(["d"], ["lmdbio-lmm"], [1], ["warm"], 32, 2, baselines=False)
    assert [p["variant"] for p in pts] == [bench.RAW, "lmdbio-lmm"]


@pytest.mark.mpi
def test_cli_sweep_writes_three_files(db, tmp_path, capsys):
    from lmdbio.cli import main

    out = tmp_path / "res"
    rc = main(["bench", "--dataset", db, "--variants", VARIANT, "--procs", "1,2",
               "--cache", "warm,cold", "--batch-size", "32", "--iters", "3", "--out", str(out),
               "--quiet", "--timeout", "120"])
    assert rc == 0
    assert {p.name for p in out.iterdir()} >= {"points.csv", "summary.csv", "meta.json"}
    s = pd.read_csv(out / "summary.csv")
    assert list(s.columns) == list(bench.SUMMARY_COLUMNS)
    assert len(s) == 3 * 2 * 2 and (s["status"] == "ok").all(), s["error"].tolist()
    raw = s[s["variant"] == bench.RAW]
    assert len(raw) == 4 and np.allclose(raw["fraction_of_limit"], 1.0)
    assert np.allclose(s.loc[s["variant"] == "lmdb", "speedup_vs_lmdb"], 1.0)
    assert s["fraction_of_limit"].notna().all() and s["speedup_vs_lmdb"].notna().all()
    cold = s[s["cache"] == "cold"]
    # LMDB's mmap keeps the pages it mapped during warmup (and fault-around
    # neighbours) resident; on this tiny DB that is a visible share, on real ones not.
    assert (cold.loc[cold["variant"] != "lmdb", "resident_fraction"] < 0.05).all()
    assert (cold["evict_ok"] == (cold["resident_fraction"] <= 0.05)).all()
    p = pd.read_csv(out / "points.csv")
    two = p[(p["nprocs"] == 2) & (p["level"] == "step") & (p["phase"] == "total")]
    assert sorted(two.groupby(["variant", "cache"])["rank"].apply(sorted).iloc[0]) == [0, 1]
    meta = json.loads((out / "meta.json").read_text())
    assert {"host", "cores", "memory_bytes", "versions", "git_commit", "config"} <= set(meta)
    assert "MPICH" in meta["versions"]["mpi"] or meta["versions"]["mpi"] != "unknown"
    assert meta["config"]["procs"] == "1,2"

    capsys.readouterr()
    assert main(["bench", "--report", str(out)]) == 0
    table = capsys.readouterr().out
    assert "fraction_of_limit" in table and VARIANT in table and "raw" in table


@pytest.mark.mpi
def test_failing_point_is_reported_and_sweep_continues(db, tmp_path):
    ok = bench.make_points([db], [], [2], ["warm"], 32, 2, baselines=False)
    bad_variant = dict(ok[0], variant="lmdbio-does-not-exist")
    gone = dict(ok[0], dataset=str(tmp_path / "vanished"))
    out = tmp_path / "res"
    s = bench.run_sweep([bad_variant, gone] + ok, out, timeout=120, progress=False)
    assert len(s) == 3
    by = s.set_index(s["variant"] + "@" + s["dataset"].astype(str))
    bad = by.loc[f"lmdbio-does-not-exist@{db}"]
    assert bad["status"] == "failed" and "unknown variant" in bad["error"]
    assert by.loc[f"raw@{tmp_path / 'vanished'}", "status"] == "failed"
    assert "does not exist" in by.loc[f"raw@{tmp_path / 'vanished'}", "error"]
    assert by.loc[f"raw@{db}", "status"] == "ok"
    assert "FAILED" in bench.format_report(s)


@pytest.mark.mpi
def test_timeout_is_a_failed_point(db, tmp_path):
    pt = bench.make_points([db], [], [1], ["warm"], 32, 2, baselines=False)[0]
    rows, _ = bench.run_point_subprocess(pt, 0, tmp_path, timeout=0.01)
    assert rows[0]["status"] == "failed" and "timeout" in rows[0]["error"]


def test_cli_argument_errors(db, capsys):
    from lmdbio.cli import main

    assert main(["bench", "--dataset", db, "--variants", "nope", "--out", "x"]) == 1
    assert "unknown variant" in capsys.readouterr().err
    assert main(["bench", "--dataset", db, "--procs", "3", "--batch-size", "32", "--out", "x"]) == 1
    assert "divisible" in capsys.readouterr().err
    assert main(["bench", "--report", "/nonexistent-dir"]) == 1
