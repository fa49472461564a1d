"""Output of the coll_* scripts: one line per event, printed and, with $COLL_OUT, appended to
COLL_OUT/rank<R>.txt (mpiexec may splice lines that several ranks print at once)."""

import os


def say(rank: int, line: str) -> None:
    print(line, flush=True)
    folder = os.environ.get("COLL_OUT")
    if folder:
        with open(os.path.join(folder, f"rank{rank}.txt"), "a") as f:
            f.write(line.replace("\n", " ") + "\n")
