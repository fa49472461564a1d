"""``python -m lmdbio.lab.testing.matrix``: see :func:`lmdbio.lab.testing.matrix.cli.main`."""

import sys

from .cli import main

sys.exit(main())
