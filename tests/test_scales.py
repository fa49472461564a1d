"""lmdbio.lab.scales: every scale defines every key, settings() merges and copies, batches divide."""

from __future__ import annotations

import pytest

from lmdbio.lab import scales
from lmdbio.lab.scales import KEYS, NOTEBOOK_SCALES, SCALES, settings

#: The global batch sizes the notebooks use below ``large`` (``notebooks/_make_notebooks.py``):
#: ImageNet records 16 (tiny) or 32, CIFAR-10 records 64 (tiny) or 256.

#: A benchmark notebook with no per-notebook overrides (00_environment sets its own n_engines).
BENCH = "09_scaling"


@pytest.mark.parametrize("scale", list(SCALES))
def test_every_scale_defines_exactly_the_keys(scale):
    assert set(SCALES[scale]) == set(KEYS)


def test_the_three_scales():
    assert set(SCALES) == {"tiny", "default", "large"}


@pytest.mark.parametrize("notebook", list(NOTEBOOK_SCALES))
def test_notebook_overrides_define_the_same_keys_at_every_scale(notebook):
    per_scale = NOTEBOOK_SCALES[notebook]
    assert set(per_scale) == set(SCALES), f"{notebook} must set values for every scale"
    keys = {s: set(v) for s, v in per_scale.items()}
    assert len({frozenset(k) for k in keys.values()}) == 1, f"{notebook}: {keys}"


def test_notebook_overrides_apply():
    cfg = settings("07_coal", "default")
    assert cfg["iters"] == NOTEBOOK_SCALES["07_coal"]["default"]["iters"]
    assert cfg["coalesce_sizes"] == NOTEBOOK_SCALES["07_coal"]["default"]["coalesce_sizes"]
    assert cfg["procs"] == SCALES["default"]["procs"]
    assert cfg["scale"] == "default" and cfg["notebook"] == "07_coal"


def test_explicit_values_win_and_none_is_ignored():
    cfg = settings("07_coal", "tiny", procs=[1], iters=None, repeats=5, coalesce_sizes=None)
    assert cfg["procs"] == [1]
    assert cfg["repeats"] == 5
    assert cfg["iters"] == NOTEBOOK_SCALES["07_coal"]["tiny"]["iters"]
    assert cfg["coalesce_sizes"] == NOTEBOOK_SCALES["07_coal"]["tiny"]["coalesce_sizes"]


def test_settings_returns_copies():
    before = settings(BENCH, "default")
    cfg = settings("07_coal", "default")
    cfg["procs"].append(999)
    cfg["model_procs"].clear()
    cfg["datasets"]["cifar10"] = ("cifar10", 1)
    cfg["datasets"]["extra"] = ("imagenet", 1)
    cfg["coalesce_sizes"].append(1)
    assert SCALES["default"]["procs"] == before["procs"]
    assert SCALES["default"]["model_procs"] == before["model_procs"]
    assert SCALES["default"]["datasets"] == before["datasets"]
    assert 1 not in NOTEBOOK_SCALES["07_coal"]["default"]["coalesce_sizes"]
    assert settings(BENCH, "default") == before


def test_unknown_scale_names_the_scales():
    with pytest.raises(ValueError) as e:
        settings(BENCH, "huge")
    for name in SCALES:
        assert name in str(e.value)
    assert "huge" in str(e.value)


@pytest.mark.parametrize("scale", list(SCALES))
def test_batches_divide_by_every_process_count(scale):
    # A batch that does not divide makes Reader raise at that P, after the earlier points ran.
    cfg = settings(BENCH, scale)
    assert set(cfg["batch"]) == set(cfg["datasets"]), "a batch size for every dataset"
    for p in (*cfg["procs"], *cfg["pfs_procs"]):
        for name, batch in cfg["batch"].items():
            assert batch % p == 0, f"{scale}: {name} batch {batch} is not a multiple of P={p}"


@pytest.mark.parametrize("scale", list(SCALES))
def test_process_counts_fit_the_engines(scale):
    cfg = settings(BENCH, scale)
    assert max(cfg["procs"]) <= cfg["n_engines"]
    assert max(cfg["pfs_procs"]) <= cfg["n_engines"]


@pytest.mark.parametrize("scale", list(SCALES))
def test_process_counts_sorted_from_one(scale):
    cfg = SCALES[scale]
    for key in ("procs", "pfs_procs", "model_procs"):
        assert cfg[key][0] == 1, f"{scale}: {key} must start at 1"
        assert cfg[key] == sorted(set(cfg[key])), f"{scale}: {key} must be sorted, no repeats"


def test_cluster_kind(monkeypatch):
    monkeypatch.delenv(scales.CLUSTER_ENV, raising=False)
    assert scales.cluster_kind() == "mpi"
    monkeypatch.setenv(scales.CLUSTER_ENV, "slurm")
    assert scales.cluster_kind() == "slurm"


def test_throttled_cifar10_points_run_long_enough_and_never_fewer_than_pfs_iters():
    # A cold throttled CIFAR-10 point's first ~40 batches run off the device's steady rate
    # (DM +75%, COAL's repeats 100% apart at 16 iterations): the default scale runs >= 96.
    from lmdbio.lab.experiments import throttle_iters

    for nb in NOTEBOOK_SCALES:
        for scale in SCALES:
            cfg = settings(nb, scale)
            assert throttle_iters(cfg, "imagenet") == cfg["pfs_iters"]
            assert throttle_iters(cfg, "cifar10") >= cfg["pfs_iters"]
    assert throttle_iters(settings("09_scaling", "default"), "cifar10") >= 96
    assert throttle_iters(settings("07_coal", "large"), "cifar10") == 128   # pfs_iters wins
