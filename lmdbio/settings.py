"""The environment settings a Reader reads: ``LMDBIO_TIMEOUT``, ``LMDBIO_EXIT_TIMEOUT`` and
``LMDBIO_ON_ERROR``, each checked with an error that names the variable."""

from __future__ import annotations

import os

from .errors import ConfigurationError

__all__ = ["timeout", "exit_timeout", "default_on_error", "check_settings", "DEFAULT_TIMEOUT",
           "EXIT_TIMEOUT"]

#: Seconds a rank waits for a peer before giving up, unless ``LMDBIO_TIMEOUT`` says otherwise.
DEFAULT_TIMEOUT = 120.0

#: How long ranks that raised inside ``with Reader`` wait for each other before a lone
#: failure is handled by ``on_error`` (at most LMDBIO_TIMEOUT).
EXIT_TIMEOUT = 10.0


def _seconds(name: str, default: float, hint: str = "") -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, got {raw!r}{hint}",
                                 option=name)
    return value


def timeout() -> float:
    """Seconds a rank waits for a peer before giving up: ``$LMDBIO_TIMEOUT`` or 120."""
    return _seconds("LMDBIO_TIMEOUT", DEFAULT_TIMEOUT)


def exit_timeout() -> float:
    """``LMDBIO_EXIT_TIMEOUT`` in seconds (default :data:`EXIT_TIMEOUT`, at most LMDBIO_TIMEOUT)."""
    value = _seconds("LMDBIO_EXIT_TIMEOUT", EXIT_TIMEOUT,
                     f"; unset it for the default ({EXIT_TIMEOUT:g} s)")
    return min(max(value, 0.1), timeout())


def default_on_error() -> str:
    """``$LMDBIO_ON_ERROR`` (lower case) or ``"abort"``."""
    return os.environ.get("LMDBIO_ON_ERROR", "").strip().lower() or "abort"


def check_settings(on_error: str) -> None:
    """Check the environment settings a Reader reads later (at a timeout, at close), now.

    Raises ConfigurationError naming the variable, so a bad value fails the
    construction on every rank instead of surfacing at close().
    """
    timeout()
    exit_timeout()
    if on_error not in ("abort", "raise"):
        where = " (from LMDBIO_ON_ERROR)" if os.environ.get("LMDBIO_ON_ERROR", "").strip() else ""
        raise ConfigurationError(f"on_error must be 'abort' or 'raise', got {on_error!r}{where}",
                                 option="LMDBIO_ON_ERROR" if where else "on_error")
