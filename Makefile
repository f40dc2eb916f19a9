# The two commands: `make run` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Test processes (pytest-xdist; each test file runs whole in one of them). 2 on this project's 2-core
# machine (docs/contributing.md).
TEST_WORKERS ?= 2

.PHONY: run test test-slow bench docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gpucast demo

# `make test`: everything but the end-to-end runs marked slow (real gpucast processes, a live Slurm, Ray,
# whole simulations), minutes on this project's 2-core machine; `make test-slow` runs those; CI runs both.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/capture_speed.py

# The documentation site, offline, into site/ (mkdocs.yml; --strict: a broken link or page fails).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV)
