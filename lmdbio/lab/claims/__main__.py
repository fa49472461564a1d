"""``python -m lmdbio.lab.claims``: see :func:`lmdbio.lab.claims.cli.main`."""

import sys

from .cli import main

sys.exit(main())
