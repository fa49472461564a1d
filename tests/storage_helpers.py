"""What the device-setting tests (test_throttled, test_shared) share: what of a setting exists,
the ``nothing_left`` fixture, a holder killed by a signal, and a bench sweep on a setting.

pytest does not rewrite the asserts of this module, so each one says what it saw.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lmdbio.lab.storage import devices as dv

ROOT = Path(__file__).resolve().parents[1]
#: The work-folder prefixes of the two settings (throttle.start, shared.start).
PREFIXES = ("lmdbio-throttle-", "lmdbio-shared-")


def leftovers() -> dict[str, set]:
    """Loop devices, mounts, cgroups and v1 root read rules of any device setting here."""
    r = subprocess.run(["losetup", "-a"], capture_output=True, text=True)
    loops = {ln for ln in r.stdout.splitlines() if any(p in ln for p in PREFIXES)}
    mounts = {m for m in dv.mount_points() if any(p in m for p in PREFIXES)}
    cgroups: set[str] = set()
    for root in (dv.V1_ROOT, dv.v2_root()):
        if root and os.path.isdir(root):
            cgroups |= {str(p) for p in Path(root).iterdir() if p.name.startswith("lmdbio-")}
    rules = set(dv.v1_rules()) if os.path.isdir(dv.V1_ROOT) else set()
    return {"loops": loops, "mounts": mounts, "cgroups": cgroups, "rules": rules}


@pytest.fixture
def nothing_left():
    """The test leaves no loop device, mount, cgroup or v1 blkio rule of its own."""
    before = leftovers()
    yield
    deadline = time.monotonic() + 20    # a janitor may still be at work
    while True:
        new = {k: sorted(v - before[k]) for k, v in leftovers().items()}
        if not any(new.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not any(new.values()), f"left behind: {new}"


def parts(state: dict) -> dict:
    """What a setting's state says it made: work folder, cgroups, and S's v1 rule (shared)."""
    cgs = state.get("cgroups") or {}
    rule = state.get("rule") or {}
    return {"workdir": state["workdir"],
            "cgroups": list(cgs.get("nodes", [])) + ([cgs["base"]] if cgs.get("base") else [])
            + ([rule["cgroup"]] if rule.get("cgroup") else []),
            "rule": state["s_majmin"] if rule.get("version") == 1 else None}


def present(info: dict) -> list[str]:
    """What of a setting (its :func:`parts`) exists now, in the order of :func:`everything`."""
    work = info["workdir"]
    r = subprocess.run(["losetup", "-a"], capture_output=True, text=True)
    left = []
    if any(work + "/" in line for line in r.stdout.splitlines()):
        left.append("loop device")
    if any(m.startswith(work + "/") for m in dv.mount_points()):
        left.append("mount")
    left += [c for c in info["cgroups"] if os.path.isdir(c)]
    if info["rule"] and info["rule"] in dv.v1_rules():
        left.append("rule")
    if os.path.exists(work):
        left.append("workdir")
    return left


def everything(info: dict) -> list[str]:
    """:func:`present` of a setting that is whole."""
    return ["loop device", "mount", *info["cgroups"], *(["rule"] if info["rule"] else []),
            "workdir"]


def kill_holder(code: str, sig: int, cleanup) -> None:
    """Run ``code`` (it holds a setting, prints its state file, sleeps), check that the setting is
    whole, send ``sig``, and check that nothing of it stays."""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    info = None
    try:
        info = parts(json.loads(Path(p.stdout.readline().strip()).read_text()))
        made = present(info)
        assert made == everything(info), f"the holder made {made}, not {everything(info)}"
        p.send_signal(sig)
        p.wait(timeout=30)
        deadline = time.monotonic() + 20
        while (left := present(info)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == [], f"left behind after {signal.Signals(sig).name}: {left} of {info}"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if info is not None:
            cleanup(os.path.join(info["workdir"], "state.json"))


def bench_sweep(ds, storage: str, out: Path):
    """A cold 2-rank ``lmdbio-lmm-dio`` sweep on ``storage``, 1 rank per virtual node, with the
    checks every setting passes; returns (summary, meta)."""
    from lmdbio.lab import bench

    pts = bench.make_points([str(ds)], ["lmdbio-lmm-dio"], [2], ["cold"], 16, 3,
                            ranks_per_node=1, storage=storage, baselines=False)
    s = bench.run_sweep(pts, out, progress=False)
    assert (s["status"] == "ok").all(), s["error"].tolist()
    assert set(s["storage"]) == {storage}, s["storage"].tolist()
    counts = s[["pfs_requests", "pfs_bytes"]]
    assert (counts > 0).all().all(), f"the timed reads did not reach the device: {counts}"
    assert (s["resident_fraction"] <= 0.05).all(), s["resident_fraction"].tolist()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["config"]["pfs"]["kind"] == storage.split(":")[0], meta["config"]["pfs"]
    return s, meta
