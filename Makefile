# The README's two commands: `make up` (install and run) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: up test install lint compiled uncompiled

# pip says each package it fetches, and on a terminal shows its downloads and installs
# (a first install takes a minute or two).
$(BIN)/gateway: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e '.[dev,bench]'
	touch $@

install: $(BIN)/gateway $(VENV)/compiled

# Flags for `gateway up`, e.g. make up ARGS="--http-port 8081 --port 9093".
ARGS ?=

up: install
	$(BIN)/gateway up $(ARGS)

# The linters first (seconds), then every test.
test: install lint
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check gateway tests
	$(BIN)/ruff format --check gateway tests
	$(BIN)/mypy gateway tests

# The per-record path's hot modules compiled by mypyc beside their sources, which they
# shadow (gateway/compiled.py; about a quarter of a decision's CPU, docs/benchmarks.md):
# rebuilt whenever a source changes. `make uncompiled` goes back to the sources alone.
$(VENV)/compiled: $(BIN)/gateway $(wildcard gateway/*.py gateway/core/*.py gateway/core/dialects/*.py gateway/processor/*.py gateway/stage/*.py)
	$(BIN)/python gateway/compiled.py
	touch $@

compiled: $(VENV)/compiled

uncompiled:
	$(BIN)/python gateway/compiled.py --remove
	rm -f $(VENV)/compiled
