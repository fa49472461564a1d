"""A real 2-node Slurm on this host: munged, slurmctld and two slurmd, started and stopped by PID.

For tests (``with MiniSlurm() as slurm: ...``) and for a person who wants to
try the cluster path by hand::

    make cluster-up        # python -m lmdbio.lab.testing.slurm up --dir build/slurm
    export SLURM_CONF=$PWD/build/slurm/slurm.conf
    sinfo; srun -N 2 hostname
    make cluster-down      # python -m lmdbio.lab.testing.slurm down --dir build/slurm

Both "nodes" (``n1``, ``n2``) are this host: two ``slurmd -N`` on their own
ports, with ``SlurmdParameters=config_overrides`` so each may claim more CPUs
than the host has. MPICH's ``COMM_TYPE_SHARED`` split still sees two nodes
under ``srun --mpi=pmi2`` (PMI reports Slurm's node ids), but
``MPI_Get_processor_name`` is the same on both: never group ranks by
hostname. Everything (config, keys, state, spool, logs, pid files) lives in
one directory; nothing is written to ``/etc`` or ``/run``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lmdbio.errors import LmdbioError
from ..procs import pid_alive

__all__ = ["MiniSlurm", "available", "SlurmUnavailable", "main"]

DAEMONS = ("munged", "slurmctld", "slurmd")
PACKAGES = ("slurm-wlm", "munge")


class SlurmUnavailable(LmdbioError):
    """This machine cannot run the local Slurm (the daemons are missing and cannot be installed)."""


def _missing() -> list[str]:
    return [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def available(install: bool = True) -> tuple[bool, str]:
    """Whether the local Slurm can run here; installs slurm-wlm and munge with apt where root.

    Returns:
        ``(True, "")`` or ``(False, reason)``.
    """
    missing = _missing()
    root = os.geteuid() == 0
    if missing and root and install and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
        if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
            subprocess.run(cmd, env=env, capture_output=True)
        missing = _missing()
    if missing:
        how = ("apt-get install slurm-wlm munge failed" if root
               else "not root, so they cannot be installed here: install slurm-wlm and munge, "
                    "or run as root")
        return False, f"no {', '.join(missing)} on this machine; {how}"
    # Not root: the daemons run as this user (SlurmUser=SlurmdUser=$USER), jobs too.
    return True, ""


def _free_ports(k: int) -> list[int]:
    socks, ports = [], []
    for _ in range(k):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _stop_pids(pids: list[int], grace: float = 10.0) -> None:
    """SIGTERM, wait up to ``grace`` s, then SIGKILL; reaps our own children."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:  # reap our own children (the daemons this process started)
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def processes_using(marker: str) -> list[int]:
    """PIDs whose environment holds ``marker`` (e.g. ``SLURM_CONF=/tmp/x/slurm.conf``): steps and jobs."""
    found = []
    needle = marker.encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                found.append(int(d.name))
        except OSError:
            continue
    return found


class MiniSlurm:
    """munged + slurmctld + ``slurmd -N n1 .. nK`` on this host, all state in ``root``.

    Args:
        root: the directory for config, state and logs (default: a new temp dir, removed at stop).
        nodes: node count.
        cpus: CPUs each node claims (``config_overrides`` lets it exceed the host's).
    """

    def __init__(self, root: str | os.PathLike | None = None, nodes: int = 2, cpus: int = 4):
        self._own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="lmdbio-slurm-")).resolve()
        self.nodes = [f"n{i + 1}" for i in range(nodes)]
        self.cpus = cpus
        self.conf = self.root / "slurm.conf"
        self.pids: dict[str, int] = {}

    # --- configuration ----------------------------------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        """Variables a client (sinfo, srun, ipyparallel) needs to talk to this Slurm."""
        return {"SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        r = self.root
        for sub in ("state", "log", "munge", *(f"spool/{n}" for n in self.nodes)):
            (r / sub).mkdir(parents=True, exist_ok=True)
        key = r / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o600)
        (r / "munge").chmod(0o700)
        host = socket.gethostname()
        import pwd

        user = pwd.getpwuid(os.geteuid()).pw_name
        ctl_port, *node_ports = _free_ports(1 + len(self.nodes))
        lines = [
            "# Written by lmdbio.lab.testing.slurm: a 2-node Slurm on one host.",
            "ClusterName=lmdbio",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctl_port}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={r}/munge/munge.socket",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/slurmctld.pid",
            f"SlurmdPidFile={r}/slurmd.%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd.%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "MpiDefault=none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "KillWait=5", "MinJobAge=2", "InactiveLimit=0", "SlurmdTimeout=30",
        ]
        for name, port in zip(self.nodes, node_ports):
            lines.append(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} "
                         f"CPUs={self.cpus} State=UNKNOWN")
        lines.append(f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE "
                     "State=UP OverSubscribe=FORCE")
        self.conf.write_text("\n".join(lines) + "\n")

    # --- lifecycle --------------------------------------------------------------------------
    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        env = {**os.environ, **self.env}
        # A new session: `make cluster-up` returns while the daemons go on.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True, cwd=self.root)
        log.close()
        self.pids[name] = proc.pid
        self._save()

    def _save(self) -> None:
        (self.root / "pids.json").write_text(json.dumps(self.pids) + "\n")

    def start(self, timeout: float = 90.0) -> MiniSlurm:
        """Write the config, start the daemons, wait until every node is idle."""
        ok, why = available()
        if not ok:
            raise SlurmUnavailable(why)
        self._write_config()
        r = self.root
        try:
            self._spawn("munged", [_which("munged"), "-F", "--force",
                                   f"--socket={r}/munge/munge.socket",
                                   f"--key-file={r}/munge/munge.key",
                                   f"--pid-file={r}/munge/munged.pid",
                                   f"--log-file={r}/log/munged.log",
                                   f"--seed-file={r}/munge/munged.seed"])
            self._wait_for(lambda: (r / "munge" / "munge.socket").exists(), 15, "munged's socket")
            self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
            for n in self.nodes:
                self._spawn(f"slurmd-{n}", [_which("slurmd"), "-D", "-N", n, "-f", str(self.conf)])
            self._wait_for(self._all_idle, timeout, "every node idle in sinfo")
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_for(self, cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            for name, pid in self.pids.items():
                if not pid_alive(pid):
                    raise LmdbioError(f"{name} exited while waiting for {what}; see {self.root}/log/")
            if time.monotonic() > deadline:
                raise LmdbioError(f"no {what} after {timeout:.0f} s; see the logs in {self.root}/log/")
            time.sleep(0.3)

    def sinfo(self) -> dict[str, str]:
        """``{node: state}`` as ``sinfo`` reports it ({} when slurmctld does not answer)."""
        out = self._cmd(["sinfo", "-h", "-N", "-o", "%N %t"])
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def jobs(self) -> list[str]:
        """Job ids in the queue."""
        return self._cmd(["squeue", "-h", "-o", "%i"]).split()

    def _cmd(self, cmd: list[str]) -> str:
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=15,
                               env={**os.environ, **self.env})
        except subprocess.TimeoutExpired:
            return ""
        return p.stdout if p.returncode == 0 else ""

    def _all_idle(self) -> bool:
        states = self.sinfo()
        return sorted(states) == sorted(self.nodes) and all(s == "idle" for s in states.values())

    def stop(self) -> None:
        """Cancel every job, stop the daemons by PID, kill what is left of jobs; remove a temp root."""
        if not self.pids and (self.root / "pids.json").exists():
            self.pids = json.loads((self.root / "pids.json").read_text())
        ctl = self.pids.get("slurmctld")
        if ctl and pid_alive(ctl):
            jobs = self.jobs()
            if jobs:
                self._cmd(["scancel", *jobs])
                deadline = time.monotonic() + 15
                while self.jobs() and time.monotonic() < deadline:
                    time.sleep(0.3)
        order = [n for n in self.pids if n.startswith("slurmd")] + ["slurmctld", "munged"]
        for name in order:
            if name in self.pids:
                _stop_pids([self.pids[name]])
        # Job steps (slurmstepd) and their tasks outlive slurmd: find them by our SLURM_CONF.
        left = processes_using(f"SLURM_CONF={self.conf}")
        if left:
            _stop_pids(left, grace=3.0)
        self.pids = {}
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
        elif (self.root / "pids.json").exists():
            (self.root / "pids.json").unlink()

    def __enter__(self) -> MiniSlurm:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lmdbio.lab.testing.slurm",
                                description="Start or stop a 2-node Slurm on this host.")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--dir", default="build/slurm", help="config, state and logs (default build/slurm)")
    p.add_argument("--nodes", type=int, default=2)
    args = p.parse_args(argv)
    s = MiniSlurm(Path(args.dir), nodes=args.nodes)
    if args.action == "up":
        if (s.root / "pids.json").exists():
            print(f"already up? {s.root}/pids.json exists; run `make cluster-down` first", file=sys.stderr)
            return 1
        try:
            s.start()
        except LmdbioError as exc:
            print(f"cluster-up failed: {exc}", file=sys.stderr)
            return 1
        print(f"Slurm up: nodes {', '.join(s.nodes)} idle.\n  export SLURM_CONF={s.conf}\n"
              f"  then e.g.: srun -N 2 --ntasks-per-node=2 --mpi=pmi2 hostname\n"
              f"  stop with: make cluster-down")
    elif args.action == "down":
        s.stop()
        print(f"Slurm down ({s.root}).")
    else:
        print(json.dumps(s.sinfo()) if s.conf.exists() else "not configured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
