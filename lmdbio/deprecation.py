"""Names that moved: a module's ``__getattr__`` that finds them at their new home and warns."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["moved"]


def moved(module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for names that left ``module`` (``names``: each name's new module).

    Reading one (``module.name`` or ``from module import name``) warns with a
    :class:`DeprecationWarning` that names the new spelling, then returns the
    object from its new module. The reproduction lab's names leave the
    library this way: the library never imports the lab itself, the lookup
    happens only when old code asks.
    """
    def __getattr__(name: str) -> Any:
        home = names.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        extra = " (pip install 'lmdbio[lab]')" if home.startswith("lmdbio.lab") else ""
        warnings.warn(f"{module}.{name} moved to {home}.{name}{extra}; import it from there",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), name)

    return __getattr__
