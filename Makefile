# tangentlab: set-up, tests and the reproduction.
#   make setup      create .venv, install torch first, then the package under a torch constraint,
#                   then import the heavy libraries once (which writes their bytecode)
#   make test       setup + ruff + the whole pytest suite (slow and model tests included): the
#                   model tier and the unit tier in two pytest processes side by side
#                   (scripts/test_tiers.py)
#   make test-unit  setup + the tests that train, measure or reproduce nothing, in one pytest-xdist
#                   worker per core (each on one thread)
#   make reproduce  setup + `tangentlab reproduce` (theory, synthetic, empirical, report)
#   make docs       setup + regenerate docs/theory, docs/cli.md, docs/claims.md and the shipped
#                   certificates' block of docs/validation.md, then build the site (with the API
#                   reference from the docstrings) into site/ with mkdocs, offline and strict

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,corpora,docs,zipf,dimension
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# a .pyc written once is read by every later process (see the set-up below)
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup test test-unit test-fast reproduce lint docs clean

setup: $(VENV)/.setup-stamp

# pip compiles every installed module to bytecode in one process; --no-compile skips that, and
# what is imported is compiled once, when first imported: PYTHONDONTWRITEBYTECODE is unexported
# above, so the first process to import a module writes its .pyc and every later one (each
# pipeline stage and rank is a fresh interpreter) reads it. The set-up's last step imports the
# heavy libraries once, so that the two test tiers do not both compile them at the same moment.
# Compiling all of site-packages up front (compileall -j 0, about 16,000 files) cost 36 s of
# set-up under load; one import of what the package uses compiles about 3,000 (about 10 s).
$(VENV)/.setup-stamp: pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile "$(TORCH_SPEC)"
	$(BIN)/python -c "from importlib.metadata import version; print('torch==' + version('torch'))" > $(VENV)/constraints.txt
	$(BIN)/python -m pip install --quiet --no-compile -c $(VENV)/constraints.txt -e ".[$(EXTRAS)]"
	$(BIN)/python -c "import torch, transformers, scipy.stats, sympy, pandas, matplotlib.pyplot, tangentlab.cli"
	@touch $@

lint: setup
	$(BIN)/ruff check .

test: setup
	$(BIN)/ruff check .
	$(BIN)/python scripts/test_tiers.py

test-unit: setup
	$(BIN)/python -m pytest -m "not slow and not model" -n auto

test-fast: test-unit

reproduce: setup
	$(BIN)/tangentlab reproduce $(ARGS)

docs: setup
	$(BIN)/python -m tangentlab.theory.pages docs/theory
	$(BIN)/python -m tangentlab.cli_reference docs/cli.md
	$(BIN)/python -m tangentlab.claims_reference docs/claims.md
	$(BIN)/python -m tangentlab.validate.certificate docs/validation.md
	$(BIN)/python -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis site
