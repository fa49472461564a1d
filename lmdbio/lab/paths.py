"""Where the lab reads and writes: its root, which holds ``data/``, ``figures/`` and ``notebooks/``.

The root is, in order: ``LMDBIO_LAB_ROOT`` when set; else the lmdbio checkout
the working directory lies in (the nearest folder above it, itself included,
whose ``pyproject.toml`` names the ``lmdbio`` project), so ``make reproduce``
from the checkout and a notebook's kernel in ``notebooks/`` both find the
checkout; else the working directory itself. An installed lab
(``pip install 'lmdbio[lab]'``) thus writes where it is run, never into
site-packages. Lab commands take ``--root`` (:func:`set_root`), which sets
``LMDBIO_LAB_ROOT`` for this process and the processes it starts.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["ROOT_ENV", "REPO", "lab_root", "find_checkout", "set_root", "under_root"]

#: The environment variable that names the lab's root.
ROOT_ENV = "LMDBIO_LAB_ROOT"

_PROJECT = re.compile(r'^\s*name\s*=\s*"lmdbio"\s*$', re.MULTILINE)


def find_checkout(start: str | os.PathLike) -> Path | None:
    """The nearest folder at or above ``start`` whose ``pyproject.toml`` names lmdbio, or None."""
    here = Path(start).resolve()
    for folder in (here, *here.parents):
        project = folder / "pyproject.toml"
        try:
            if project.is_file() and _PROJECT.search(project.read_text(errors="replace")):
                return folder
        except OSError:
            continue
    return None


def lab_root(cwd: str | os.PathLike | None = None) -> Path:
    """The lab's root now: ``LMDBIO_LAB_ROOT``, else the checkout around ``cwd``, else ``cwd``.

    ``cwd`` defaults to the working directory. A root that is not a folder is
    refused with the variable's name, so a typo does not scatter results.
    """
    named = os.environ.get(ROOT_ENV)
    if named:
        root = Path(named).expanduser().resolve()
        if not root.is_dir():
            raise NotADirectoryError(f"{ROOT_ENV}={named!r} is not a folder; create it, or unset "
                                     f"{ROOT_ENV} to use the working directory")
        return root
    here = Path(cwd) if cwd is not None else Path.cwd()
    return find_checkout(here) or here.resolve()


def set_root(root: str | os.PathLike) -> Path:
    """Make ``root`` the lab's root for this process and its children (``--root``); returns it.

    Sets ``LMDBIO_LAB_ROOT`` and :data:`REPO`. Modules that copied ``REPO``
    when imported keep their copy: a command sets the root before it imports them.
    """
    global REPO
    path = Path(root).expanduser().resolve()
    if not path.is_dir():
        raise NotADirectoryError(f"--root {root}: not a folder; create it first")
    os.environ[ROOT_ENV] = str(path)
    REPO = path
    return path


def under_root(path: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """``path`` if absolute, else ``path`` under ``root`` (default :func:`lab_root`)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(root if root is not None else lab_root()) / p


#: The lab's root when this module was imported (:func:`lab_root`); the lab reads and writes
#: ``data/``, ``figures/`` and ``notebooks/`` under it.
REPO = lab_root()
