# The two commands: `make run` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Test processes (pytest-xdist; each test file runs whole in one of them). 2 on this project's 2-core
# machine: the suite takes about 7.5 min instead of 12 (docs/contributing.md).
TEST_WORKERS ?= 2

.PHONY: run test bench docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gpucast demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

bench: $(STAMP)
	$(BIN)/python benchmarks/capture_speed.py

# The documentation site, offline, into site/ (mkdocs.yml; --strict: a broken link or page fails).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV)
