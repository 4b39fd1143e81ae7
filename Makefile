# The README's two commands: `make up` (install and run) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: up test install lint compiled uncompiled

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

# Optional: the per-record path's hot modules compiled by mypyc, each beside its source,
# which it then shadows (about a fifth of a decision's CPU; docs/benchmarks.md). Without
# them the same modules run as Python with the same output, byte for byte. Rebuild after
# editing one (a test fails while a compiled module is older than its source).
COMPILED := gateway/partitioner.py gateway/wire.py \
	gateway/core/canonical.py gateway/core/decision_records.py gateway/core/envelope.py \
	gateway/core/fingerprint.py gateway/core/holder.py gateway/core/idempotency.py \
	gateway/core/ids.py gateway/core/jobs.py gateway/core/limits.py gateway/core/matching.py \
	gateway/core/request.py gateway/core/retry.py gateway/core/states.py gateway/core/times.py \
	gateway/processor/dedup.py gateway/processor/due.py \
	gateway/processor/idempotency.py gateway/processor/ids.py \
	gateway/processor/kinds.py gateway/processor/loop.py gateway/processor/metrics.py \
	gateway/processor/records.py gateway/processor/schedule.py gateway/processor/store.py \
	gateway/processor/total.py gateway/processor/trail.py

compiled: install uncompiled
	$(BIN)/pip install --quiet 'setuptools>=77'
	$(BIN)/mypyc --follow-imports=silent $(COMPILED)
	touch $(COMPILED:.py=.cpython-*.so)  # mypyc copies a module it did not rebuild as it was

uncompiled:
	rm -f $(COMPILED:.py=.cpython-*.so) *__mypyc.cpython-*.so
