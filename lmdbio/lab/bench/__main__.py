"""``python -m lmdbio.lab.bench _point CONFIG RESULT``: one point under mpiexec (internal)."""

import sys

from .cli import point_main

if len(sys.argv) >= 2 and sys.argv[1] == "_point":
    sys.exit(point_main(sys.argv[2:]))
print("usage: python -m lmdbio.lab.bench _point CONFIG RESULT (internal; use `lmdbio bench`)",
      file=sys.stderr)
sys.exit(2)
