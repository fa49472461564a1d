"""PROV's locator: byte extents computed from the provenance sidecar, no traversal.

The readers first check the whole sidecar against the file, a share each
(:func:`~lmdbio.provenance.verify_shares`), before it is trusted, unless every
one of them finds that check stamped for this sidecar, file and version
(:mod:`lmdbio.verified`). Nothing is checked per chunk after that: the
sidecar in memory is the one checked, and the read transaction every reader
holds keeps the pages of the checked version from being reused by a writer
(an edit of the file outside LMDB changes its ctime, which voids a stamp),
so PROV makes no per-chunk pread that DIO does not make.
``lmdbio-direct`` uses :class:`ProvOrIndex`: the sidecar where every rank
can load it for the agreed snapshot and its check passes, else DIO's index.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from ..collective import collective
from ..errors import LmdbioError, ProvenanceError
from ..provenance import Provenance, load_provenance, verify_shares, write_provenance
from .index import Table

__all__ = ["Prov", "ProvOrIndex"]

log = logging.getLogger("lmdbio")


class Prov(Table):
    """PROV: extents from the sidecar, which must be current (StaleProvenanceError otherwise)."""

    name = "prov"

    def __init__(self, build: bool = False):
        super().__init__()
        self.build = build
        self.prov: Provenance | None = None   # the sidecar, from open() to close()
        self.fd = -1

    @classmethod
    def from_options(cls, options, build_provenance: bool = False) -> Prov:
        return cls(build_provenance)

    def prepare(self, comm, path) -> None:
        if self.build:
            collective(comm, self._refresh, comm, path)

    @staticmethod
    def _refresh(comm, path) -> None:
        # The first rank of each distinct file ({node} paths: one per node) refreshes it.
        paths = comm.allgather(os.path.realpath(path))
        if paths.index(paths[comm.rank]) == comm.rank:
            try:
                load_provenance(path)
            except ProvenanceError:
                write_provenance(path)

    def open(self, path, meta, nprocs: int) -> None:
        super().open(path, meta, nprocs)
        self.fd = os.open(path, os.O_RDONLY)
        self.prov = self.load()

    def sidecar(self) -> Provenance:
        """The sidecar open() loaded."""
        assert self.prov is not None, "the sidecar is loaded by open()"
        return self.prov

    def load(self) -> Provenance | None:
        prov = load_provenance(self.path)
        self.snapshot.check(prov.txnid)
        return prov

    def setup(self, comm, readers, schedule, row: dict) -> None:
        def check_and_fill():
            if readers is None:
                return
            # Anyone can recompute a sidecar's digest: the readers check all of it against
            # the file, a share each, before it is trusted (StaleProvenanceError everywhere),
            # once per sidecar and file version (a verified stamp stands in after that).
            verify_shares(readers, self.prov, self.fd, self.snapshot.meta, row)
            self.fill(schedule)
        collective(comm, check_and_fill)

    def fill(self, schedule) -> None:
        """The table of this reader's records of ``schedule``, from the sidecar."""
        self._pos = schedule.touched()
        offs, sizes = self.sidecar().extents(0, schedule.n)
        self._off = offs[self._pos].astype(np.int64)
        self._size = sizes[self._pos].astype(np.int64)

    def verify_ends(self, first: int, last: int) -> None:
        """The sidecar still describes the file at these two records (one leaf pread each)."""
        prov = self.sidecar()
        prov.verify(self.fd, first, 1)
        prov.verify(self.fd, last, 1)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        super().close()


class ProvOrIndex(Prov):
    """``lmdbio-direct``: the sidecar when it is current and passes every rank's check, else
    the record index (a refused sidecar is named in one warning and in :meth:`describe`).
    Every rank reads for itself, so the readers' communicator is the whole one."""

    name = "prov-or-index"

    @classmethod
    def from_options(cls, options, build_provenance: bool = False) -> ProvOrIndex:
        return cls()   # it never writes a sidecar: without a current one it reads the index

    def __init__(self):
        super().__init__(build=False)
        self.source = ""
        self.k = 1   # the schedule's batches per chunk, for describe()
        self.refused = ""   # why a loaded sidecar was not used (failed its check)

    def load(self):
        try:
            return super().load()
        except LmdbioError:
            return None

    def setup(self, comm, readers, schedule, row: dict) -> None:
        self.k = schedule.k
        use_prov = min(comm.allgather(self.prov is not None))
        if use_prov:
            # A sidecar is used only if every rank's share of its check passed.
            problems = comm.allgather(collective(comm, self._check_share, comm, row))
            bad = [(rank, p) for rank, p in enumerate(problems) if p]
            if bad:
                use_prov = False
                self.refused = f"rank {bad[0][0]}: {bad[0][1]}"
                if comm.rank == 0:
                    log.warning("lmdbio-direct: not using the provenance sidecar, reading with the "
                                "record index instead: %s", self.refused)
        if use_prov:
            self.source = "provenance"

            def from_prov():
                pos = schedule.touched()
                self.verify_ends(int(pos[0]), int(pos[-1]))
                self.fill(schedule)
            collective(comm, from_prov)
        else:
            self.source = "index"
            # Collective: a rank whose snapshot check fails raises on every rank.
            collective(comm, self.scatter, comm, schedule, row)
        row["coalesce"] = schedule.k

    def _check_share(self, comm, row: dict) -> str | None:
        """This rank's share of the sidecar's check (collective): None, or what is wrong."""
        try:
            verify_shares(comm, self.prov, self.fd, self.snapshot.meta, row)
        except ProvenanceError as exc:
            return str(exc)
        return None

    def describe(self) -> dict:
        out = {"direct_locate": self.source, "coalesce": self.k}
        if self.refused:
            out["provenance_refused"] = self.refused
        return out
