"""Slurm settings for the engines' job: the user's file and environment, and the launcher that uses them.

Settings live in ``~/.config/lmdbio/slurm.yaml`` (or ``$LMDBIO_SLURM_CONFIG``),
any of::

    account: myproject
    partition: batch
    time_limit: "00:30:00"
    qos: normal
    nodes: 2                             # spread the n engines over 2 nodes
    tasks_per_node: 36
    mpi: pmi2                            # srun --mpi=pmi2 (default); "pmix", or "mpiexec"
    options: ["--constraint=ssd"]        # extra #SBATCH lines
    setup: ["module load mpich"]         # shell lines before the engines start

or the environment: ``LMDBIO_SLURM_ACCOUNT``, ``LMDBIO_SLURM_PARTITION``,
``LMDBIO_SLURM_TIME``, ``LMDBIO_SLURM_QOS``, ``LMDBIO_SLURM_NODES``,
``LMDBIO_SLURM_TASKS_PER_NODE``, ``LMDBIO_SLURM_MPI`` (these win over the file).

Account, partition, time limit and QoS are ipyparallel's own Slurm launcher
options (it writes their ``#SBATCH`` lines); only what it has no option for
(one MPI world over the job's nodes, its layout, extra lines) is lmdbio's,
in the template of :class:`lmdbio.lab.cluster.launcher.MPISlurmEngineSetLauncher`.
"""

from __future__ import annotations

import os
from pathlib import Path

from lmdbio.errors import ConfigurationError

__all__ = ["SLURM_CONFIG", "SLURM_ENV", "slurm_settings", "slurm_config"]

SLURM_CONFIG = Path("~/.config/lmdbio/slurm.yaml")
#: Each setting and the environment variable that overrides it.
SLURM_ENV = {
    "account": "LMDBIO_SLURM_ACCOUNT",
    "partition": "LMDBIO_SLURM_PARTITION",
    "time_limit": "LMDBIO_SLURM_TIME",
    "qos": "LMDBIO_SLURM_QOS",
    "nodes": "LMDBIO_SLURM_NODES",
    "tasks_per_node": "LMDBIO_SLURM_TASKS_PER_NODE",
    "mpi": "LMDBIO_SLURM_MPI",
}
#: lmdbio's setting -> ipyparallel's SlurmLauncher option (ipyparallel writes the #SBATCH line).
IPP_OPTIONS = {"account": "account", "partition": "queue", "time_limit": "timelimit", "qos": "qos"}


def slurm_settings(config_file: str | os.PathLike | None = None,
                   env: dict | None = None) -> dict:
    """Slurm settings from the user's config file, overridden by ``LMDBIO_SLURM_*`` variables.

    Nothing is hard-coded: a key neither file nor environment sets is left to
    the site's defaults.

    Returns:
        a dict with any of ``account``, ``partition``, ``time_limit``, ``qos``,
        ``nodes``, ``tasks_per_node``, ``mpi`` (``srun --mpi`` type, or
        ``mpiexec``), ``options`` (list of extra ``#SBATCH`` arguments),
        ``setup`` (shell lines).
    """
    env = os.environ if env is None else env
    path = Path(config_file or env.get("LMDBIO_SLURM_CONFIG") or SLURM_CONFIG).expanduser()
    settings: dict = {}
    if path.exists():
        import yaml

        with open(path) as f:
            loaded = yaml.safe_load(f) or {}
        if not isinstance(loaded, dict):
            raise ConfigurationError(f"{path} must hold a YAML mapping (account: ..., partition: ...)")
        unknown = set(loaded) - {*SLURM_ENV, "options", "setup"}
        if unknown:
            raise ConfigurationError(
                f"{path}: unknown keys {sorted(unknown)}; use {', '.join(SLURM_ENV)}, options, setup")
        settings.update(loaded)
    for key, var in SLURM_ENV.items():
        if env.get(var):
            settings[key] = env[var]
    for key in ("nodes", "tasks_per_node"):
        if settings.get(key) is not None:
            try:
                settings[key] = int(settings[key])
            except (TypeError, ValueError):
                raise ConfigurationError(f"Slurm setting {key} must be a whole number, "
                                         f"got {settings[key]!r}") from None
    for key in ("options", "setup"):
        value = settings.get(key, [])
        settings[key] = [value] if isinstance(value, str) else list(value)
    return settings


def slurm_config(settings: dict, n: int | None = None):
    """traitlets Config for the Slurm launchers (engines and controller) from :func:`slurm_settings`.

    ``n``: the number of engines; ``nodes`` is capped at it (a 1-engine
    cluster, e.g. dataset making, fits on one node).
    """
    from traitlets.config import Config

    cfg = Config()
    for launcher in ("SlurmEngineSetLauncher", "SlurmControllerLauncher"):
        for key, option in IPP_OPTIONS.items():
            if settings.get(key):
                setattr(cfg[launcher], option, str(settings[key]))
    engines = cfg.MPISlurmEngineSetLauncher
    nodes = settings.get("nodes")
    if nodes:
        engines.nodes = min(nodes, n) if n else nodes
    if settings.get("tasks_per_node"):
        engines.tasks_per_node = settings["tasks_per_node"]
    engines.mpi = str(settings.get("mpi") or "pmi2")
    engines.sbatch_options = [str(o) for o in settings.get("options", [])]
    engines.setup = [str(line) for line in settings.get("setup", [])]
    return cfg
