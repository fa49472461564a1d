"""Running combinations: one mpiexec job per rank count, restarted after a hang or a crash."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from collections.abc import Callable

from lmdbio.errors import ConfigurationError

from ...paths import REPO
from .combos import PEER_TIMEOUT_S, Combo
from .datasets import make_datasets
from .merge import break_after, lost_row, verdict
from .refusals import auto_choice, expected_refusal

__all__ = ["ROOT", "DRIVER", "run_job", "run"]

ROOT = REPO
DRIVER = ROOT / "tests" / "mpi" / "matrix_run.py"


def _items(combos: list[Combo], paths: dict, auto_as: dict[bool, str]) -> list[dict]:
    out = []
    for k, c in enumerate(combos):
        rule = expected_refusal(c, auto_as)
        out.append({"id": k, "combo": asdict(c),
                    "path": str(paths[(c.records, c.uneven, c.sidecar)]),
                    "break_after": break_after(c),
                    "expect": None if rule is None else {"error": rule.error,
                                                         "reason": rule.reason}})
    return out


def _last_words(errfile: Path) -> str:
    """What an ended job said last: its last ``lmdbio: error:`` line (an aborting rank's
    message), else the end of its stderr."""
    text = errfile.read_text(errors="replace")
    said = [line for line in text.splitlines() if "lmdbio: error:" in line]
    return said[-1].strip()[:800] if said else text[-800:].strip()


def run_job(items: list[dict], nprocs: int, work: Path, hang_s: float, env: dict,
            log: Callable[[str], None], driver: Path = DRIVER) -> list[dict]:
    """Run ``items`` in one mpiexec job (restarted after a combination that hangs or crashes)."""
    from ...cluster import mpich_segments, mpiexec, remove_orphan_segments

    spec = work / f"job-{nprocs}-{items[0]['id']}.json"
    spec.write_text(json.dumps({"items": items}))
    rows: dict[int, dict] = {}
    start = 0
    while start < len(items):
        before = mpich_segments()
        errfile = work / f"job-{nprocs}-{items[start]['id']}.stderr"
        cmd = [mpiexec(), "-n", str(nprocs), sys.executable, str(driver), str(spec),
               "--start", str(start)]
        with open(errfile, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env, cwd=ROOT,
                                    start_new_session=True)
        current, deadline, buf = None, time.monotonic() + hang_s + 60, b""
        lost = None
        while True:
            left = deadline - time.monotonic()
            ready = select.select([proc.stdout], [], [], max(0.0, left))[0] if left > 0 else []
            if not ready:
                lost = f"hang: no progress for {hang_s:.0f} s"
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                proc.wait()
                if current is not None:
                    lost = (f"crash: the job ended (exit {proc.returncode}) in it; stderr: "
                            f"{_last_words(errfile)}")
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.startswith(b"MATRIX "):
                    continue
                msg = json.loads(line[7:])
                if msg["event"] == "start":
                    current = msg["pos"]
                else:
                    rows[msg["row"]["id"]] = msg["row"]
                    current = None
                deadline = time.monotonic() + hang_s
        if proc.stdout:
            proc.stdout.close()
        remove_orphan_segments(before)
        todo = [k for k in range(start, len(items)) if items[k]["id"] not in rows]
        if lost is not None and current is None and not todo:
            log(f"  P={nprocs}: the job did not end after its last combination; killed")
            break
        if lost is not None:
            pos = current if current is not None else todo[0]
            rows[items[pos]["id"]] = lost_row(items[pos], lost)
            log(f"  {Combo(**items[pos]['combo']).label()}: {lost[:200]}")
            start = pos + 1
            continue
        if todo:
            tail = errfile.read_text(errors="replace")[-1500:].strip()
            raise ConfigurationError(f"the matrix driver ended (exit {proc.returncode}) outside "
                                     f"any combination: {tail}")
        break
    return [rows.get(it["id"]) or lost_row(it, "crash: no result") for it in items]


def run(combos: list[Combo], *, root: str | os.PathLike | None = None, hang_s: float = 90,
        per_job: int = 250, log: Callable[[str], None] | None = None) -> list[dict]:
    """Check ``combos`` (grouped into mpiexec jobs by P); one row per combination, in order,
    with its ``verdict``. Data sets are made under ``root`` (a temporary folder if None)."""
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    if not DRIVER.exists():
        raise ConfigurationError(f"the matrix driver {DRIVER} is missing: run the matrix from a "
                                 "checkout of the repository")
    tmp = None
    if root is None:
        root = tmp = tempfile.mkdtemp(prefix="lmdbio-matrix-")
    root = Path(root)
    try:
        t0 = time.perf_counter()
        paths = make_datasets(root / "data")
        log(f"data sets made in {time.perf_counter() - t0:.1f} s under {root}")
        auto_as = auto_choice(root / "data")
        items = _items(combos, paths, auto_as)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
               "LMDBIO_TIMEOUT": str(PEER_TIMEOUT_S), "LMDBIO_EXIT_TIMEOUT": "5",
               "LMDBIO_CACHE": str(root / "cache")}
        rows: list[dict] = []
        for p in sorted({c.nprocs for c in combos}):
            mine = [it for it in items if it["combo"]["nprocs"] == p]
            for k in range(0, len(mine), per_job):
                t1, cpu1 = time.perf_counter(), _child_cpu()
                part = run_job(mine[k:k + per_job], p, root, hang_s, env, log)
                for it, row in zip(mine[k:k + per_job], part):
                    for key in ("reason", "error"):   # no temporary paths in the summary
                        row[key] = row[key].replace(str(root), "$MATRIX")
                    row["verdict"] = verdict(row, it["expect"])
                    row["expected"] = it["expect"]["error"] if it["expect"] else ""
                rows += part
                bad = sum(r["verdict"].startswith("FAIL") for r in part)
                log(f"P={p}: combinations {k + 1}..{k + len(part)} of {len(mine)}: "
                    f"{time.perf_counter() - t1:.0f} s ({_child_cpu() - cpu1:.0f} CPU s), "
                    f"{bad} FAIL")
        rows.sort(key=lambda r: r["id"])
        return rows
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _child_cpu() -> float:
    """CPU seconds (user + system) of this process's ended children (the MPI jobs' ranks)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime
