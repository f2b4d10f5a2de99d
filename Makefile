# Switchboard: `make run` serves on http://127.0.0.1:8000; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

# Every environment (make run, make test, CI, docker/Dockerfile) installs the exact versions
# and hashes of the lock files; pyproject.toml keeps the ranges library users install with.
# requirements.lock: what serving needs; requirements-dev.lock: that plus the dev extras, at
# the same versions. `make lock` regenerates both from pyproject.toml.
LOCK := requirements.lock
DEV_LOCK := requirements-dev.lock
# The venv holds the serving packages (make run), or those and the dev extras (make test);
# a stamp older than its lock (or pyproject.toml) installs again.
SERVE_STAMP := $(VENV)/.serving
STAMP := $(VENV)/.installed
# pytest-xdist workers for `make test` (auto: one per core; 0 runs in one process).
TEST_WORKERS ?= auto
# uv creates the venv, installs the locks and writes them: it lives in a venv of its own,
# never in the project's (pip with the same locks gives the same packages, only slower:
# docker/Dockerfile uses pip).
UV_VERSION := 0.13.9
TOOLS := .uv
UV := $(TOOLS)/bin/uv
# Only the Python given (no interpreter downloads); quiet unless something fails.
export UV_PYTHON_DOWNLOADS := never
# Installed packages are compiled to bytecode once, at install: where the environment sets
# PYTHONDONTWRITEBYTECODE, every process (each worker, server and CLI the suite starts) would
# otherwise compile every module it imports, again, at each start.
export UV_COMPILE_BYTECODE := 1
IN_VENV := --quiet --python $(BIN)/python
# Extra flags for `make lock`: `LOCK_FLAGS=--upgrade` (or `--upgrade-package NAME`) moves
# pins to the newest releases pyproject.toml allows; without, existing pins are kept.
LOCK_FLAGS ?=
UV_COMPILE := $(UV) pip compile pyproject.toml --quiet --universal --python-version 3.11 \
	--generate-hashes --custom-compile-command "make lock" $(LOCK_FLAGS)

.PHONY: run test lint format typecheck schema bench lock clean

# The venv (with pip, for optional extras) once; then exactly the lock's versions and hashes,
# the project itself (editable, its dependencies are all in the lock), and a check that the
# lock holds everything pyproject.toml asks for.
define install_lock
	test -x $(BIN)/python || $(UV) venv --quiet --seed --python $(PYTHON) $(VENV)
	$(UV) pip install $(IN_VENV) --require-hashes -r $(1)
	$(UV) pip install $(IN_VENV) --no-deps -e .
	$(UV) pip check $(IN_VENV)
endef

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"

$(SERVE_STAMP): $(LOCK) pyproject.toml | $(UV)
	$(call install_lock,$(LOCK))
	touch $@

# The dev lock pins every serving package at the serving lock's version: it serves too.
$(STAMP): $(DEV_LOCK) pyproject.toml | $(UV)
	$(call install_lock,$(DEV_LOCK))
	touch $@ $(SERVE_STAMP)

run: $(SERVE_STAMP)
	$(BIN)/switchboard migrate
	$(BIN)/switchboard serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/switchboard export-schema --output $(VENV)/schema.check.graphql >/dev/null
	@cmp -s schema.graphql $(VENV)/schema.check.graphql || \
		(echo "schema.graphql is stale: run 'make schema' and commit it" && exit 1)
	@$(BIN)/python -m compileall -q app rest_compat workers tests
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadscope

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
	$(BIN)/switchboard export-openapi

bench: $(STAMP)
	$(BIN)/python bench/api_throughput.py

# Resolved for Python 3.11 (what CI and the image run) with markers for other platforms and
# versions. uv reads its index from UV_DEFAULT_INDEX (a PyPI mirror), not from pip's settings.
lock: $(UV)
	$(UV_COMPILE) --extra dev --output-file $(DEV_LOCK)
	$(UV_COMPILE) --constraint $(DEV_LOCK) --output-file $(LOCK)

clean:
	rm -rf $(VENV) $(TOOLS) var .pytest_cache .mypy_cache .ruff_cache .hypothesis
