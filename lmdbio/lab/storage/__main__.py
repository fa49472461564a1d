"""``python -m lmdbio.lab.storage faulters ...`` (the problem-1 measurement); ``janitor STATE`` (internal)."""

import contextlib
import os
import signal
import sys


def janitor(state_file: str) -> int:
    """Wait for EOF on stdin (the holder's end), then run the cleanup of the state's kind.

    :func:`lmdbio.lab.storage.devices.start_janitor` starts it; ``kind`` is
    ``shared`` (:mod:`.shared`) or ``throttle`` (:mod:`.throttle`, also when absent).
    """
    from .devices import read_state

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    st = read_state(state_file)
    if not st:
        return 0
    if st.get("kind") == "shared":
        from .shared import cleanup
    else:
        from .throttle import cleanup
    cleanup(state_file)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["janitor"] and len(argv) == 2:
        return janitor(argv[1])
    if argv[:1] == ["faulters"]:
        from .faulters import main as faulters_main

        return faulters_main(argv[1:])
    print("usage: python -m lmdbio.lab.storage faulters [--help]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
