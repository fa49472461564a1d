"""The training process's epoch and loaded state, shared with its DataLoader workers in
memory: no file, so nothing is left behind however the process ends.

Persistent workers keep the copy of the dataset they were started with, so what changes
after (``set_epoch``, ``load_state_dict``) reaches them through a small block of shared
memory that the dataset carries: a ``torch`` tensor in shared memory, which a forked
worker inherits and a spawned one receives with the dataset (torch passes its descriptor;
the memory has no name). It is freed when the last process that maps it ends.

Layout: eight int64 words, then a JSON document. Word 0 counts the training process's
writes (odd while one is under way: a reader that sees it odd or changed reads again);
word 1 is the document's length; words 3 and 4 name the iteration that took the loaded
state and word 5 that state's generation (written by workers, word 5 last).
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np

from ..errors import LmdbioError
from .need import need_torch

__all__ = ["Position"]

_HEAD = 8   # int64 words before the document
_SEQ, _LEN, _TAKEN, _GEN = 0, 1, 3, 5


class Position:
    """The training process's epoch and loaded state, for its DataLoader workers.

    The training process writes ``epoch`` and ``resume`` (a Reader state, or None) with
    :meth:`write`; each worker reads them with :meth:`read` when an iteration starts. A
    loaded state is used by one iteration, as with ``num_workers=0``: the first iteration's
    workers :meth:`take` it, naming their iteration, and ``taken_by`` says which one did.
    """

    #: Bytes of shared memory: a Reader state is a few hundred.
    SIZE = 1 << 16

    def __init__(self, path: str | None = None):
        if path is not None:
            warnings.warn("Position keeps the position in shared memory, not in a file: drop "
                          "the path argument (Position())", DeprecationWarning, stacklevel=2)
        torch = need_torch()
        self._mem = torch.zeros(self.SIZE, dtype=torch.uint8).share_memory_()
        self._bind()

    def _bind(self) -> None:
        a = self._mem.numpy()
        self._head = a[:_HEAD * 8].view(np.int64)
        self._body = a[_HEAD * 8:]

    def __getstate__(self) -> dict:
        # Pickled for a spawned worker, torch shares the tensor's memory; pickled otherwise,
        # it is copied.
        return {"_mem": self._mem}

    def __setstate__(self, state: dict) -> None:
        self._mem = state["_mem"]
        self._bind()

    # ------------------------------------------------------------- the training process
    def write(self, epoch: int, resume: dict | None, taken_by=None, *, fresh: bool = False
              ) -> None:
        """Set the epoch and the loaded state (the training process; ``taken_by`` is
        :meth:`take`'s). ``fresh``: ``resume`` was just loaded, so no iteration has taken
        it yet."""
        if taken_by is not None:
            self.take(taken_by)
            return
        now = self._document()
        gen = int(now.get("gen", 0)) + (1 if fresh else 0)
        raw = json.dumps({"epoch": int(epoch), "resume": resume, "gen": gen}).encode()
        if len(raw) > len(self._body):
            raise LmdbioError(f"the dataset's state takes {len(raw)} bytes as JSON; the shared "
                              f"position holds {len(self._body)}")
        h = self._head
        h[_SEQ] += 1   # odd: being written
        self._body[:len(raw)] = np.frombuffer(raw, np.uint8)
        h[_LEN] = len(raw)
        h[_SEQ] += 1

    # ------------------------------------------------------------- any process
    def _document(self) -> dict:
        h = self._head
        for _ in range(10_000):
            seq = int(h[_SEQ])
            if seq == 0:
                return {}
            if seq % 2 == 0:
                raw = bytes(self._body[:int(h[_LEN])])
                if int(h[_SEQ]) == seq:
                    return json.loads(raw)
            time.sleep(0.0001)
        raise LmdbioError("the shared position stayed mid-write: the training process stopped "
                          "while it set the epoch; start the DataLoader again")

    def read(self) -> dict | None:
        """``{"epoch", "resume", "taken_by"}`` as the training process last wrote them (None
        before it wrote any): ``taken_by`` is the iteration that took ``resume``, or None."""
        doc = self._document()
        if not doc:
            return None
        h = self._head
        taken = ([int(h[_TAKEN]), int(h[_TAKEN + 1])]
                 if doc["resume"] is not None and int(h[_GEN]) == doc["gen"] else None)
        return {"epoch": doc["epoch"], "resume": doc["resume"], "taken_by": taken}

    def take(self, me) -> bool:
        """A worker's iteration ``me`` (two ints) takes the loaded state, unless another
        iteration took it first: whether ``me`` has it. Every worker of one iteration writes
        the same words, so they need no lock."""
        doc = self._document()
        if not doc or doc["resume"] is None:
            return False
        h = self._head
        if int(h[_GEN]) == doc["gen"]:
            return [int(h[_TAKEN]), int(h[_TAKEN + 1])] == [int(x) for x in me]
        h[_TAKEN], h[_TAKEN + 1] = int(me[0]), int(me[1])
        h[_GEN] = doc["gen"]   # last: a reader that sees it sees who took it
        return True

    def remove_at_exit(self, owner):
        """Nothing to remove: the position has no file. Kept for callers of the file-based
        position; returns a callable that does nothing."""
        return lambda: None
