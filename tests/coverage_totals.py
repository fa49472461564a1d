"""Print the line and branch coverage of a combined ``coverage json`` report (``make coverage``)."""

import json
import sys

totals = json.load(open(sys.argv[1]))["totals"]
lines, branches = totals["covered_lines"], totals["covered_branches"]
print(f"lmdbio/ without lmdbio/lab/: lines {lines}/{totals['num_statements']} "
      f"({100 * lines / totals['num_statements']:.1f}%), branches {branches}/{totals['num_branches']} "
      f"({100 * branches / totals['num_branches']:.1f}%); combined {totals['percent_covered']:.1f}%")
