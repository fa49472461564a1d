"""A real 2-node Slurm on this host: engines over Slurm+MPI, every variant, one notebook, clean teardown.

``pytest -m slurm`` runs these alone. They need root (to install and run
slurm-wlm and munge) or an installed Slurm; elsewhere they skip, saying why.
The tests share one mini-cluster and run in file order; the last one tears
it down and checks that nothing is left.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

import lmdbio
from lmdbio.lab import cluster as C
from lmdbio.lab.procs import pid_alive
from lmdbio.lab.testing.slurm import MiniSlurm, available, processes_using

pytestmark = [pytest.mark.slurm, pytest.mark.gate]
HERE = Path(__file__).resolve().parent
NODES, PER_NODE = 2, 2


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    ok, why = available()
    if not ok:
        pytest.skip(f"no local Slurm: {why}")
    s = MiniSlurm(tmp_path_factory.mktemp("slurm"), nodes=NODES)
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def slurm_env(slurm, tmp_path_factory):
    """SLURM_CONF and a Slurm config file for MPICluster (2 nodes x 2 tasks)."""
    cfg = tmp_path_factory.mktemp("slurmcfg") / "slurm.yaml"
    cfg.write_text(f"nodes: {NODES}\ntasks_per_node: {PER_NODE}\ntime_limit: \"00:10:00\"\n"
                   "partition: debug\n")
    old = {k: os.environ.get(k) for k in ("SLURM_CONF", "LMDBIO_SLURM_CONFIG")}
    os.environ.update(SLURM_CONF=str(slurm.conf), LMDBIO_SLURM_CONFIG=str(cfg))
    try:
        yield cfg
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_mini_cluster_has_two_idle_nodes(slurm):
    assert slurm.sinfo() == {"n1": "idle", "n2": "idle"}
    assert slurm.jobs() == []


def _epoch(comm, path: str, variant: str, batch_size: int, iters: int) -> dict:
    """Engine side: ``iters`` batches on real nodes; this rank's (index, sha1) and its node layout."""
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    layout = (node.Get_size(), node.allreduce(comm.Get_rank(), op=MPI.MIN))
    node.Free()
    got = []
    with lmdbio.Reader(path, batch_size, comm, variant) as r:   # ranks_per_node=None: real nodes
        nodes = r.topology.nodes if r.topology else None
        for _ in range(iters):
            b = r.read_batch()
            got.append([(int(i), hashlib.sha1(bytes(v)).hexdigest()) for i, v in zip(b.indices, b)])
        slurm_node = os.environ.get("SLURMD_NODENAME")
    return {"batches": got, "node_size": layout[0], "node_leader": layout[1], "nodes": nodes,
            "slurm_node": slurm_node, "on_error": os.environ.get("LMDBIO_ON_ERROR")}


def _local_epoch(path, variant: str, batch_size: int, iters: int) -> list[list[tuple]]:
    from mpi4py import MPI

    out = []
    with lmdbio.Reader(path, batch_size, MPI.COMM_SELF, variant) as r:
        for _ in range(iters):
            b = r.read_batch()
            out.append([(int(i), hashlib.sha1(bytes(v)).hexdigest()) for i, v in zip(b.indices, b)])
    return out


@pytest.fixture(scope="module")
def engines(slurm_env):
    with C.MPICluster(n=NODES * PER_NODE, engines="slurm", work_dir=HERE, timeout=90) as c:
        c.failure_grace = 5.0
        yield c


@pytest.fixture(scope="module")
def db(engines, tmp_path_factory) -> Path:
    from lmdbio.lab.experiments import ensure_datasets

    path = tmp_path_factory.mktemp("slurmdb") / "cifar10"
    ensure_datasets(engines, [dict(path=str(path), preset="cifar10", records=300, commit_every=70)])
    return path


def test_engines_are_one_mpi_job_over_two_nodes(engines, slurm, db):
    assert len(slurm.jobs()) == 1
    info = engines.run(_epoch, None, str(db), "lmdb", 8, 1)
    assert [i["slurm_node"] for i in info] == ["n1", "n1", "n2", "n2"]
    assert [i["node_size"] for i in info] == [PER_NODE] * 4
    assert [i["node_leader"] for i in info] == [0, 0, 2, 2]
    assert {i["on_error"] for i in info} == {"raise"}


@pytest.mark.parametrize("variant", lmdbio.VARIANTS)
def test_every_variant_across_two_nodes_matches_a_local_run(engines, db, variant):
    path = db
    batch, iters = 32, 10  # 320 records: one epoch of 300 and the wrap
    ranks = engines.run(_epoch, None, str(path), variant, batch, iters)
    if lmdbio.parse_variant(variant).localized:
        assert {r["nodes"] for r in ranks} == {NODES}, "the Reader did not see Slurm's 2 nodes"
    across = [[rec for r in ranks for rec in r["batches"][t]] for t in range(iters)]
    assert across == _local_epoch(path, variant, batch, iters)


def test_a_failing_cell_leaves_the_engines_usable(engines):
    with pytest.raises(C.EngineFailure, match="boom"):
        engines.run(_raise_on_all)
    assert engines.run(_rank) == [0, 1, 2, 3]


def _raise_on_all(comm):
    raise ValueError(f"boom on {comm.Get_rank()}")


def _rank(comm):
    return comm.Get_rank()


def test_a_job_without_one_mpi_world_is_refused_and_cancelled(slurm, slurm_env, engines, tmp_path):
    """srun --mpi=none gives each engine its own COMM_WORLD: start() says so and ends the job."""
    cfg = tmp_path / "nompi.yaml"
    cfg.write_text(slurm_env.read_text() + "mpi: none\n")
    before = set(slurm.jobs())
    c = C.MPICluster(n=2, engines="slurm", slurm_config=cfg, work_dir=HERE, timeout=60)
    with pytest.raises(lmdbio.LmdbioError, match="do not share one MPI COMM_WORLD"):
        c.start()
    assert c.cluster is None
    import time

    deadline = time.monotonic() + 30   # scancel is asynchronous; a bound, not a timing assert
    while set(slurm.jobs()) - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert set(slurm.jobs()) - before == set()


@pytest.mark.notebooks
def test_notebook_03_on_slurm_at_tiny_scale(slurm, slurm_env, engines, tmp_path):
    from lmdbio.lab.notebook_runner import run_notebooks

    engines.stop()   # the notebook starts its own cluster (one job at a time on 2 nodes)
    log = slurm.root / "log" / "slurmctld.log"
    jobs_before = set(_started_jobs(log.read_text()))
    done = run_notebooks("tiny", tmp_path / "out", only=["03"], cluster="slurm",
                         results_root=tmp_path / "results", figures_root=tmp_path / "figures",
                         datasets_root=tmp_path / "datasets")
    assert [d["ok"] for d in done] == [True]
    import json

    meta = json.loads(next((tmp_path / "results").rglob("meta.json")).read_text())
    assert meta["config"]["scale"] == "tiny"
    from test_notebooks import engine_noise

    assert engine_noise(tmp_path / "out" / "03_lmm.ipynb") == []
    assert not list((HERE.parent / "notebooks").glob("*.sbatch")), "a batch script was left behind"
    # One cluster for the whole notebook (the runner's, lmdbio.lab.cluster.shared): every setting
    # it measures (local disk, the emulated GPFS, the throttled device) attached to that one
    # Slurm job on both nodes.
    new = {j: nodes for j, nodes in _started_jobs(log.read_text()).items() if j not in jobs_before}
    assert len(new) == 1, new
    assert set(new.values()) == {"n[1-2]"}, new


def _started_jobs(log_text: str) -> dict[str, str]:
    """{job id: node list} of every job slurmctld started, by the main scheduler or by backfill."""
    import re

    found = re.findall(r"Allocate JobId=(\d+) NodeList=(\S+)|Started JobId=(\d+) in \S+ on (\S+)", log_text)
    return {a or c: b or d for a, b, c, d in found}


def test_teardown_leaves_nothing(slurm):
    """Last: stop the cluster; no daemon, job step or job process is left."""
    pids = dict(slurm.pids)
    conf = slurm.conf
    slurm.stop()
    left = [name for name, pid in pids.items() if pid_alive(pid)]
    assert left == [], f"still running after stop: {left}"
    assert processes_using(f"SLURM_CONF={conf}") == []
    assert not (slurm.root / "pids.json").exists()

