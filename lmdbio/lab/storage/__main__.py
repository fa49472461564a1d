"""``python -m lmdbio.lab.storage faulters ...`` (the problem-1 measurement); ``janitor STATE`` (internal)."""

import sys


def main(argv: list[str]) -> int:
    if argv[:1] == ["janitor"] and len(argv) == 2:
        from .throttle import janitor_main

        return janitor_main(argv[1])
    if argv[:1] == ["faulters"]:
        from .faulters import main as faulters_main

        return faulters_main(argv[1:])
    print("usage: python -m lmdbio.lab.storage faulters [--help]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
