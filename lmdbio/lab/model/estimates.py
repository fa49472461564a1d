"""The model's estimates as dimensions to sample: their ranges, how each is drawn, a seeded
Latin hypercube over them (:mod:`lmdbio.lab.model.uncertainty` runs the model at the samples).

A number whose range spans 4x or more (both ends > 0) is drawn log-uniformly, another
number uniformly (integers rounded); a switch (booleans, file paths, or ends not in
increasing order such as ``stagger_size`` 1 / 0) takes its low end in half the strata,
its high end in the other half.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..emulation import parse_compute_time, parse_model_bytes
from lmdbio.errors import ConfigurationError
from .platform import Platform

__all__ = ["Estimate", "estimates", "apply", "latin_hypercube", "draw", "BAND", "PREFIX"]

#: The band: these quantiles of the joint samples.
BAND = (0.05, 0.95)
#: Column prefix of the sampled estimate values in joint.csv.
PREFIX = "x:"
#: A numeric range at least this wide (high / low) is drawn log-uniformly.
LOG_SPAN = 4.0
#: A workload range's key -> the Workload field it sets.
_FIELD = {"compute": "compute_s_per_sample", "model": "model_bytes"}


@dataclass(frozen=True)
class Estimate:
    """One estimate: its name, range ends, central value, how it is drawn, and why the range."""

    name: str
    low: object
    high: object
    central: object
    kind: str          # "log", "linear" or "switch"
    why: str = ""
    integer: bool = False

    def value(self, u: float):
        """The value at quantile ``u`` in [0, 1) of this estimate's distribution."""
        if self.kind == "switch":
            return self.low if u < 0.5 else self.high
        lo, hi = float(self.low), float(self.high)
        v = lo * (hi / lo) ** u if self.kind == "log" else lo + (hi - lo) * u
        return int(round(v)) if self.integer else v

    def code(self, v) -> float:
        """A number for ``v`` (a switch: 0 at its low end, 1 at its high end)."""
        if self.kind == "switch":
            return 0.0 if v == self.low else 1.0
        return float(v)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _make(name: str, lo, hi, central, why: str, integer: bool) -> Estimate:
    if _is_number(lo) and _is_number(hi) and float(lo) < float(hi):
        kind = "log" if float(lo) > 0 and float(hi) / float(lo) >= LOG_SPAN else "linear"
        return Estimate(name, lo, hi, central, kind, why, integer)
    return Estimate(name, lo, hi, central, "switch", why)


def estimates(platform: Platform) -> list[Estimate]:
    """Every estimate of ``platform`` that can move a prediction (ends equal to each other skipped)."""
    from ..pfs.model import PROFILES, load_profile, profile_ranges

    out = []
    if isinstance(platform.storage, str) and platform.storage in PROFILES:
        prof = load_profile(platform.storage, time_scale=1.0)
        for key, (lo, hi, why) in profile_ranges(platform.storage).items():
            if lo == hi or f"{platform.storage}.{key}" in platform.pinned:
                continue
            out.append(_make(f"{platform.storage}.{key}", lo, hi, getattr(prof, key), why,
                             key in ("targets", "stripe", "read_size", "readahead")))
    for key, (lo, hi, why) in platform.ranges.items():
        if key == "compute":
            lo_s, hi_s = parse_compute_time(lo), parse_compute_time(hi)
            central = platform.workloads[0].compute_s_per_sample if platform.workloads else lo_s
            out.append(_make("compute", lo_s, hi_s, central, why, False))
            continue
        if not hasattr(platform, key):
            raise ConfigurationError(f"platform {platform.name!r}: a range for {key!r}, which is "
                                     "not a platform value")
        if lo == hi:
            continue
        cur = getattr(platform, key)
        out.append(_make(key, type(cur)(lo), type(cur)(hi), cur, why, isinstance(cur, int)
                         and not isinstance(cur, bool)))
    for w in platform.workloads:
        for key, (lo, hi, why) in w.ranges.items():
            if lo == hi:
                continue
            conv = {"compute": parse_compute_time, "model": parse_model_bytes,
                    "flops_per_sample": float}.get(key, int)
            field_ = _FIELD.get(key, key)
            if not hasattr(w, field_):
                raise ConfigurationError(f"workload {w.name!r}: a range for {key!r}, which is not "
                                         "a workload value")
            out.append(_make(f"{w.name}.{key}", conv(lo), conv(hi), getattr(w, field_), why,
                             key not in ("compute", "flops_per_sample")))
    return out


def apply(platform: Platform, values: dict) -> Platform:
    """``platform`` with every ``{estimate name: value}`` of ``values`` applied at once."""
    from ..pfs.model import PROFILES

    overrides = list(platform.storage_overrides)
    kw = {}
    wls = {w.name: w for w in platform.workloads}
    for name, v in values.items():
        head, _, key = name.partition(".")
        if key and isinstance(platform.storage, str) and head == platform.storage and head in PROFILES:
            overrides.append((key, v))
        elif key and head in wls:
            field_ = _FIELD.get(key, key)
            wls[head] = replace(wls[head], **{field_: v})
        elif name == "compute":
            for n, w in wls.items():
                wls[n] = replace(w, compute_s_per_sample=float(v))
        elif hasattr(platform, name):
            kw[name] = type(getattr(platform, name))(v)
        else:
            raise ConfigurationError(f"no estimate {name!r} on platform {platform.name!r}")
    return platform.with_(storage_overrides=tuple(overrides),
                          workloads=tuple(wls[w.name] for w in platform.workloads), **kw)


def latin_hypercube(n: int, k: int, seed: int) -> np.ndarray:
    """``n`` x ``k`` points in [0, 1): each column has one point in each of its ``n`` strata."""
    if n < 1 or k < 0:
        raise ValueError(f"need n >= 1 samples and k >= 0 dimensions, got {n}, {k}")
    rng = np.random.default_rng(seed)
    u = (np.argsort(rng.random((k, n)), axis=1).T + rng.random((n, k))) / n
    return u


def draw(platform: Platform, n: int, seed: int) -> tuple[list[Estimate], list[dict]]:
    """The estimates and ``n`` joint samples ``{estimate name: value}`` (seeded Latin hypercube)."""
    est = estimates(platform)
    u = latin_hypercube(n, len(est), seed)
    return est, [{e.name: e.value(u[i, j]) for j, e in enumerate(est)} for i in range(n)]
