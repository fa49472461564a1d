"""Prose that agrees with the data: every measured number in a notebook's text is checked.

A notebook's Markdown states a measured value, or a comparison word, and
names the fact that backs it in an HTML comment right after it (hidden when
the notebook is rendered)::

    DM is 5.3x<!-- =lmm_over_dm_local --> slower<!-- =dm_vs_lmm_local --> than LMM.

``lmdbio.lab.lessons.nbNN`` (one module per notebook) defines ``FACTS``,
a dict from a fact's name to a function of a results root (the committed
``data/results``, or a student's ``build/scratch/NN/results``) that returns
a number or a word. :func:`check_notebook` finds every marker, computes its
fact from the results and compares:

- a number agrees when it equals the fact rounded to the digits written
  (``5.3x`` accepts 5.25 to 5.35; ``27%`` accepts 26.5 to 27.5, so a
  percentage fact returns percent);
- a word agrees when it equals the fact's word (case ignored).

Every other number in the text that looks measured (a decimal, a
percentage, a ratio ``3x``, a time or a rate) must either carry a marker or
be a phrase of the module's ``STATIC`` dict, which maps it to its source
(a paper, a profile file, a parameter); code spans and fenced code are not
prose and are skipped.

Words are checked as numbers are. A sentence with a comparison word
(:data:`COMPARISON`: faster, fewer, grows, at most...) carries a fact marker,
or the phrase around the word is in ``STATIC``; questions, and the cells that
ask or instruct (:data:`INSTRUCTIONS`), state nothing and are skipped. A claim
named with its quantity, ``C2 (LMM/LMDB)``, names it as
``lmdbio/lab/claims/`` does.

Figure text is checked where it is written: the string literals of the
figure modules (:data:`FIGURE_MODULES`: titles, labels, legends,
annotations) and those a notebook's code passes to ``plots``/``figures``
(``title=``, ``mech_label=``...) carry no number or comparison word unless
the phrase is in the module's ``STATIC``; what a figure computes from the
results (an f-string's fields) is data, not text. A claim's quantity is named
one way round in the criterion legend and on the axis
(:func:`claim_name_problems`).
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import re
from pathlib import Path
from collections.abc import Callable

import pandas as pd

from ..paths import REPO
from .figtext import code_text
from .wording import COMPARISON, MEASURED, Problem

COMMITTED = REPO / "data" / "results"

MARKER = re.compile(r"<!--\s*=(?P<name>[A-Za-z_][\w]*)\s*-->")
#: Cells that ask or instruct rather than state (their numbers are still checked).
INSTRUCTIONS = ("**Objectives.**", "### How to experiment", "## Exercise", "**Predict, then run.**",
                "**Your prediction", "**Run it yourself.**")
#: ``C2 (LMM/LMDB)``: a claim named with its quantity.
CLAIM_NAME = re.compile(r"\b(?P<id>C\d(?:-imagenet)?|T) \((?P<name>[^()]*/[^()]*)\)")
#: Sentence ends, blank lines and the starts of list items and table rows.
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n\s*\n|\n(?=\s*(?:[-*|#]|\d+\.)\s)")
_FENCE = re.compile(r"```.*?```", re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_NUMBER = re.compile(r"^~?≈?(?P<mant>\d[\d,]*(?:\.(?P<dec>\d+))?)(?:e(?P<exp>[+-]?\d+))?(?P<unit>%|x|×)?$")
_TOKEN_STRIP_HEAD = "(*_~\"'“‘[≈"
_TOKEN_STRIP_TAIL = ".,;:)*_\"'”’]!?"


def module(notebook: str):
    """The facts module of a notebook (``07_coal`` or a path to it): ``lmdbio.lab.lessons.nb07``."""
    return importlib.import_module(f"{__package__}.nb{Path(str(notebook)).name[:2]}")


def prose(cell_source: str) -> str:
    """A Markdown cell's prose: fenced code, code spans and link targets removed."""
    text = _FENCE.sub(" ", cell_source)
    text = _CODE.sub(" ", text)
    return _LINK_TARGET.sub("]", text)


_UNITS = {"ms", "µs", "s", "min", "MB", "GB", "KiB", "MiB", "GiB", "MB/s", "GB/s", "MiB/s", "GiB/s",
          "rec/s", "records/s", "records", "pages", "faults", "requests"}


def _token(before: str) -> str:
    """The number or word a marker follows; a unit after a number ("2.2 GB/s") gives the number."""
    words = before.rstrip().rstrip("*_").rstrip().split()
    clean = [w.lstrip(_TOKEN_STRIP_HEAD).rstrip(_TOKEN_STRIP_TAIL) for w in words[-2:]]
    if len(clean) == 2 and clean[1] in _UNITS and _NUMBER.match(clean[0]):
        return clean[0]
    return clean[-1] if clean else ""


def agrees(stated: str, value) -> bool:
    """Whether ``stated`` (a number as written, or a word) agrees with a fact's ``value``."""
    m = _NUMBER.match(stated.replace(" ", ""))
    if m is None:
        return isinstance(value, str) and stated.lower() == value.lower()
    if isinstance(value, (bool, str)) or value is None:
        return False
    value = float(value)
    if not math.isfinite(value):
        return False
    mant = float(m["mant"].replace(",", ""))
    exp = int(m["exp"] or 0)
    digits = len(m["dec"] or "")
    tol = 0.5 * 10.0 ** (exp - digits)
    return abs(mant * 10.0 ** exp - value) <= tol * (1 + 1e-9) + 1e-12


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def facts(notebook: str, results_root=COMMITTED) -> dict:
    """Every fact of a notebook computed from ``results_root`` (a fact that fails gives its error)."""
    mod = module(notebook)
    out = {}
    for name, fn in mod.FACTS.items():
        try:
            out[name] = fn(Path(results_root))
        except Exception as e:  # a missing or malformed result is a problem, reported with its fact
            out[name] = e
    return out


def check_notebook(path: str | Path, results_root=COMMITTED) -> list[Problem]:
    """Every disagreement between a notebook's prose (its Markdown and the figure text its code
    passes to ``plots``) and the results under ``results_root``."""
    path = Path(path)
    nb = json.loads(path.read_text())
    mod = module(path.name)
    static = getattr(mod, "STATIC", {})
    values = _Facts(mod, Path(results_root))
    problems: list[Problem] = []
    for i, cell in enumerate(nb["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code":
            problems += [Problem(path.name, i, text, detail) for text, detail in code_text(source, static)]
            continue
        if cell["cell_type"] != "markdown":
            continue
        text = prose(source)
        problems += _marker_problems(path.name, i, text, values, mod.__name__)
        problems += _measured_problems(path.name, i, text, static)
        if not source.lstrip().startswith(INSTRUCTIONS):
            problems += _comparison_problems(path.name, i, text, static)
        problems += _claim_name_problems(path.name, i, text)
    return problems


class _Facts(dict):
    """A notebook's facts, each computed the first time a marker asks for it (an error is kept)."""

    def __init__(self, mod, root: Path):
        super().__init__()
        self.mod, self.root = mod, root

    def __contains__(self, name) -> bool:
        return name in self.mod.FACTS

    def __missing__(self, name):
        try:
            self[name] = self.mod.FACTS[name](self.root)
        except Exception as e:  # a missing or malformed result is a problem, reported with its fact
            self[name] = e
        return dict.__getitem__(self, name)


def _marker_problems(nb: str, i: int, text: str, values, modname: str) -> list[Problem]:
    out = []
    for m in MARKER.finditer(text):
        name = m["name"]
        stated = _token(text[:m.start()])
        context = text[max(0, m.start() - 60):m.start()].replace("\n", " ").strip()
        if name not in values:
            out.append(Problem(nb, i, context, f"no fact named {name!r} in {modname}.FACTS"))
            continue
        value = values[name]
        if isinstance(value, str) and " " in value.strip():
            # A phrase ("not every"): the text's as many last words, so "every" alone disagrees.
            words = value.split()
            stated = " ".join(w.strip(_TOKEN_STRIP_HEAD + _TOKEN_STRIP_TAIL)
                              for w in text[:m.start()].split()[-len(words):])
        if isinstance(value, Exception):
            out.append(Problem(nb, i, context, f"fact {name!r} could not be computed: {type(value).__name__}: {value}"))
        elif not agrees(stated, value):
            out.append(Problem(nb, i, context, f"states {stated!r}, the results give {_fmt(value)} (fact {name})"))
    return out


def _measured_problems(nb: str, i: int, text: str, static: dict) -> list[Problem]:
    out = []
    bare = MARKER.sub(lambda m: "\0" * len(m.group(0)), text)
    for m in MEASURED.finditer(bare):
        after = bare[m.end():m.end() + 12].lstrip(" *_")
        if after.startswith("\0"):
            continue
        # a number followed by its unit and then the marker ("2.2 GB/s<!-- =x -->") is covered too
        if re.match(r"^[^\s\0]{1,9}[*_]*\0", after):
            continue
        if any(_inside(text, m.start(), m.end(), phrase) for phrase in static):
            continue
        context = text[max(0, m.start() - 50):m.end() + 20].replace("\n", " ").strip()
        out.append(Problem(nb, i, context, f"{m.group(0)!r} reads as measured but has no fact marker and is not "
                                           f"in STATIC (add <!-- =name --> after it, or its source to STATIC)"))
    return out


def _sentences(text: str):
    """(offset, sentence) of each sentence, list item or table row of ``text``."""
    pos = 0
    for m in _SENTENCE.finditer(text):
        yield pos, text[pos:m.start()]
        pos = m.end()
    yield pos, text[pos:]


def _comparison_problems(nb: str, i: int, text: str, static: dict) -> list[Problem]:
    """A comparison word in a sentence with no fact marker, outside every STATIC phrase (one per sentence)."""
    out = []
    for start, sentence in _sentences(text):
        if MARKER.search(sentence) or sentence.rstrip(" *_)\n").endswith("?"):
            continue
        for m in COMPARISON.finditer(sentence):
            if any(_inside(text, start + m.start(), start + m.end(), phrase) for phrase in static):
                continue
            context = " ".join(MARKER.sub("", sentence).split())[:160]
            out.append(Problem(nb, i, context, f"{m.group(0)!r} compares, but its sentence has no fact marker and "
                                                f"the phrase is not in STATIC (mark the number or word the data "
                                                f"decide, or add the phrase and its source to STATIC)"))
            break
    return out


def _claim_name_problems(nb: str, i: int, text: str) -> list[Problem]:
    from .. import claims

    out = []
    for m in CLAIM_NAME.finditer(text):
        short = claims.claim(m["id"]).short
        if not (m["name"] == short or m["name"].startswith((short + ", ", short + "; "))):
            out.append(Problem(nb, i, m.group(0), f"names {m['id']}'s quantity {m['name']!r}; "
                                                   f"lmdbio.lab.claims names it {short!r}"))
    return out


def _inside(text: str, start: int, end: int, phrase: str) -> bool:
    """Whether ``text[start:end]`` lies in an occurrence of ``phrase`` (any run of white space in
    the phrase matches any other, so a phrase need not follow the cell's line breaks)."""
    for m in re.finditer(r"\s+".join(map(re.escape, phrase.split())), text):
        if m.start() <= start and end <= m.end():
            return True
    return False


def _unavailable(error: Exception) -> str:
    """Why a fact could not be computed from a run, as a sentence a student can act on."""
    if isinstance(error, FileNotFoundError):
        return f"Not in this run: {error}."
    if isinstance(error, (KeyError, IndexError, ValueError)):
        return ("Not in this run: its results have no such point (a tiny run measures fewer processes, "
                "settings or variants than the committed default scale); compare the committed value.")
    return f"Not computed from this run ({type(error).__name__}: {error})."


def compare(notebook: str, results_root) -> pd.DataFrame:
    """A student's run beside the committed text: each fact from the committed results and from this run
    (a fact this run cannot give says why, in a sentence)."""
    ours, committed = facts(notebook, results_root), facts(notebook, COMMITTED)
    show = lambda v: _unavailable(v) if isinstance(v, Exception) else _fmt(v)
    rows = [dict(fact=k, committed=show(committed[k]), this_run=show(ours[k])) for k in committed]
    return pd.DataFrame(rows).set_index("fact")


# Small readers the facts modules share ------------------------------------------------------

@functools.lru_cache(maxsize=128)
def _read_csv(path: str, mtime: float) -> pd.DataFrame:
    return pd.read_csv(path)


def csv(root: Path, rel: str) -> pd.DataFrame:
    """``root/rel`` as a frame, read once per file version (callers must not change it); the error
    names the file when it is missing."""
    p = Path(root) / rel
    if not p.exists():
        raise FileNotFoundError(f"{p} (the notebook's results are missing; run it, or make reproduce)")
    return _read_csv(str(p), p.stat().st_mtime)


def json_file(root: Path, rel: str) -> dict:
    """``root/rel`` as JSON, the committed file when ``root`` has none (a run that did not make it)."""
    p = Path(root) / rel
    return json.loads((p if p.exists() else COMMITTED / rel).read_text())


def cores(root: Path, notebook: str) -> int:
    """The cores of the machine a notebook's results were measured on (its ``meta.json``; the
    committed one when ``root`` has none)."""
    return int(json_file(root, f"{notebook}/meta.json")["host"]["cores"])


def claim_row(root: Path, claim: str, setting: str) -> pd.Series:
    """One row of ``root/claims.csv`` (the committed claims when the root has none)."""
    p = Path(root) / "claims.csv"
    df = pd.read_csv(p if p.exists() else COMMITTED / "claims.csv")
    rows = df[(df["claim"] == claim) & (df["setting"] == setting)]
    if rows.empty:
        raise KeyError(f"no row for claim {claim} in setting {setting} in {p}")
    return rows.iloc[0]


def word(cond: bool, yes: str, no: str) -> str:
    """A comparison word from a condition: ``word(a > b, "slower", "faster")``."""
    return yes if cond else no


Fact = Callable[[Path], object]
