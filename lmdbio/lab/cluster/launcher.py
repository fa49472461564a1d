"""ipyparallel's Slurm engine launcher, started as one MPI world (this module imports ipyparallel)."""

from __future__ import annotations

from ipyparallel.cluster.launcher import SlurmEngineSetLauncher
from traitlets import Integer, List, Unicode, default

from .engines import mpiexec

__all__ = ["MPISlurmEngineSetLauncher"]


def _esc(text) -> str:
    """Text for an ipyparallel template (``{`` and ``}`` are its placeholders)."""
    return str(text).replace("{", "{{").replace("}", "}}")


class MPISlurmEngineSetLauncher(SlurmEngineSetLauncher):
    """ipyparallel's Slurm engine set, started as one MPI world over the job's nodes.

    ipyparallel's own script runs plain ``srun``, whose tasks do not share
    one ``COMM_WORLD``; here ``srun --mpi=<type> --distribution=block`` (PMI,
    default ``pmi2``) or ``mpiexec`` inside the allocation starts the ``{n}``
    engines. The template is this launcher's default template, so ipyparallel
    still adds ``--output``, the partition, account, QoS and time limit from
    its own options (``queue``, ``account``, ``qos``, ``timelimit``).
    """

    nodes = Integer(0, config=True, help="#SBATCH --nodes (0: Slurm's choice)")
    tasks_per_node = Integer(0, config=True, help="#SBATCH --ntasks-per-node (0: Slurm's choice)")
    mpi = Unicode("pmi2", config=True, help="srun --mpi type, or 'mpiexec' inside the allocation")
    sbatch_options = List(Unicode(), config=True, help="extra #SBATCH arguments")
    setup = List(Unicode(), config=True, help="shell lines before the engines start")

    @default("default_template")
    def _mpi_template(self) -> str:
        # --ntasks is written here: ipyparallel's test for it also matches --ntasks-per-node.
        lines = ["#!/bin/sh", "#SBATCH --export=ALL", "#SBATCH --job-name=lmdbio-engines-{cluster_id}",
                 "#SBATCH --ntasks={n}"]
        if self.nodes:
            lines.append(f"#SBATCH --nodes={self.nodes}")
        if self.tasks_per_node:
            lines.append(f"#SBATCH --ntasks-per-node={self.tasks_per_node}")
        lines += [f"#SBATCH {_esc(o)}" for o in self.sbatch_options]
        lines += [_esc(line) for line in self.setup]
        if self.mpi == "mpiexec":
            lines.append(f"{_esc(mpiexec())} -n {{n}} {{program_and_args}}")
        else:
            # block distribution: ranks of a node are consecutive (lmdbio.topology needs it)
            lines.append(f"srun --mpi={_esc(self.mpi)} --distribution=block {{program_and_args}}")
        return "\n".join(lines) + "\n"
