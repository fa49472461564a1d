"""``python -m lmdbio.cluster engine|controller|watch ...``: the same as ``python -m lmdbio.cluster.watchdog``."""

import sys

from .watchdog import main

main(sys.argv[1:])
