"""lmdbio.lab.cluster: Slurm settings without Slurm; a real local cluster of MPI engines."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import pytest

from lmdbio.lab import cluster as C
from lmdbio.lab import experiments as E
from lmdbio.lab.notebook_runner import _notebook_cluster
from lmdbio.errors import ConfigurationError, LmdbioError


# --- Slurm settings: file and environment, nothing hard-coded -----------------------------------

def test_slurm_settings_empty_without_file_or_env(tmp_path):
    s = C.slurm_settings(tmp_path / "none.yaml", env={})
    assert s == {"options": [], "setup": []}


def test_slurm_settings_file_then_env_override(tmp_path):
    f = tmp_path / "slurm.yaml"
    f.write_text("account: proj1\npartition: batch\ntime_limit: '00:30:00'\noptions: --exclusive\n"
                 "setup: ['module load mpich']\n")
    s = C.slurm_settings(f, env={"LMDBIO_SLURM_PARTITION": "debug"})
    assert s["account"] == "proj1"
    assert s["partition"] == "debug"
    assert s["time_limit"] == "00:30:00"
    assert s["options"] == ["--exclusive"]
    assert s["setup"] == ["module load mpich"]


def test_slurm_settings_env_names_the_file(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("qos: high\n")
    assert C.slurm_settings(env={"LMDBIO_SLURM_CONFIG": str(f)})["qos"] == "high"


def test_slurm_settings_rejects_unknown_keys(tmp_path):
    f = tmp_path / "slurm.yaml"
    f.write_text("acount: typo\n")
    with pytest.raises(ConfigurationError, match="unknown keys"):
        C.slurm_settings(f, env={})


def _engine_script(settings: dict, n: int, tmp_path) -> str:
    """The engines' batch script as ipyparallel writes it from :func:`slurm_config`."""
    from lmdbio.lab.cluster.launcher import MPISlurmEngineSetLauncher
    from lmdbio.lab.cluster.slurm import slurm_config

    cfg = slurm_config(settings, n=n)
    cfg.SlurmEngineSetLauncher.batch_file_name = str(tmp_path / "engines.sbatch")
    launcher = MPISlurmEngineSetLauncher(work_dir=str(tmp_path), config=cfg, cluster_id="cid",
                                         profile_dir=str(tmp_path))
    launcher.write_batch_script(n)
    return Path(launcher.batch_file).read_text()


def test_slurm_options_are_ipyparallels_own():
    """Account, partition, time limit and QoS go to ipyparallel's launcher options, both launchers."""
    from lmdbio.lab.cluster.slurm import slurm_config

    cfg = slurm_config({"account": "p", "partition": "q", "time_limit": "01:00:00", "qos": "hi",
                        "options": [], "setup": []})
    for launcher in (cfg.SlurmEngineSetLauncher, cfg.SlurmControllerLauncher):
        assert (launcher.account, launcher.queue, launcher.timelimit, launcher.qos) == \
            ("p", "q", "01:00:00", "hi")
        assert "batch_template" not in launcher


def test_engine_script_is_one_mpi_world_with_ipyparallels_options(tmp_path):
    t = _engine_script({"account": "p", "partition": "q", "time_limit": "01:00:00", "qos": "hi",
                        "nodes": 4, "tasks_per_node": 2, "options": ["--constraint=ssd"],
                        "setup": ["source ~/venv/bin/activate", "echo {braces}"]}, 3, tmp_path)
    lines = t.splitlines()
    # written by ipyparallel from its options
    for line in ("#SBATCH --account=p", "#SBATCH --partition=q", "#SBATCH --time=01:00:00",
                 "#SBATCH --qos=hi"):
        assert lines.count(line) == 1, (line, t)
    assert any(line.startswith("#SBATCH --output=") for line in lines)
    # lmdbio's: the layout (nodes capped at n), extra lines, one MPI world
    assert "#SBATCH --ntasks=3" in lines and "#SBATCH --nodes=3" in lines
    assert "#SBATCH --ntasks-per-node=2" in lines and "#SBATCH --constraint=ssd" in lines
    assert lines.index("source ~/venv/bin/activate") < lines.index("echo {braces}") < len(lines) - 1
    # srun with a PMI (plain srun gives every engine its own COMM_WORLD), block distribution
    assert lines[-1].startswith("srun --mpi=pmi2 --distribution=block ")


def test_slurm_layout_from_env_and_mpiexec_inside_the_job(tmp_path):
    s = C.slurm_settings(tmp_path / "none.yaml", env={"LMDBIO_SLURM_NODES": "4",
                                                      "LMDBIO_SLURM_TASKS_PER_NODE": "36",
                                                      "LMDBIO_SLURM_MPI": "mpiexec"})
    assert (s["nodes"], s["tasks_per_node"]) == (4, 36)
    t = _engine_script(s, 8, tmp_path)
    assert "#SBATCH --nodes=4" in t and "#SBATCH --ntasks-per-node=36" in t
    assert t.splitlines()[-1].startswith(f"{C.mpiexec()} -n 8 ") and "srun" not in t
    assert "--account" not in t and "--partition" not in t  # unset: the site's defaults
    with pytest.raises(ConfigurationError, match="whole number"):
        C.slurm_settings(tmp_path / "none.yaml", env={"LMDBIO_SLURM_NODES": "two"})


def test_cluster_kind_from_environment(monkeypatch):
    monkeypatch.setenv("LMDBIO_CLUSTER", "slurm")
    assert C.MPICluster(n=2).engines == "slurm"
    monkeypatch.setenv("LMDBIO_CLUSTER", "pbs")
    with pytest.raises(ConfigurationError, match="LMDBIO_CLUSTER"):
        C.MPICluster(n=2)


@pytest.mark.parametrize("kw", [dict(n=0), dict(n=2, engines="pbs"), dict(n=2, controller="k8s")])
def test_bad_arguments(kw):
    with pytest.raises(ValueError):
        C.MPICluster(**kw)


def test_a_launchers_log_is_shortened_to_one_line(capsys):
    """ipyparallel's "Output for X:" record (mpiexec's whole log) becomes one line in a notebook."""
    import logging
    import sys

    from lmdbio.lab.cluster.mpicluster import _one_line_output

    log = logging.getLogger("lmdbio-test-launcher-output")
    log.handlers, log.propagate = [logging.StreamHandler(sys.stdout)], False
    log.addFilter(_one_line_output)
    log.warning("Output for %s:\n%s", "mpiexec-1", "[IPEngine.0] Registering\n[IPEngine.1] Requesting id")
    log.warning("Engine set %s stopped", "es-1")
    out = capsys.readouterr().out.splitlines()
    assert out == ["lmdbio: mpiexec-1 ended with a non-zero exit code (its output is not shown)",
                   "Engine set es-1 stopped"]


def test_run_needs_a_started_cluster():
    with pytest.raises(LmdbioError, match="not running"):
        C.MPICluster(n=2).run(E.engine_info, 1)


# --- a real cluster of 2 MPI engines (slow: a controller and two engines start) -----------------
# The engines start in tests/ so that the functions below (pickled by module
# name) import there as they do here.
HERE = Path(__file__).resolve().parent

@pytest.fixture(scope="module")
def cl():
    with C.MPICluster(n=2, work_dir=HERE) as c:
        c.failure_grace = 3.0
        yield c


def _size_and_rank(comm):
    return comm.Get_size(), comm.Get_rank()


def _allgather_rank(comm):
    return comm.allgather(comm.Get_rank())


def _raise_on_all(comm):
    raise ValueError(f"boom on {comm.Get_rank()}")


def _raise_on_rank0_others_wait(comm):
    if comm.Get_rank() == 0:
        raise RuntimeError("rank 0 failed")
    comm.Barrier()


@pytest.mark.mpi
@pytest.mark.gate
def test_subcommunicators(cl):
    assert cl.run(_size_and_rank, 2) == [(2, 0), (2, 1)]
    assert cl.run(_size_and_rank, 1) == [(1, 0)]
    assert cl.run(_allgather_rank) == [[0, 1], [0, 1]]
    with pytest.raises(ValueError, match="nprocs"):
        cl.run(_size_and_rank, 3)


@pytest.mark.mpi
@pytest.mark.gate
def test_engine_info_and_shared_memory(cl):
    info = cl.run(E.engine_info, 2)
    assert [i["rank"] for i in info] == [0, 1]
    assert all(i["size"] == 2 for i in info)
    shm = cl.run(E.check_shared_memory, 2)
    assert all(s["all_slices_visible"] for s in shm)
    assert {s["node_size"] for s in shm} == {2}


@pytest.mark.mpi
@pytest.mark.gate
def test_failure_on_every_rank_is_raised(cl):
    with pytest.raises(C.EngineFailure, match="boom"):
        cl.run(_raise_on_all, 2)
    assert cl.run(_size_and_rank, 2) == [(2, 0), (2, 1)]  # still usable


def _on_error(comm):
    import os

    return os.environ.get("LMDBIO_ON_ERROR")


def _reader_raises_on_all(comm, path):
    import lmdbio

    with lmdbio.Reader(path, 4, comm, "lmdbio-lmm-dio") as r:
        r.read_batch()
        raise KeyError(f"a typo in a cell, rank {comm.Get_rank()}")


def _reader_reads(comm, path):
    import lmdbio

    with lmdbio.Reader(path, 4, comm, "lmdbio-lmm-dio") as r:
        return list(r.read_batch().indices)


@pytest.mark.mpi
@pytest.mark.gate
def test_an_error_inside_with_reader_reaches_the_notebook_and_engines_stay(cl, datasets):
    """Engines run with LMDBIO_ON_ERROR=raise: a cell's error is an exception, never MPI_Abort."""
    assert cl.run(_on_error, 2) == ["raise", "raise"]
    with pytest.raises(C.EngineFailure, match="a typo in a cell"):
        cl.run(_reader_raises_on_all, 2, str(datasets["cifar10"]))
    assert cl.view is not None
    assert cl.run(_reader_reads, 2, str(datasets["cifar10"])) == [[0, 1], [2, 3]]


@pytest.mark.mpi
@pytest.mark.gate
def test_datasets_pages_and_timeline(cl, tmp_path):
    path = tmp_path / "c"
    made = E.ensure_datasets(cl, [dict(path=str(path), preset="cifar10", records=300, commit_every=100)])
    assert made[0]["made"] and made[0]["records"] == 300
    again = E.ensure_datasets(cl, [dict(path=str(path), preset="cifar10", records=300, commit_every=100)])
    assert not again[0]["made"]
    from lmdbio.format import read_meta

    meta = read_meta(path)
    kinds = E.page_types(path)["type"].value_counts()
    assert kinds["leaf"] == meta.leaf_pages
    assert kinds["branch"] == meta.branch_pages
    assert kinds["overflow"] == meta.overflow_pages
    assert kinds["meta"] == 2
    rows = cl.run_root(E._timelines, 2, [dict(dataset=str(path), variant="lmdbio-lmm-dio-prov",
                                              batch_size=20, iters=3, warmup=0, cache="cold")])
    assert {r["rank"] for r in rows} == {0, 1}
    reads = [r for r in rows if r["phase"] == "read"]
    assert len(reads) == 3 and all(r["t_end"] >= r["t_start"] for r in reads)
    assert rows[0]["records"] == 60
    table = E.prov_model_table(path, commit_every=100)
    assert len(table) == 300 and (table["true_offset"] > 0).all()


def _gone(pids, wait: float = 60.0) -> list[int]:
    """The pids still alive after waiting up to ``wait`` s (a bound, not a timing assert)."""
    import os
    import time

    def alive(pid):
        try:
            os.kill(pid, 0)
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (ProcessLookupError, OSError):
            return False

    deadline = time.monotonic() + wait
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def _watchdogs(targets) -> list[int]:
    """Pids of the watchdog processes (``lmdbio.lab.cluster.watchdog watch``) watching ``targets``."""
    want = {f"--target={t}".encode() for t in targets}
    found = []
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
        except OSError:  # ended meanwhile
            continue
        if b"lmdbio.lab.cluster.watchdog" in args and want & set(args):
            found.append(int(proc.name))
    return found


def _engine_shm(c) -> set[str]:
    files = set().union(*(C.shm_files(p["pid"]) for p in c.processes))
    assert files, "the engines map no MPICH segment; nothing to check"
    return files


@pytest.mark.mpi
@pytest.mark.gate
def test_stop_shuts_engines_down_through_mpi_finalize():
    """A normal stop: engines leave by themselves (MPI_Finalize), MPICH removes its segments."""
    with C.MPICluster(n=2, work_dir=HERE) as c:
        assert all(s["all_slices_visible"] for s in c.run(E.check_shared_memory, 2))
        pids = [p["pid"] for p in c.processes]
        files = _engine_shm(c)
        dogs = _watchdogs(pids + [c.cluster.controller.process.pid])
        assert len(dogs) == 3, "one watchdog per engine and one for the controller"
    assert _gone(pids) == []
    assert c.removed_shm == [], "stop() had to remove segments: the engines did not finalize"
    assert [f for f in files if Path(f).exists()] == []
    assert c.left_behind == []
    assert _gone(dogs) == [], "a watchdog outlived what it watched"


@pytest.mark.mpi
@pytest.mark.gate
def test_hung_ranks_stop_the_cluster_and_leave_no_segment():
    # It ends its own cluster (the others wait in a barrier forever).
    with C.MPICluster(n=2, work_dir=HERE) as c:
        c.failure_grace = 0.5   # the others never finish: no wait makes them
        pids = [p["pid"] for p in c.processes]
        files = _engine_shm(c)
        dogs = _watchdogs(pids)
        assert len(dogs) == 2
        topo = set().union(*(C.hydra_files(C.parent_pid(p)) for p in pids))
        assert len(topo) == 1, "the engines' proxy holds its topology file"
        with pytest.raises(C.EngineFailure, match="rank 0 failed"):
            c.run(_raise_on_rank0_others_wait, 2)
        assert c.view is None
    assert _gone(pids) == []
    assert [f for f in files | topo if Path(f).exists()] == []
    assert c.left_behind == []
    assert _gone(dogs) == [], "a watchdog outlived what it watched"


@pytest.mark.mpi
def test_a_killed_jobs_topology_file_is_removed_as_an_orphan():
    """A proxy killed with its job leaves hydra_hwloc_xmlfile_* in the temporary folder (as
    SIGKILLed jobs of the tests did); remove_orphan_segments removes it, once nothing holds it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    before = C.mpich_segments()
    job = subprocess.Popen([C.mpiexec(), "-n", "2", sys.executable, "-c",
                            "from mpi4py import MPI; import time; time.sleep(60)"],
                           start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30   # a bound on the job's start, not a timing assert
        new = set()
        while not new and time.monotonic() < deadline:
            time.sleep(0.2)
            new = {f for f in C.mpich_segments() - before if f.name.startswith("hydra_hwloc_xmlfile_")}
        assert len(new) == 1, "the job's proxy made no topology file"
        assert C.remove_orphan_segments(before, wait_s=0) & new == set(), "removed while held open"
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    deadline = time.monotonic() + 10
    while any(p.name.isdigit() and any(str(f) in C.hydra_files(p.name) for f in new)
              for p in Path("/proc").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(f.exists() for f in new), "the killed proxy left its file (MPICH's behaviour)"
    assert C.remove_orphan_segments(before) >= new
    assert not any(f.exists() for f in new)


CLIENT = """
import json, sys, time
from lmdbio.lab import cluster as C
c = C.MPICluster(n=2, work_dir=sys.argv[1]).start()
c.run(__import__("lmdbio.lab.experiments").lab.experiments.check_shared_memory, 2)
files = sorted(set().union(*(C.shm_files(p["pid"]) for p in c.processes)))
print(json.dumps({"engines": [p["pid"] for p in c.processes],
                  "controller": c.cluster.controller.process.pid, "shm": files}), flush=True)
time.sleep(600)
"""


@pytest.mark.mpi
@pytest.mark.gate
def test_engines_and_controller_end_when_the_client_is_killed(tmp_path):
    """The watchdog: a kernel killed with SIGKILL leaves no engine, controller or segment."""
    import json
    import os
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", CLIENT, str(HERE)], stdout=subprocess.PIPE,
                            text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    try:
        line = proc.stdout.readline()
        assert line, "the client script did not start its cluster"
        info = json.loads(line)
        dogs = _watchdogs(info["engines"] + [info["controller"]])
    finally:
        proc.kill()
        proc.wait()
    assert info["shm"]
    assert len(dogs) == 3, "one watchdog per engine and one for the controller"
    assert _gone(info["engines"] + [info["controller"]]) == []
    assert [f for f in info["shm"] if Path(f).exists()] == []
    assert _gone(dogs) == [], "a watchdog outlived what it watched"


# --- one cluster per notebook run (lmdbio.lab.cluster.shared) -----------------------------------
KERNEL = """
import json, sys
from lmdbio.lab import cluster as C
from lmdbio.lab.experiments import engine_info
blocks = []
for n in (2, 1):   # two cells, as a notebook's kernel runs them
    with C.MPICluster(n=n, work_dir=sys.argv[1]) as c:
        blocks.append({"attached": c.shared is not None, "pids": [p["pid"] for p in c.processes],
                       "sizes": [i["size"] for i in c.run(engine_info)]})
print(json.dumps(blocks))
"""


@pytest.mark.mpi
@pytest.mark.gate
def test_blocks_attach_to_the_runners_cluster_and_leave_it_running():
    """Every MPICluster() that fits the runner's cluster uses its engines; a larger one starts its own;
    the runner's stop leaves no engine, controller, watchdog or segment."""
    import json
    import os
    import subprocess
    import sys

    with C.shared_cluster(2, work_dir=HERE) as runner:
        pids = [p["pid"] for p in runner.processes]
        controller = runner.cluster.controller.process.pid
        files = _engine_shm(runner)
        dogs = _watchdogs(pids + [controller])
        # Two blocks in another process (a notebook's kernel inherits $LMDBIO_SHARED_CLUSTER).
        kernel = subprocess.run([sys.executable, "-c", KERNEL, str(HERE)], capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": str(HERE.parent)}, timeout=120)
        assert kernel.returncode == 0, kernel.stderr
        assert json.loads(kernel.stdout) == [{"attached": True, "pids": pids, "sizes": [2, 2]},
                                             {"attached": True, "pids": pids, "sizes": [1]}]
        # And one in this process: n bounds nprocs; leaving the block leaves the engines running.
        with C.MPICluster(n=1, work_dir=HERE) as c:
            assert c.shared is not None and [p["pid"] for p in c.processes] == pids
            assert c.start_seconds == runner.start_seconds
            assert c.run(_size_and_rank) == [(1, 0)]
            with pytest.raises(ValueError, match="nprocs"):
                c.run(_size_and_rank, 2)
        assert c.view is None and _gone(pids + [controller], wait=0) == pids + [controller], "still running"
        assert runner.run(_allgather_rank) == [[0, 1], [0, 1]]
        with C.MPICluster(n=3, work_dir=HERE) as big:
            assert big.shared is None
            assert not {p["pid"] for p in big.processes} & set(pids)
        # The notebook runner lends it to a measuring notebook (this file, in its folder, stands in).
        assert isinstance(_notebook_cluster(Path(__file__), "tiny", True, {}), nullcontext)
    assert C.SHARED_ENV not in os.environ
    assert not isinstance(_notebook_cluster(Path(__file__), "tiny", True, {}), nullcontext)
    assert _gone(pids + [controller]) == []
    assert runner.left_behind == [] and [f for f in files if Path(f).exists()] == []
    assert _gone(dogs) == [], "a watchdog outlived what it watched"


@pytest.mark.mpi
@pytest.mark.gate
def test_hung_ranks_in_an_attached_block_stop_the_runners_cluster_and_leave_nothing():
    """Hung ranks end the shared cluster as they end one's own; the next block starts its own, and
    the runner's stop of the ended cluster leaves nothing either."""
    import os

    with C.shared_cluster(2, work_dir=HERE) as runner:
        pids = [p["pid"] for p in runner.processes]
        files = _engine_shm(runner)
        dogs = _watchdogs(pids)
        with C.MPICluster(n=2, work_dir=HERE) as c:
            assert c.shared is not None
            c.failure_grace = 0.5   # rank 1 never leaves its barrier: no wait makes it
            with pytest.raises(C.EngineFailure, match="rank 0 failed"):
                c.run(_raise_on_rank0_others_wait, 2)
            assert c.view is None and c.left_behind == []
        assert _gone(pids) == []
        assert C.SHARED_ENV not in os.environ, "a stopped shared cluster is not attached to again"
        with C.MPICluster(n=1, work_dir=HERE) as own:
            assert own.shared is None and own.run(_size_and_rank) == [(1, 0)]
    assert runner.left_behind == [] and [f for f in files if Path(f).exists()] == []
    assert _gone(dogs) == [], "a watchdog outlived what it watched"


def test_finished_error_looks_again_at_a_reply_not_ready_yet():
    """A task that just left ipyparallel's outstanding set may have no stored reply (KeyError)
    or one not marked ready (get(0) raises TimeoutError) for a moment: neither is an error of
    the task nor a crash of the check; it is looked at again. A remote error is reported once."""
    from types import SimpleNamespace

    from ipyparallel.error import RemoteError

    from lmdbio.lab.cluster.mpicluster import MPICluster

    class Reply:
        def __init__(self, exc):
            self.exc = exc

        def get(self, timeout):
            if self.exc is not None:
                raise self.exc

    replies = {"slow": Reply(TimeoutError("Result not ready.")), "ok": Reply(None),
               "bad": Reply(RemoteError("ValueError", "boom", ""))}

    def get_result(m):
        if m == "unstored":
            raise KeyError(m)
        return replies[m]

    me = SimpleNamespace(client=SimpleNamespace(outstanding={"running"}, get_result=get_result))
    checked: set = set()
    ar = SimpleNamespace(msg_ids=["running", "unstored", "slow", "ok"])
    assert MPICluster._finished_error(me, ar, checked) == ""
    assert checked == {"ok"}            # the other three are looked at again
    ar.msg_ids.append("bad")
    assert "boom" in MPICluster._finished_error(me, ar, checked)
    assert "bad" in checked
