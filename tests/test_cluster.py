"""lmdbio.cluster: Slurm settings without Slurm; a real local cluster of MPI engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmdbio import cluster as C
from lmdbio import experiments as E
from lmdbio.errors import ConfigurationError


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


def test_slurm_config_fills_launchers():
    cfg = C._slurm_config({"account": "p", "partition": "q", "time_limit": "01:00:00",
                           "options": [], "setup": []})
    assert cfg.SlurmEngineSetLauncher.account == "p"
    assert cfg.SlurmEngineSetLauncher.queue == "q"
    assert cfg.SlurmControllerLauncher.timelimit == "01:00:00"


def test_slurm_config_template_with_setup_lines():
    cfg = C._slurm_config({"account": "p", "options": ["--constraint=ssd"],
                           "setup": ["source ~/venv/bin/activate"]})
    t = cfg.SlurmEngineSetLauncher.batch_template
    assert "#SBATCH --account=p" in t and "#SBATCH --constraint=ssd" in t
    assert t.index("source ~/venv/bin/activate") < t.index("srun {program_and_args}")
    assert "{n}" in t


@pytest.mark.parametrize("kw", [dict(n=0), dict(n=2, engines="pbs"), dict(n=2, controller="k8s")])
def test_bad_arguments(kw):
    with pytest.raises(ValueError):
        C.MPICluster(**kw)


def test_run_needs_a_started_cluster():
    with pytest.raises(C.LmdbioError, match="not running"):
        C.MPICluster(n=2).run(E.engine_info, 1)


# --- a real cluster of 2 MPI engines ---------------------------------------------------------------
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
def test_subcommunicators(cl):
    assert cl.run(_size_and_rank, 2) == [(2, 0), (2, 1)]
    assert cl.run(_size_and_rank, 1) == [(1, 0)]
    assert cl.run(_allgather_rank) == [[0, 1], [0, 1]]
    with pytest.raises(ValueError, match="nprocs"):
        cl.run(_size_and_rank, 3)


@pytest.mark.mpi
def test_engine_info_and_shared_memory(cl):
    info = cl.run(E.engine_info, 2)
    assert [i["rank"] for i in info] == [0, 1]
    assert all(i["size"] == 2 for i in info)
    shm = cl.run(E.check_shared_memory, 2)
    assert all(s["all_slices_visible"] for s in shm)
    assert {s["node_size"] for s in shm} == {2}


@pytest.mark.mpi
def test_failure_on_every_rank_is_raised(cl):
    with pytest.raises(C.EngineFailure, match="boom"):
        cl.run(_raise_on_all, 2)
    assert cl.run(_size_and_rank, 2) == [(2, 0), (2, 1)]  # still usable


@pytest.mark.mpi
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


@pytest.mark.mpi
def test_hung_ranks_stop_the_cluster():
    # Last: it ends its own cluster (the others wait in a barrier forever).
    with C.MPICluster(n=2, work_dir=HERE) as c:
        c.failure_grace = 2.0
        with pytest.raises(C.EngineFailure, match="rank 0 failed"):
            c.run(_raise_on_rank0_others_wait, 2)
        assert c.view is None
