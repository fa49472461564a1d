"""The words the prose and figure checks look for, and how they report a problem."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["COMPARISON", "MEASURED", "Problem"]

#: Numbers that read as measured: decimals, percentages, ratios, scientific notation, times, rates.
MEASURED = re.compile(
    r"(?<![\w.,])(?:"
    r"\d[\d,]*(?:\.\d+)?e[+-]?\d+"                     # 9.4e5
    r"|\d[\d,]*\.\d+(?:\s?(?:%|x|×))?"                  # 0.19, 0.19x, 1.5%
    r"|\d[\d,]*\s?(?:%|x\b|×)"                          # 27%, 5x
    r"|\d[\d,]*(?:\.\d+)?\s(?:ms|µs|s|min|MB/s|GB/s|MiB/s|GiB/s|rec/s|records/s)\b"  # 60 ms
    r")(?![\w])")
#: Words that compare: a sentence that uses one states what the data decide.
COMPARISON = re.compile(
    r"\b(?:faster|slower|more|less|fewer|larger|smaller|higher|lower|longer|shorter|better|worse"
    r"|grows?|grew|shrinks?|shrank|falls?|fell|rises?|rose|beats?|outperforms?|exceeds?"
    r"|pays?|little|at most|at least)\b", re.I)


@dataclass(frozen=True)
class Problem:
    """A sentence or figure text that disagrees with the data or has no source."""

    notebook: str
    cell: int | str
    text: str
    detail: str
    unit: str = "cell"   # "line" for a figure module's text

    def __str__(self) -> str:
        return f"{self.notebook} {self.unit} {self.cell}: {self.detail} [{self.text}]"
