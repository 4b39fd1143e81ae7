# The README's two commands: `make up` (install and run) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: up test install lint

$(BIN)/gateway: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $@

install: $(BIN)/gateway

# Flags for `gateway up`, e.g. make up ARGS="--http-port 8081 --port 9093".
ARGS ?=

up: install
	$(BIN)/gateway up $(ARGS)

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check gateway tests
	$(BIN)/mypy gateway tests
