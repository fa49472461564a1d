"""A calibrated scale model of the seven variants, from 1 to thousands of processes.

``lmdbio model calibrate`` measures this machine's CPU-side costs;
``lmdbio model validate`` predicts measured sweeps it was not fitted to;
``lmdbio model predict --platform bebop`` predicts a cluster from a platform
file (``lmdbio/lab/platforms/*.toml``). The per-iteration time of a variant is
split into locate, read, distribute, wait, compute and communicate; each
mechanism is a small function in :mod:`lmdbio.lab.model.mechanisms` naming the
paper problem it models, and storage time comes from the storage model of
:mod:`lmdbio.lab.pfs.model`, driven with the requests each variant issues.
"""

from .calibrate import Calibration, load_calibration, run_calibration, save_calibration
from .platform import Platform, Workload, list_platforms, load_platform
from .output import write_predictions
from .predict import PHASES, predict, predict_point

__all__ = ["Calibration", "load_calibration", "run_calibration", "save_calibration",
           "Platform", "Workload", "list_platforms", "load_platform",
           "PHASES", "predict", "predict_point", "write_predictions"]
