# tangentlab: set-up, tests and the reproduction.
#   make setup      create .venv, install torch first, then the package under a torch constraint,
#                   then compile the bytecode on every core
#   make test       setup + ruff + the whole pytest suite (slow and model tests included): the
#                   model tier and the unit tier in two pytest processes side by side
#                   (scripts/test_tiers.py)
#   make test-unit  setup + the tests that train, measure or reproduce nothing, in one pytest-xdist
#                   worker per core (each on one thread)
#   make reproduce  setup + `tangentlab reproduce` (theory, synthetic, empirical, report)
#   make docs       setup + regenerate docs/theory, docs/cli.md and docs/claims.md, then build the site (with the
#                   API reference from the docstrings) into site/ with mkdocs, offline and strict

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,corpora,docs,zipf,dimension
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup test test-unit test-fast reproduce lint docs clean

setup: $(VENV)/.setup-stamp

# pip compiles every installed module to bytecode in one process; --no-compile, then compileall
# on every core, writes the same .pyc files in less wall time (2026-12-06, 2 cores under load:
# pip's compilation about 57 s, compileall -j 0 36 s). The one module that does not compile on
# Python 3.11 (torch's Python 3.12 test file) is left out, as pip leaves it; any other failure is
# printed and the set-up goes on (a module without .pyc compiles when first imported).
$(VENV)/.setup-stamp: pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile "$(TORCH_SPEC)"
	$(BIN)/python -c "from importlib.metadata import version; print('torch==' + version('torch'))" > $(VENV)/constraints.txt
	$(BIN)/python -m pip install --quiet --no-compile -c $(VENV)/constraints.txt -e ".[$(EXTRAS)]"
	$(BIN)/python -m compileall -q -j 0 -x 'py312_intrinsics\.py$$' "$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")" || echo "make setup: compileall reported the errors above; those modules compile on import"
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
	$(BIN)/python -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis site
