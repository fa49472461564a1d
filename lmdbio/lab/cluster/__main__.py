"""``python -m lmdbio.lab.cluster engine|controller|watch ...``: the same as ``python -m lmdbio.lab.cluster.watchdog``."""

import sys

from .watchdog import main

main(sys.argv[1:])
