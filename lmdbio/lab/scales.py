"""The settings every notebook shares: scales, result paths and where the engines run.

A notebook asks for its settings once::

    cfg = scales.settings("03_lmm", scale, procs=procs)   # explicit parameters win

``SCALES`` holds what all notebooks share (engines, process counts, datasets,
the emulated-GPFS runs, the model's process counts); ``NOTEBOOK_SCALES`` the
few values one notebook sets differently. Every scale defines every key
(``tests/test_scales.py`` checks it), so a notebook never falls back to
another scale's number.

- ``tiny``: seconds per notebook; the tests run every notebook at it.
- ``default``: ``make reproduce`` on a 2-core machine (under 30 minutes for 00-12).
- ``large``: a cluster (``make reproduce SCALE=large CLUSTER=slurm``).
"""

from __future__ import annotations

import os

from .paths import REPO

__all__ = ["SCALES", "NOTEBOOK_SCALES", "KEYS", "REPO", "COMMITTED_RESULTS", "CLUSTER_ENV",
           "settings", "cluster_kind"]

#: The results committed with the repository (what ``make figures`` replots).
COMMITTED_RESULTS = REPO / "data" / "results"
#: Where the notebooks' engines run: ``mpi`` (local mpiexec) or ``slurm``; see lmdbio.lab.cluster.
CLUSTER_ENV = "LMDBIO_CLUSTER"

_POWERS = [1, 2, 4, 8, 16, 36, 72, 144, 288, 576, 1152, 2304, 4608, 9216]

SCALES: dict[str, dict] = {
    "tiny": {
        # measured on local disk
        "n_engines": 2, "procs": [1, 2], "iters": 3, "repeats": 1,
        "datasets": {"cifar10": ("cifar10", 512), "imagenet": ("imagenet", 48)},
        # global batch per dataset: a multiple of every process count of the scale
        "batch": {"cifar10": 64, "imagenet": 16},
        # measured through the emulated GPFS (lmdbio.lab.pfs), cold cache only
        "pfs_profile": "gpfs-2017", "pfs_procs": [1, 2], "pfs_iters": 3, "pfs_repeats": 1,
        "pfs_ranks_per_node": 1,
        # measured through throttled loop devices (lmdbio.lab.storage; root only), cold, with the
        # pfs_* iterations, repeats and ranks per node; [] = replot the committed results
        "throttle_profile": "gpfs-2017", "throttle_procs": [],
        # throttled points' least iterations per dataset where pfs_iters is too few (see default)
        "throttle_iters": {},
        # the papers' scale, from the calibrated model (lmdbio.lab.model)
        "model_platform": "bebop", "model_procs": [1, 36, 288], "model_budget": 300,
        "calibration_records": 1000,
    },
    "default": {
        "n_engines": 8, "procs": [1, 2, 4, 8], "iters": 32, "repeats": 3,
        "datasets": {"cifar10": ("cifar10", 60000), "imagenet": ("imagenet", 2000)},
        "batch": {"cifar10": 256, "imagenet": 32},   # Caffe's CIFAR-10 batch; ImageNet scaled to the data
        "pfs_profile": "gpfs-2017", "pfs_procs": [1, 4, 8], "pfs_iters": 16, "pfs_repeats": 3,
        "pfs_ranks_per_node": 4,
        # the throttled device at the judged point only (its P sweep: make bench-throttle)
        "throttle_profile": "gpfs-2017", "throttle_procs": [8],
        # A cold throttled point's first ~40 batches of CIFAR-10 run off the device's steady
        # rate (at P = 8 and 16 iterations DM read +75% and COAL's repeats spread 100%); from
        # 96 iterations on its ratios hold within 7% of 160's. ImageNet's points read 4x the
        # bytes per iteration and keep pfs_iters (their repeats agree within 8%).
        "throttle_iters": {"cifar10": 96},
        "model_platform": "bebop", "model_procs": _POWERS, "model_budget": 20000,
        "calibration_records": 4000,
    },
    "large": {
        "n_engines": 72, "procs": [1, 2, 4, 8, 16, 36, 72], "iters": 64, "repeats": 3,
        "datasets": {"cifar10": ("cifar10", 1_000_000), "imagenet": ("imagenet", 100_000)},
        "batch": {"cifar10": 576, "imagenet": 144},   # divisible by 36 and 72 ranks
        "pfs_profile": "gpfs-2017", "pfs_procs": [1, 8, 36, 72], "pfs_iters": 32, "pfs_repeats": 3,
        "pfs_ranks_per_node": 36,
        "throttle_profile": "gpfs-2017", "throttle_procs": [1, 8, 36, 72],
        "throttle_iters": {"cifar10": 96},
        "model_platform": "bebop", "model_procs": _POWERS, "model_budget": 100000,
        "calibration_records": 4000,
    },
}

#: The keys every scale defines.
KEYS = tuple(SCALES["default"])

#: Per-notebook values that differ from ``SCALES`` (each notebook sets them for every scale).
NOTEBOOK_SCALES: dict[str, dict[str, dict]] = {
    "00_environment": {"tiny": {"n_engines": 2}, "default": {"n_engines": 4},
                       "large": {"n_engines": 72}},
    # the tiny scale (the notebook tests) runs the throttled device in one notebook, at one P only
    "03_lmm": {"tiny": {"throttle_procs": [2]}, "default": {"throttle_procs": [8]},
               "large": {"throttle_procs": [1, 8, 36, 72]}},
    # the training emulation sleeps its compute: half the default iterations keep 10 at 2-3 min
    "10_training": {"tiny": {"iters": 3}, "default": {"iters": 16}, "large": {"iters": 64}},
    "07_coal": {
        "tiny": {"iters": 8, "pfs_iters": 8, "pfs_repeats": 1, "coalesce_sizes": [1 << 16, 1 << 18]},
        "default": {"iters": 48, "pfs_iters": 48, "pfs_repeats": 3,
                    "coalesce_sizes": [1 << 18, 1 << 20, 1 << 22, 1 << 24]},
        "large": {"iters": 128, "pfs_iters": 128, "pfs_repeats": 1,
                  "coalesce_sizes": [1 << 20, 1 << 22, 1 << 24, 1 << 26]},
    },
    "08_stag": {
        "tiny": {"iters": 4, "pfs_iters": 4, "pfs_repeats": 1, "stagger_size": 1},
        "default": {"iters": 24, "pfs_iters": 24, "pfs_repeats": 3, "stagger_size": 2},
        "large": {"iters": 32, "pfs_iters": 32, "pfs_repeats": 1, "stagger_size": 8},
    },
    # Beyond the papers: epochs on their own small dataset (N not a multiple of the epoch
    # batch, so the last batch is short), local points at procs, the emulated GPFS at pfs_procs
    # (shuffled epochs) and overlap_procs (prefetch); [] = replot the committed results.
    # coalesce_bytes (None: the Reader's 4 MiB) keeps k batches per chunk small enough at tiny
    # that an epoch holds its first chunk (read untimed) and the timed batches.
    "12_beyond": {
        "tiny": {"procs": [1, 2], "iters": 4, "repeats": 2,
                 "datasets": {"cifar10": ("cifar10", 512), "cifar10-epochs": ("cifar10", 500)},
                 "epoch_batch": 96, "pfs_procs": [], "overlap_procs": [], "prefetch_depths": [0, 1, 2],
                 "decode_iters": 8, "decode_rounds": 2, "coalesce_bytes": 1 << 18,
                 "shuffle_blocks": [16, 64], "shuffle_windows": [1, 4]},
        "default": {"procs": [1, 4], "iters": 32, "repeats": 3,
                    "datasets": {"cifar10": ("cifar10", 60000), "cifar10-epochs": ("cifar10", 6000)},
                    "epoch_batch": 256, "pfs_procs": [4], "overlap_procs": [4, 8],
                    "prefetch_depths": [0, 1, 2], "decode_iters": 100, "decode_rounds": 3,
                    "coalesce_bytes": None, "shuffle_blocks": [16, 64, 256, 1024], "shuffle_windows": [1, 4, 16]},
        "large": {"procs": [1, 4, 16, 36], "iters": 64, "repeats": 3,
                  "datasets": {"cifar10": ("cifar10", 1_000_000), "cifar10-epochs": ("cifar10", 60000)},
                  "epoch_batch": 576, "pfs_procs": [4, 16, 36], "overlap_procs": [4, 16, 36],
                  "prefetch_depths": [0, 1, 2], "decode_iters": 700, "decode_rounds": 3,
                  "coalesce_bytes": None, "shuffle_blocks": [16, 64, 256, 1024], "shuffle_windows": [1, 4, 16]},
    },
}


def settings(notebook: str, scale: str, **explicit) -> dict:
    """The notebook's settings at ``scale``; explicit (not None) parameters win.

    Raises ValueError naming the scales when ``scale`` is unknown.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    cfg = {k: _copy(v) for k, v in SCALES[scale].items()}
    cfg.update({k: _copy(v) for k, v in NOTEBOOK_SCALES.get(notebook, {}).get(scale, {}).items()})
    cfg.update({k: v for k, v in explicit.items() if v is not None})
    cfg["scale"] = scale
    cfg["notebook"] = notebook
    return cfg


def cluster_kind() -> str:
    """Where ``MPICluster()`` starts engines when asked for none: ``$LMDBIO_CLUSTER`` or ``mpi``."""
    return os.environ.get(CLUSTER_ENV) or "mpi"


def _copy(v):
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return list(v)
    return v
