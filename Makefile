# The two commands a user needs: `make reproduce` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DATA   := data/datasets
LMDBIO := $(BIN)/lmdbio

.PHONY: venv test reproduce datasets experiments notebooks figures lab clean help

help:
	@echo "make reproduce  - venv, datasets, experiments, notebooks, figures (the main job)"
	@echo "make test       - venv and the whole test suite"
	@echo "make venv       - create/update .venv from pyproject.toml"
	@echo "make datasets   - the default datasets under $(DATA)/"
	@echo "make figures    - replot every figure from committed results (no MPI)"
	@echo "make lab        - JupyterLab on notebooks/"

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
$(DATA)/imagenet-jpeg/data.mdb: | venv
	$(LMDBIO) make-dataset --preset imagenet --encoded --records 2000 --out $(DATA)/imagenet-jpeg --force

datasets: $(DATA)/cifar10/data.mdb $(DATA)/imagenet/data.mdb $(DATA)/imagenet-jpeg/data.mdb

reproduce: venv datasets
	@echo "reproduce: datasets are in $(DATA)/"

lab: venv
	$(BIN)/jupyter lab notebooks/

clean:
	rm -rf build .pytest_cache
