"""Storage profiles: a profile file's table as a dataclass of numbers with their sources."""

from __future__ import annotations

import dataclasses
import os
from types import MappingProxyType

from lmdbio.errors import ConfigurationError

__all__ = ["Profile", "load_toml", "env_time_scale"]


def load_toml(path: str | os.PathLike) -> dict:
    """A profile file's tables."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(path, "rb") as f:
        return tomllib.load(f)


def env_time_scale(var: str) -> float | None:
    """The time scale in environment variable ``var``; None where it is unset or empty."""
    text = os.environ.get(var)
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ConfigurationError(f"{var}={text!r} is not a number; give a positive time scale "
                                 "such as 0.5") from None


_NUMBERS = {"float": float, "int": int}


class Profile:
    """A dataclass of a profile file's table: numbers (``float``/``int`` fields), ``name``,
    ``description``, ``sources`` and optionally ``ranges`` (an estimate's low and high)."""

    @classmethod
    def _numbers(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if f.type in _NUMBERS]

    @classmethod
    def load(cls, tables: dict, name: str, time_scale: float | None, env: str, what: str, path):
        """Table ``name`` of ``tables`` (read from ``path``) at its own time scale, ``time_scale``,
        or ``$env``; ``what`` names the kind of profile in messages."""
        if name not in tables:
            raise ConfigurationError(f"unknown {what} {name!r}; choose one of "
                                     f"{', '.join(tables)} ({path})")
        raw = tables[name]
        if time_scale is None:
            time_scale = env_time_scale(env)
        kw = {"name": name, "description": str(raw.get("description", "")),
              "sources": MappingProxyType(dict(raw.get("sources", {})))}
        if "ranges" in {f.name for f in dataclasses.fields(cls)}:
            kw["ranges"] = MappingProxyType({k: tuple(v) for k, v in raw.get("ranges", {}).items()})
        try:
            for f in cls._numbers():
                value = time_scale if f.name == "time_scale" and time_scale is not None \
                    else raw[f.name]
                kw[f.name] = _NUMBERS[f.type](value)
        except KeyError as exc:
            raise ConfigurationError(f"{what} {name!r} lacks {exc.args[0]!r} ({path})") from None
        p = cls(**kw)
        bad = [f.name for f in cls._numbers() if getattr(p, f.name) < 0
               or (getattr(p, f.name) == 0 and f.name != "read_ahead_kb")]
        if bad:
            raise ConfigurationError(f"{what} {name!r}: {', '.join(bad)} must be positive "
                                     f"(read_ahead_kb may be 0) ({path})")
        return p

    def as_dict(self) -> dict:
        d = {"name": self.name, "description": self.description,
             **{f.name: getattr(self, f.name) for f in self._numbers()}}
        d["sources"] = dict(self.sources)
        if hasattr(self, "ranges"):
            d["ranges"] = {k: list(v) for k, v in self.ranges.items()}
        return d
