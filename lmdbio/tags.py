"""Every MPI message tag lmdbio sends with, in one table.

A Reader talks on its own duplicate of the user's communicator (and on
communicators split from it), so its messages never meet the user's. The
tags only have to tell lmdbio's own messages apart: two protocols that run
on the same communicator must not share a tag, or one protocol's late
message is taken by the other. One table makes that checkable
(:func:`check_unique`, run at import). The values sit in one block away from
the small numbers applications tend to use, in case the public helpers of
:mod:`lmdbio.collective` run on a user's communicator; every value is far
below 32767, the least ``MPI_TAG_UB`` the MPI standard allows.

=================  =========================================================
tag                protocol (communicator)
=================  =========================================================
``AGREE``          :func:`lmdbio.collective.agree`: the bounded "every rank is
                   here, these failed" tree of close() (the Reader's)
``COLLECTIVE``     :func:`lmdbio.collective.collective` and
                   :func:`~lmdbio.collective.allgather`: the bounded step
                   every rank takes (the Reader's; the readers')
``INDEX``          DIO: the record table one reader scatters to the others
                   (:mod:`lmdbio.pipeline.index`; the readers')
``RING``           DM: the cursor passed around the readers' ring
                   (:mod:`lmdbio.pipeline.ring`; the readers')
``STAGGER_TURN``   STAG: a reader passes its turn to the next group
                   (:mod:`lmdbio.pipeline.stagger`; the readers')
``STAGGER_DONE``   STAG: a reader tells its group's first reader it has read
``STAGGER_GO``     STAG: the group's first reader releases the group
=================  =========================================================
"""

from __future__ import annotations

__all__ = ["AGREE", "COLLECTIVE", "INDEX", "RING", "STAGGER_TURN", "STAGGER_DONE", "STAGGER_GO",
           "TAGS", "check_unique"]

_BASE = 0x1D00

AGREE = _BASE + 0
COLLECTIVE = _BASE + 1
INDEX = _BASE + 2
RING = _BASE + 3
STAGGER_TURN = _BASE + 4
STAGGER_DONE = _BASE + 5
STAGGER_GO = _BASE + 6

#: name -> tag, for checks and error messages.
TAGS: dict[str, int] = {"AGREE": AGREE, "COLLECTIVE": COLLECTIVE, "INDEX": INDEX, "RING": RING,
                        "STAGGER_TURN": STAGGER_TURN, "STAGGER_DONE": STAGGER_DONE,
                        "STAGGER_GO": STAGGER_GO}


def check_unique(table: dict[str, int] = TAGS) -> None:
    """Raise RuntimeError if two protocols share a tag or a tag is outside ``0 .. 32767``."""
    seen: dict[int, str] = {}
    for name, tag in table.items():
        if not 0 <= tag <= 32767:
            raise RuntimeError(f"lmdbio tag {name} = {tag} is outside 0..32767 (MPI_TAG_UB's least)")
        if tag in seen:
            raise RuntimeError(f"lmdbio tags {seen[tag]} and {name} are both {tag}")
        seen[tag] = name


check_unique()
