# The two commands a user needs: `make reproduce` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DATA   := data/datasets
LMDBIO := $(BIN)/lmdbio

.PHONY: venv test reproduce datasets notebooks figures lab bench bench-issue6 clean help

help:
	@echo "make reproduce  - venv, datasets, experiments, notebooks, figures (the main job)"
	@echo "make test       - venv and the whole test suite"
	@echo "make venv       - create/update .venv from pyproject.toml"
	@echo "make datasets   - the default datasets under $(DATA)/"
	@echo "make figures    - replot every figure from committed results (no MPI)"
	@echo "make lab        - JupyterLab on notebooks/"
	@echo "make bench      - a quick lmdbio bench sweep (prints a table)"
	@echo "make bench-issue6 - the full variants x P=1,4,16 x warm/cold sweep (about 15 min)"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

test: venv
	$(BIN)/python -m pytest tests

# Default datasets; the experiments and notebooks read them from $(DATA)/.
$(DATA)/cifar10/data.mdb: | venv
	$(LMDBIO) make-dataset --preset cifar10 --records 60000 --out $(DATA)/cifar10 --force
$(DATA)/imagenet/data.mdb: | venv
	$(LMDBIO) make-dataset --preset imagenet --records 2000 --out $(DATA)/imagenet --force

datasets: $(DATA)/cifar10/data.mdb $(DATA)/imagenet/data.mdb

# Every notebook in order at the default scale on local MPI engines:
# results to data/results/, figures to figures/, executed copies to build/.
reproduce: venv datasets
	$(BIN)/python -m lmdbio.notebook_runner --scale default --out build/notebooks

# Replot every figure from the committed results (RUN=False), no MPI.
figures: venv
	$(BIN)/python -m lmdbio.notebook_runner --replot --out build/figures-notebooks

lab: venv
	$(BIN)/jupyter lab notebooks/

bench: venv $(DATA)/cifar10/data.mdb
	$(LMDBIO) bench --dataset $(DATA)/cifar10 --variants lmdb,lmdbio-lmm-dio,lmdbio-lmm-dio-prov-coal \
		--procs 1,4,16 --cache warm,cold --iters 200 --out build/bench-quick
	$(LMDBIO) bench --report build/bench-quick

bench-issue6: venv
	benchmarks/run_issue6.sh

clean:
	rm -rf build .pytest_cache
