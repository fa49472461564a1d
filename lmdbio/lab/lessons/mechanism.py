"""The mechanism visible without running: each optimization notebook's core code, copied from the source.

A notebook shows its stage's core (the cursor walk, the shared-window
publish and receive, the preadv loop...) as a Markdown code block between
:data:`BEGIN` and :data:`END`, so a stripped notebook in a repository viewer
shows it. The block is generated here from the library's source (read with
:mod:`ast`, nothing imported) and never typed: after the source changes, run

    .venv/bin/python -m lmdbio.lab.lessons.mechanism --write

and ``--check`` (what ``tests/test_mechanism.py`` runs) says which blocks
differ. A :class:`Piece` is one function or method; ``start`` and ``stop``
keep only the lines from the first that contains ``start`` to the first after
it that contains ``stop`` (the rest shown as ``...``).
"""

from __future__ import annotations

import argparse
import ast
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import nbformat

__all__ = ["BEGIN", "BLOCKS", "COMMAND", "END", "MechanismError", "Piece", "block", "check", "write"]

REPO = Path(__file__).resolve().parents[3]
NOTEBOOKS = REPO / "notebooks"
BEGIN = "<!-- mechanism:begin (generated from the source: .venv/bin/python -m lmdbio.lab.lessons.mechanism --write) -->"
END = "<!-- mechanism:end -->"
_OPEN = "<!-- mechanism:begin"
COMMAND = ".venv/bin/python -m lmdbio.lab.lessons.mechanism --write"


@dataclass(frozen=True)
class Piece:
    """One function of the library: its file (relative to the repository) and qualified name."""

    path: str
    name: str
    start: str | None = None
    stop: str | None = None


#: Each optimization notebook's core, in reading order.
BLOCKS: dict[str, tuple[Piece, ...]] = {
    "02_lmdb_analysis": (Piece("lmdbio/lmdbenv/cursor.py", "CursorWalker.take_runs"),
                         Piece("lmdbio/lmdbenv/cursor.py", "CursorWalker.skip_to")),
    "03_lmm": (Piece("lmdbio/shm.py", "GroupBuffer.publish", start="h = self.header[slot]"),
               Piece("lmdbio/shm.py", "GroupBuffer.receive", start="h = self.header[slot]", stop="seq = wait_word("),
               Piece("lmdbio/pipeline/distribute.py", "NodeGroup.batch"),
               Piece("lmdbio/batch.py", "ChunkRecords.batch")),
    "04_dm": (Piece("lmdbio/pipeline/ring.py", "Ring.locate", start='rec.phase("ring_wait"'),),
    "05_dio": (Piece("lmdbio/pipeline/fetch.py", "Scatter.read"),),
    "06_prov": (Piece("lmdbio/pipeline/prov.py", "Prov.fill"),
                Piece("lmdbio/provenance.py", "Provenance.extents")),
    "07_coal": (Piece("lmdbio/plan.py", "coalesce_batches"),
                Piece("lmdbio/plan.py", "chunk_runs"),
                Piece("lmdbio/plan.py", "positions_runs")),
    "08_stag": (Piece("lmdbio/pipeline/stagger.py", "Stagger.turn"),
                Piece("lmdbio/pipeline/stagger.py", "Stagger.pass_turn")),
    "09_scaling": (Piece("lmdbio/lmdbenv/cursor.py", "CursorWalker.skip_to"),
                   Piece("lmdbio/lab/bench/limit.py", "RawReader.read_batch")),
    "10_training": (Piece("lmdbio/pipeline/prefetch.py", "Prefetch._run"),
                    Piece("lmdbio/pipeline/prefetch.py", "Prefetch.next", stop="self._q.get(")),
}


class MechanismError(ValueError):
    """A piece of :data:`BLOCKS` names a function or an anchor line the source no longer has."""


def _find(tree: ast.AST, qualname: str) -> ast.FunctionDef:
    node = tree
    for part in qualname.split("."):
        body = getattr(node, "body", [])
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            raise LookupError(part)
    return node


def _locate(piece: Piece) -> tuple[str, list[str], ast.AST]:
    """(file, source lines, function node) of ``piece``: in its file, else in the one file of the
    package that defines it (a module split or moved keeps its blocks without an edit here)."""
    candidates = [REPO / piece.path] + sorted((REPO / "lmdbio").rglob("*.py"))
    found = []
    for path in dict.fromkeys(candidates):
        if not path.exists() or (found and path == candidates[0]):
            continue
        source = path.read_text()
        if piece.name.split(".")[-1] not in source:
            continue
        try:
            fn = _find(ast.parse(source), piece.name)
        except (LookupError, SyntaxError):
            continue
        found.append((str(path.relative_to(REPO)), source.splitlines(), fn))
        if path == candidates[0]:
            break
    if len(found) != 1:
        where = "no file" if not found else ", ".join(f for f, _, _ in found)
        raise MechanismError(f"{piece.path} has no {piece.name}, and {where} in lmdbio/ defines it: point "
                             f"lmdbio.lab.lessons.mechanism.BLOCKS at the function that now holds this core, "
                             f"then run {COMMAND}")
    return found[0]


def _lines(piece: Piece) -> tuple[str, list[str]]:
    """(file, the function's source lines, dedented, without its docstring, cut to ``start``..``stop``)."""
    where, source, fn = _locate(piece)
    body_nodes, skip = fn.body, set()
    doc = body_nodes[0]
    if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str):
        skip = set(range(doc.lineno, doc.end_lineno + 1))
        body_nodes = body_nodes[1:] or body_nodes
    numbered = [(i, source[i - 1]) for i in range(fn.lineno, fn.end_lineno + 1) if i not in skip]
    lines = [text for _, text in numbered]
    if piece.start or piece.stop:
        head = [text for i, text in numbered if i < body_nodes[0].lineno]
        body = [text for i, text in numbered if i >= body_nodes[0].lineno]
        lo = _index(body, piece.start, 0, piece) if piece.start else 0
        hi = _index(body, piece.stop, lo, piece) + 1 if piece.stop else len(body)
        while hi < len(body) and _open("\n".join(body[lo:hi])):   # the stop line's statement, whole
            hi += 1
        indent = " " * (len(body[0]) - len(body[0].lstrip()))
        lines = head + ([indent + "..."] if lo else []) + body[lo:hi] + ([indent + "..."] if hi < len(body) else [])
    return where, textwrap.dedent("\n".join(lines)).splitlines()


def _open(code: str) -> bool:
    """Whether ``code`` leaves a bracket open (a statement that goes on to the next line)."""
    depth = 0
    for ch in code:
        depth += (ch in "([{") - (ch in ")]}")
    return depth > 0


def _index(body: list[str], anchor: str, after: int, piece: Piece) -> int:
    for i in range(after, len(body)):
        if anchor in body[i]:
            return i
    raise MechanismError(f"{piece.path}, {piece.name}: no line contains {anchor!r}; change the anchor in "
                         f"lmdbio.lab.lessons.mechanism.BLOCKS, then run {COMMAND}")


def block(notebook: str) -> str:
    """The Markdown code block of ``notebook`` (its stem), with the markers around it."""
    parts = []
    for piece in BLOCKS[notebook]:
        where, lines = _lines(piece)
        parts.append("\n".join([f"# {where}: {piece.name}", *lines]))
    return "\n".join([BEGIN, "```python", "\n\n".join(parts), "```", END])


def _cell_with_block(nb: dict, notebook: str) -> dict:
    cells = [c for c in nb.cells if c.cell_type == "markdown" and _OPEN in c.source]
    if len(cells) != 1:
        raise MechanismError(f"notebooks/{notebook}.ipynb has {len(cells)} Markdown cells with the mechanism "
                             f"markers; it needs one ({BEGIN} ... {END})")
    return cells[0]


def _current(source: str) -> tuple[str, str, str]:
    """(before, block, after) of a cell's source split at the markers."""
    lo = source.index(_OPEN)
    hi = source.index(END, lo) + len(END)
    return source[:lo], source[lo:hi], source[hi:]


def check(notebooks=None, root: Path = NOTEBOOKS) -> list[str]:
    """The notebooks (under ``root``) whose block differs from the source's, each with its first difference."""
    stale = []
    for name in notebooks or BLOCKS:
        nb = nbformat.read(Path(root) / f"{name}.ipynb", as_version=4)
        _, have, _ = _current(_cell_with_block(nb, name).source)
        want = block(name)
        if have != want:
            lines = [f"  - {a!r}\n  + {b!r}" for a, b in zip(have.splitlines(), want.splitlines()) if a != b]
            stale.append(f"notebooks/{name}.ipynb: its mechanism block no longer matches the source; run "
                         f"{COMMAND} "
                         f"({len(want.splitlines())} lines now); first difference:\n" + (lines[0] if lines else
                                                                                       "  (lines added or removed)"))
    return stale


def write(notebooks=None, root: Path = NOTEBOOKS) -> list[str]:
    """Rewrite the blocks (under ``root``) that differ from the source; returns the notebooks changed."""
    changed = []
    for name in notebooks or BLOCKS:
        path = Path(root) / f"{name}.ipynb"
        nb = nbformat.read(path, as_version=4)
        cell = _cell_with_block(nb, name)
        before, have, after = _current(cell.source)
        want = block(name)
        if have == want:
            continue
        cell.source = before + want + after
        nbformat.write(nb, path)
        changed.append(name)
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lmdbio.lab.lessons.mechanism", description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the notebooks' blocks from the source")
    ap.add_argument("--check", action="store_true", help="list the blocks that differ from the source (default)")
    ap.add_argument("notebooks", nargs="*", help="notebook stems (default: all of BLOCKS)")
    args = ap.parse_args(argv)
    if args.write:
        for name in write(args.notebooks or None):
            print(f"rewrote notebooks/{name}.ipynb")
        return 0
    stale = check(args.notebooks or None)
    print("\n".join(stale) if stale else "every mechanism block matches the source")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
