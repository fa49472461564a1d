"""The verdict of a tests/mpi script: rank 0 writes every rank's outcome to the JSON file that
``$MPI_VERDICT`` names (tests/conftest.py's run_verdict), and the job's exit status says whether
every rank passed. A test reads that file, never lines that ranks print."""

import json
import os
import sys

VERDICT_ENV = "MPI_VERDICT"


def conclude(comm, outcome, passed: bool = True) -> None:
    """Write ``{"outcomes": [...], "passed": [...]}`` (one entry per rank) on rank 0; end every
    rank with exit status 0 if every rank passed, else 1. A script that only reports (the test
    judges its outcomes) leaves ``passed`` true."""
    everyone = comm.gather((outcome, bool(passed)), root=0)
    ok = None
    if comm.rank == 0:
        ok = all(p for _, p in everyone)
        path = os.environ.get(VERDICT_ENV)
        if path:
            with open(path + ".tmp", "w") as f:
                json.dump({"outcomes": [o for o, _ in everyone],
                           "passed": [p for _, p in everyone]}, f)
            os.replace(path + ".tmp", path)
    sys.exit(0 if comm.bcast(ok, root=0) else 1)
