"""Training emulation, DLIO style: a compute sleep per sample and a gradient allreduce per step.

The benchmark replaces the model by two costs per iteration (as DLIO's
``computation_time``): ``compute_time`` seconds per local sample spent
sleeping (an accelerator busy with the batch; the host CPU is idle), and an
in-place ``MPI_Allreduce`` (sum) of ``model_bytes`` of float32 gradients.

The presets are *assumptions*, not measurements on this machine:

- ``alexnet``: about 3,000 training images/s on one V100-class GPU (fp32,
  227x227 input), i.e. 0.33 ms per sample; 61.1 M parameters = 244 MB of
  float32 gradients.
- ``resnet50``: about 400 training images/s on one V100-class GPU (fp32,
  224x224; published figures range from ~135 to ~1,200 images/s across GPUs
  and precisions), i.e. 2.5 ms per sample; 25.6 M parameters = 102 MB.
"""

from __future__ import annotations

import re
import time

import numpy as np

__all__ = ["COMPUTE_PRESETS", "MODEL_PRESETS", "parse_compute_time", "parse_model_bytes",
           "TrainingEmulator"]

#: Seconds of accelerator compute per training sample (forward + backward), see module doc.
COMPUTE_PRESETS = {"alexnet": 1 / 3000, "resnet50": 1 / 400}
#: Bytes of float32 gradients allreduced per step (parameters x 4).
MODEL_PRESETS = {"alexnet": 61_100_840 * 4, "resnet50": 25_557_032 * 4}

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_compute_time(value: str | float | int | None) -> float:
    """Seconds per sample from a number or a preset name (``alexnet``, ``resnet50``)."""
    if value is None:
        return 0.0
    if isinstance(value, str):
        key = value.strip().lower()
        if key in COMPUTE_PRESETS:
            return float(COMPUTE_PRESETS[key])
        try:
            value = float(key)
        except ValueError:
            raise ValueError(f"compute time {value!r} is neither seconds per sample nor a preset "
                             f"({', '.join(COMPUTE_PRESETS)})") from None
    value = float(value)
    if not value >= 0:
        raise ValueError(f"compute time must be >= 0 seconds per sample, got {value}")
    return value


def parse_model_bytes(value: str | int | None) -> int:
    """Bytes from a number, a size such as ``100MB``/``1.5GiB``, or a preset name."""
    if value is None:
        return 0
    if isinstance(value, str):
        key = value.strip().lower()
        if key in MODEL_PRESETS:
            return int(MODEL_PRESETS[key])
        m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)", key)
        if not m or m.group(2) not in _UNITS:
            raise ValueError(f"model bytes {value!r} is not a size (e.g. 100MB, 1GiB) or a preset "
                             f"({', '.join(MODEL_PRESETS)})")
        value = float(m.group(1)) * _UNITS[m.group(2)]
    value = int(value)
    if value < 0:
        raise ValueError(f"model bytes must be >= 0, got {value}")
    return value


class TrainingEmulator:
    """Per-iteration compute sleep and gradient allreduce on ``comm``.

    ``step(nsamples)`` returns ``(compute_s, comm_s)``: the wall time of each
    part, so the caller can build the read / compute / communication / wait
    breakdown. With ``comm.size == 1`` there is nothing to reduce.
    """

    def __init__(self, comm, compute_time: float = 0.0, model_bytes: int = 0):
        self.comm = comm
        self.compute_time = parse_compute_time(compute_time)
        self.model_bytes = parse_model_bytes(model_bytes)
        n = -(-self.model_bytes // 4)
        self._grads = np.zeros(n, dtype=np.float32) if n and comm.size > 1 else None

    def step(self, nsamples: int) -> tuple[float, float]:
        t0 = time.monotonic()
        if self.compute_time > 0 and nsamples > 0:
            time.sleep(self.compute_time * nsamples)
        t1 = time.monotonic()
        if self._grads is not None:
            from mpi4py import MPI

            self.comm.Allreduce(MPI.IN_PLACE, self._grads, op=MPI.SUM)
        t2 = time.monotonic()
        return t1 - t0, t2 - t1

    def close(self) -> None:
        self._grads = None

    def __enter__(self) -> TrainingEmulator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
