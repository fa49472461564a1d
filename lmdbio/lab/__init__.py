"""The reproduction lab: everything that measures, models and explains the reader.

``lmdbio`` (the package above) is the reader library; this subpackage is the
rest of the reproduction and imports from the library, never the other way
round (``tests/test_imports.py`` checks it). Its dependencies come with
``pip install 'lmdbio[lab]'``.

=================  ============================================================
module             what it does
=================  ============================================================
bench              ``lmdbio bench``: one timed loop over every source, sweeps, tables
pfs                the emulated parallel file system (FUSE) and its storage model
storage            real storage settings: throttled and shared loop devices
model              the scale model: calibration, prediction, validation
claims             the papers' claims, judged in every setting
experiments        the notebooks' measurements over ipyparallel MPI engines
beyond             the measurements past the papers (shuffles, training, DALI)
plots, tables      figures and tables from committed results
scales             the notebooks' experiment sizes and result folders
notebook_runner    runs the notebooks (papermill) and replots their figures
lessons            the notebooks' prose checked against the results, their settings and demos
cluster            ipyparallel engines over MPI or Slurm
emulation          DLIO-style compute and gradient-allreduce emulation
testing            the option matrix and the local Slurm the tests use
paths              the lab's root (``LMDBIO_LAB_ROOT``, ``--root``, else the working directory)
pagecache, meta    page-cache eviction and residency; results' ``meta.json``
shuffle_quality    shuffle quality next to its cost (dali_shuffle: DALI's order, measured)
prov_offsets       the paper's arithmetic model of where PROV's values lie
=================  ============================================================
"""
