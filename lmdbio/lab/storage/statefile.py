"""The JSON state file in which a device setting records what it makes, as it makes it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from lmdbio.errors import LmdbioError

__all__ = ["save_state", "read_state", "need_state"]


def save_state(state: dict) -> None:
    tmp = state["state_file"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, state["state_file"])


def read_state(state) -> dict | None:
    """``state`` itself if it is a dict, else the state file it names; None where that is gone."""
    if isinstance(state, dict):
        return state
    try:
        return json.loads(Path(state).read_text())
    except (OSError, ValueError):
        return None


def need_state(state, message: str, env: str | None = None) -> dict:
    """The state ``state`` (or ``$env``) names; raises ``message`` (``{path}`` filled in) if it is
    gone."""
    path = state or (os.environ.get(env) if env else None)
    st = read_state(path) if path else None
    if not st:
        raise LmdbioError(message.format(path=path))
    return st
