# Gatehouse: `make demo` to try it, `make test` to check it.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install lint format test demo migrate clean bench bench-pages

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint
	$(BIN)/pytest $(PYTEST_ARGS)

migrate: install
	$(BIN)/python manage.py migrate --no-input

demo: install
	bash bin/demo

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

clean:
	rm -rf $(VENV) $(DBOS_VENV) .pytest_cache .mypy_cache .ruff_cache
