# The two commands a user needs: `make reproduce` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DATA   := data/datasets
LMDBIO := $(BIN)/lmdbio

SCALE   ?= default
CLUSTER ?= mpi
SLURM_DIR ?= build/slurm

.PHONY: venv lock lint test check test-all coverage test-matrix test-slurm test-torch fuzz reproduce datasets notebooks figures strip lab bench bench-issue6 bench-issue15 bench-pfs bench-throttle bench-faulters bench-shared \
	cluster-up cluster-down clean help

help:
	@echo "make reproduce  - venv, datasets, experiments, notebooks, figures (the main job)"
	@echo "                  SCALE=tiny|default|large CLUSTER=mpi|slurm (default: default, mpi)"
	@echo "make test       - the fast tier: units, real MPI at P <= 4, one notebook, fuzz smoke (minutes)"
	@echo "make check      - the full gate CI runs: make test plus P = 3/16/64, timeouts, every notebook,"
	@echo "                  solutions, FUSE, throttled and shared devices, Slurm, the fuzz campaign"
	@echo "make lint       - ruff over lmdbio/, tests/, benchmarks/ and mypy over the library (make check runs it)"
	@echo "make test-all   - make check plus the long tier: real torch, the real calibration,"
	@echo "                  the whole option matrix and the long fuzz campaign"
	@echo "make coverage   - make check under coverage (MPI ranks and notebook kernels included);"
	@echo "                  prints the library's line and branch coverage (lmdbio/ without lmdbio/lab/)"
	@echo "make test-matrix - every combination of Reader options against py-lmdb (about 25 min);"
	@echo "                  writes data/results/option_matrix/summary.csv"
	@echo "make venv       - create/update .venv: pyproject.toml's [dev] extra, pinned by constraints.txt"
	@echo "make lock       - rewrite constraints.txt from the current .venv"
	@echo "make test-slurm - only the tests on a local 2-node Slurm (pytest -m slurm)"
	@echo "make test-torch - the PyTorch adapter; installs torch's CPU wheel into ~/.cache/lmdbio/torch-cpu"
	@echo "make fuzz       - the long fuzz campaign over damaged data.mdb files"
	@echo "make cluster-up / cluster-down - a 2-node Slurm on this host, to try CLUSTER=slurm by hand"
	@echo "make datasets   - the default datasets under $(DATA)/"
	@echo "make figures    - replot every figure and the claims table from committed results (no MPI, no FUSE)"
	@echo "make strip      - nbstripout on notebooks/*.ipynb before committing (a test checks it)"
	@echo "make lab        - JupyterLab on notebooks/"
	@echo "make bench      - a quick lmdbio bench sweep (prints a table)"
	@echo "make bench-issue6 - the full variants x P=1,4,16 x warm/cold sweep (13-29 min measured)"
	@echo "make bench-issue15 - raw limit vs best/direct/auto/lmdb-get, warm and cold (about 4 min)"
	@echo "make bench-pfs  - the cold sweep through the emulated GPFS (about 14 min)"
	@echo "make bench-throttle - the cold sweep through throttled loop devices (root; about 15 min)"
	@echo "make bench-faulters - K = 1..16 processes faulting one cold file on a throttled device (root; about 1 min)"
	@echo "make bench-shared - the cold sweep on one shared throttled target, P = 4, 16, two time scales (root; about 30 min)"

# Debian packages the emulated PFS (fuse3) and the dump tests (lmdb-utils) use; the Slurm
# packages are installed by lmdbio.lab.testing.slurm when its tests first run.
SYSTEM_PACKAGES := fuse3 lmdb-utils

$(STAMP): pyproject.toml constraints.txt
	@if ! command -v fusermount3 >/dev/null || ! command -v mdb_dump >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SYSTEM_PACKAGES) >/dev/null 2>&1 || \
			{ apt-get update -q >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SYSTEM_PACKAGES) >/dev/null; } || \
			echo "make venv: could not install $(SYSTEM_PACKAGES); the FUSE tests will fail or skip"; \
		else echo "make venv: for the emulated PFS run as root: apt-get install -y $(SYSTEM_PACKAGES)"; fi; \
	fi
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# The exact versions of the current .venv become the reproduction's pins.
lock: venv
	@{ sed -n '1,3p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable | grep -v '^lmdbio'; } \
		> constraints.txt.new && mv constraints.txt.new constraints.txt

# Three tiers, by marker (pyproject.toml; each test is in exactly one): `make test` runs the
# tests marked neither `gate` nor `long`, `make check` adds `gate` (CI runs it), `make test-all`
# adds `long`. Each writes its slowest tests and the idle CPU share to build/test-durations.txt.
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider --durations-file build/test-durations.txt
test: venv
	$(PYTEST) -m "not gate and not long" tests

check: venv lint
	$(PYTEST) -m "not long" tests

# ruff (pyflakes, bugbear, pyupgrade, private imports; pyproject.toml [tool.ruff]) over the tree
# and mypy over the library (lmdbio/ without lmdbio/lab/; [tool.mypy]).
# No `ruff format`: its one-argument-a-line wrapping would lengthen 32 functions past the
# 80-line limit and 9 modules past 500 lines (tests/test_limits.py); the size limits win.
LINTED := lmdbio tests benchmarks
lint: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/mypy

test-all: venv
	$(PYTEST) tests
	LMDBIO_FUZZ_CASES=20000 $(BIN)/python -m pytest -p no:cacheprovider tests/test_fuzz.py -k campaign
	$(BIN)/python -m lmdbio.lab.testing.matrix full --out build/option_matrix

# make check under coverage: every Python process the tests start (MPI ranks, notebook kernels,
# ipyparallel engines) measures itself (COVERAGE_PROCESS_START; coverage's .pth file).
# The folder is world-writable: some tests run lmdbio as another user (uid 65534).
COVERAGE_DIR := $(abspath build/coverage)
coverage: venv
	@rm -rf $(COVERAGE_DIR) && mkdir -p $(COVERAGE_DIR) && chmod 1777 $(COVERAGE_DIR)
	@printf '[run]\nbranch = True\nparallel = True\nsource = $(CURDIR)/lmdbio\nomit = $(CURDIR)/lmdbio/lab/*\ndata_file = $(COVERAGE_DIR)/.coverage\n' > $(COVERAGE_DIR)/coveragerc
	@status=0; COVERAGE_PROCESS_START=$(COVERAGE_DIR)/coveragerc $(PYTEST) -m "not long" tests || status=$$?; \
	cd $(COVERAGE_DIR) && $(abspath $(BIN))/python -m coverage combine --rcfile=coveragerc -q . && \
		$(abspath $(BIN))/python -m coverage json --rcfile=coveragerc -q -o coverage.json && \
		$(abspath $(BIN))/python $(CURDIR)/tests/coverage_totals.py coverage.json; exit $$status

# The differential option matrix's whole cross product (lmdbio.lab.testing.matrix; make test runs
# its all-pairs sample, make check a random one too). Fails if any combination does.
test-matrix: venv
	$(BIN)/python -m lmdbio.lab.testing.matrix full --out data/results/option_matrix

# Default datasets; the experiments and notebooks read them from $(DATA)/.
$(DATA)/cifar10/data.mdb: | venv
	$(LMDBIO) make-dataset --preset cifar10 --records 60000 --out $(DATA)/cifar10 --force
$(DATA)/imagenet/data.mdb: | venv
	$(LMDBIO) make-dataset --preset imagenet --records 2000 --out $(DATA)/imagenet --force

datasets: $(DATA)/cifar10/data.mdb $(DATA)/imagenet/data.mdb

# Every notebook in order at the default scale on local MPI engines: --committed writes the
# results to data/results/ and the figures to figures/ (without it a notebook writes
# build/scratch/NN/); executed copies to build/.
# Then the claims C1-C8 are judged from every results file: data/results/claims.csv and the
# table in figures/README.md.
reproduce: venv datasets
	$(LMDBIO) model calibrate --out data/results/model_calibration --quiet
	$(LMDBIO) model predict --platform bebop --out data/results/model_prediction
	$(LMDBIO) model absolute --platform bebop --out data/results/model_prediction/absolute.csv
	$(BIN)/python -m lmdbio.lab.notebook_runner --scale $(SCALE) --cluster $(CLUSTER) --model-ready --committed --out build/notebooks
	$(BIN)/python -m lmdbio.lab.claims

# Replot every figure from the committed results (RUN=False), no MPI; first every NN_name/shared/
# from the bench-shared sweep in data/results/shared/ (lmdbio.lab.claims.shared_results).
figures: venv
	$(BIN)/python -m lmdbio.lab.claims --shared-only
	$(BIN)/python -m lmdbio.lab.notebook_runner --replot --committed --jobs 2 --out build/figures-notebooks
	$(BIN)/python -m lmdbio.lab.claims

# The notebooks are the source, committed stripped (nbstripout, with lmdbio's settings):
# run this before committing an edited one.
strip: venv
	$(BIN)/python -m lmdbio.lab.notebook_runner --strip

lab: venv
	$(BIN)/jupyter lab notebooks/

bench: venv $(DATA)/cifar10/data.mdb
	$(LMDBIO) bench --dataset $(DATA)/cifar10 --variants lmdb,lmdbio-lmm-dio,lmdbio-lmm-dio-prov-coal \
		--procs 1,4,16 --cache warm,cold --iters 200 --out build/bench-quick
	$(LMDBIO) bench --report build/bench-quick

bench-issue6: venv
	benchmarks/run_issue6.sh

bench-issue15: venv
	benchmarks/run_issue15.sh

bench-pfs: venv
	benchmarks/run_pfs_sweep.sh

# Throttled real block devices (lmdbio.lab.storage; root, loop devices, blkio/io cgroups).
bench-throttle: venv
	benchmarks/run_throttle_sweep.sh

bench-faulters: venv
	$(BIN)/python -m lmdbio.lab.storage faulters --out data/results/throttled

# One shared storage target S (one blkio/io budget), a direct-I/O loop device per virtual node.
bench-shared: venv
	benchmarks/run_shared_sweep.sh

# Issue 19: DM's speculative reads on and off (emulated GPFS, about 4 min) and the
# time-dilated emulated GPFS at P = 4, 16, 64 (k = 1, 4, 16; about 90 min on 2 cores).
.PHONY: bench-dm bench-dilated
bench-dm: venv datasets
	$(BIN)/python benchmarks/bench_dm_speculation.py --procs 4 --batches 100 --repeats 3

bench-dilated: venv datasets
	benchmarks/run_dilated_sweep.sh

test-slurm: venv
	$(BIN)/python -m pytest -m slurm tests

# PyTorch is no part of .venv: the test installs the CPU wheel into ~/.cache/lmdbio/torch-cpu.
test-torch: venv
	$(BIN)/python -m pytest -p no:cacheprovider -m torch -rs tests

fuzz: venv
	LMDBIO_FUZZ_CASES=20000 $(BIN)/python -m pytest -p no:cacheprovider tests/test_fuzz.py -k campaign

# A 2-node Slurm on this host (root: installs slurm-wlm and munge if missing).
# Then: export SLURM_CONF=$$PWD/$(SLURM_DIR)/slurm.conf; make reproduce CLUSTER=slurm SCALE=tiny
cluster-up: venv
	$(BIN)/python -m lmdbio.lab.testing.slurm up --dir $(SLURM_DIR)

cluster-down: venv
	$(BIN)/python -m lmdbio.lab.testing.slurm down --dir $(SLURM_DIR)

clean:
	rm -rf build .pytest_cache
