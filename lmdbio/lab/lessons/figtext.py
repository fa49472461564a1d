"""Figure text that agrees with the data: typed numbers and comparison words in figures are sourced.

A figure's text is written in two places: the figure modules
(:data:`FIGURE_MODULES`: titles, axis labels, legends, annotations) and the
arguments a notebook's code passes to them (``title=``, ``mech_label=``...).
What a figure computes from the results (an f-string's fields, a claim's
row) is data; what is typed is checked as prose is
(:mod:`lmdbio.lab.lessons.prose`): a string literal with a measured-looking
number or a comparison word is a phrase of the module's ``STATIC`` dict,
which names its source, or it is a problem. A claim's quantity, drawn as the
criterion legend (``short``) and as the axis (``ylabel``), is named the same
way round in both (:func:`claim_name_problems`).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from .wording import COMPARISON, MEASURED, Problem

__all__ = ["FIGURE_MODULES", "claim_name_problems", "code_text", "module_problems"]

#: The modules that draw the notebooks' figures; each has a ``STATIC`` dict (phrase -> source).
FIGURE_MODULES = ("lmdbio.lab.plots", "lmdbio.lab.model.figures")
#: Names a notebook calls figures through, and the keyword arguments that are figure text.
_CALLERS = {"plots", "figures"}
_FUNCTIONS = {"show_settings"}
_TEXT_KW = re.compile(r"title|label|caption|note")
#: Literals that style a figure rather than say something: colours and legend locations.
_STYLE = re.compile(r"^(?:#[0-9a-fA-F]{3,8}|(?:upper|lower|center)(?: (?:left|right|center))?|best)$")


def _says(text: str) -> str | None:
    """The number or comparison word in ``text`` that needs a source, or None."""
    if _STYLE.match(text.strip()):
        return None
    m = MEASURED.search(text) or COMPARISON.search(text)
    return m.group(0) if m else None


def _sourced(text: str, static: dict) -> bool:
    return any(phrase in text for phrase in static)


def _pieces(node: ast.AST):
    """The typed pieces of a string expression (an f-string's literal parts, not its fields)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub


def _not_figure_text(tree: ast.AST) -> set[int]:
    """The string nodes that are no figure's text: docstrings, and the ``STATIC`` dict itself."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and getattr(target, "id", "") == "STATIC":
            found |= {id(sub) for sub in ast.walk(node)}
    return found


def _module_files(names):
    """(module name, file, STATIC) of each figure module; a package's files share its ``STATIC``."""
    for name in names:
        mod = importlib.import_module(name)
        static = getattr(mod, "STATIC", {})
        subs = [(name, Path(mod.__file__))]
        if hasattr(mod, "__path__"):
            subs = [(f"{name}.{p.stem}", p) for p in sorted(Path(mod.__path__[0]).glob("*.py"))]
        for sub, path in subs:
            own = {} if sub == name else getattr(importlib.import_module(sub.removesuffix(".__init__")), "STATIC", {})
            yield name, path, {**static, **own}


def module_problems(names=FIGURE_MODULES) -> list[Problem]:
    """Every typed string of the figure modules with a number or comparison word and no source."""
    problems = []
    for name, path, static in _module_files(names):
        tree = ast.parse(path.read_text())
        docs = _not_figure_text(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docs:
                continue
            said = _says(node.value)
            if said and not _sourced(node.value, static):
                problems.append(Problem(path.name, node.lineno, node.value,
                                              f"figure text {said!r} is typed: compute it from the results, "
                                              f"or add the phrase and its source to {name}.STATIC", "line"))
    return problems


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in _CALLERS:
        return f"{f.value.id}.{f.attr}"
    if isinstance(f, ast.Name) and f.id in _FUNCTIONS:
        return f.id
    return None


def code_text(source: str, static: dict) -> list[tuple[str, str]]:
    """(text, problem) for each figure text a code cell types into a figure call with no source."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (name := _call_name(node)) is None:
            continue
        for kw in node.keywords:
            if kw.arg is None or not _TEXT_KW.search(kw.arg):
                continue
            for piece in _pieces(kw.value):
                said = _says(piece.value)
                if said and not _sourced(piece.value, static):
                    out.append((piece.value, f"{name}({kw.arg}=...) types {said!r} into a figure: compute it "
                                             f"from the results, or add the phrase and its source to STATIC"))
    return out


def _ratio_terms(text: str) -> tuple[str, str] | None:
    """The words either side of a ratio's slash: ``"LMDB/full stack time"`` -> ("lmdb", "full")."""
    m = re.search(r"(\S+)\s*/\s*(\S+)", text)
    return (m[1].strip(",.").lower(), m[2].strip(",.").lower()) if m else None


def claim_name_problems(claims_list=None) -> list[Problem]:
    """Claims whose criterion (``short``) and axis (``ylabel``) put their ratio different ways round."""
    from .. import claims

    out = []
    for c in claims_list if claims_list is not None else (*claims.CLAIMS, claims.TRAINING):
        a, b = _ratio_terms(c.short), _ratio_terms(c.ylabel or c.short)
        if a and b and a != b:
            out.append(Problem("lmdbio/lab/claims/", c.id, c.short,
                                     f"{c.id}'s criterion names {c.short!r} and its axis {c.ylabel!r}: the "
                                     f"legend and the axis put the ratio different ways round", "claim"))
    return out
