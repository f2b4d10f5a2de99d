# Switchboard: `make run` serves on http://127.0.0.1:8000; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint format typecheck schema bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/switchboard migrate
	$(BIN)/switchboard serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/switchboard export-schema --output $(VENV)/schema.check.graphql >/dev/null
	@cmp -s schema.graphql $(VENV)/schema.check.graphql || \
		(echo "schema.graphql is stale: run 'make schema' and commit it" && exit 1)
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: $(STAMP)
	$(BIN)/mypy

schema: $(STAMP)
	$(BIN)/switchboard export-schema

bench: $(STAMP)
	$(BIN)/python bench/api_throughput.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .hypothesis
