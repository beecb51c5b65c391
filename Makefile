# streamflow task runner: used by humans and by .ci/run alike. `make help` lists targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help

help: ## List targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install streamflow with its dev tools

demo: $(STAMP) ## Run the example order workflow on the embedded RocksDB engine
	$(BIN)/streamflow demo

serve: $(STAMP) ## Host the example app: HTTP API and web console on http://127.0.0.1:8233
	$(BIN)/streamflow serve

fmt: $(STAMP) ## Format and auto-fix
	$(BIN)/ruff format streamflow tests bench
	$(BIN)/ruff check --fix streamflow tests bench

lint: $(STAMP) ## ruff (lint + format check) and the import-linter contracts
	$(BIN)/ruff check streamflow tests bench
	$(BIN)/ruff format --check streamflow tests bench
	$(BIN)/lint-imports

type: $(STAMP) ## mypy --strict on streamflow/
	$(BIN)/mypy

# The suite runs in parallel (pytest-xdist): most tests wait on a broker, a subprocess or a
# timer rather than on a core. Every test has a Kafka namespace and directories of its own.
PYTEST_WORKERS ?= 4
TEST_TMP := build/test-tmp

# Under with_broker every worker uses one broker: STREAMFLOW_BOOTSTRAP's, else one it starts.
# The tracing tests export to a real Jaeger: built once from the Go module proxy (minutes the
# first time, cached after), before the tests, whose fixtures have 120 s each.
pytest: $(STAMP) ## Run the test suite only (PYTEST_ARGS selects, PYTEST_WORKERS=4 by default)
	rm -f build/test-logs/session*.log
	scripts/trace-collector fetch
	scripts/schema-registry fetch
	scripts/kafka-connect fetch
	$(BIN)/python -m streamflow.testing.with_broker $(BIN)/pytest -n $(PYTEST_WORKERS) \
	  --dist loadgroup --basetemp=$(TEST_TMP) --durations=15 $(PYTEST_ARGS)
	@# The whole suite also runs the conformance suite with the processors deciding, in
	@# processes of its own (one process holds at most about 1,000 Kafka clients at once),
	@# deleting its topics as it goes, on a broker of its own: the first session's thousands
	@# of topics (kept for the canary's scan) make every topic creation slower (9 min, not 3).
	if [ -z "$(PYTEST_ARGS)" ] && [ -z "$$STREAMFLOW_TEST_BACKENDS" ]; then \
	  env -u STREAMFLOW_BOOTSTRAP \
	    STREAMFLOW_TEST_BACKENDS=kafka-processors STREAMFLOW_TEST_DELETE_NAMESPACES=1 \
	    $(BIN)/python -m streamflow.testing.with_broker \
	    $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup \
	    --basetemp=$(TEST_TMP)/processors-deciding tests/conformance; \
	fi

canary: $(STAMP) ## After `make pytest` on the whole suite: search all it wrote for hook tokens
	STREAMFLOW_CANARY_ROOT=$(TEST_TMP) $(BIN)/pytest --basetemp=build/test-tmp-canary \
	  tests/test_secret_canary.py -k test_zz_the_canary_token_is_found_nowhere

# The scan must see the broker the suite wrote to: both run under one broker (with_broker uses
# STREAMFLOW_BOOTSTRAP when set, else starts one and stops it afterwards).
test: lint type ## Everything CI checks: lint, types, import contracts, tests
	$(BIN)/python -m streamflow.testing.with_broker $(MAKE) --no-print-directory pytest canary

bench: $(STAMP) ## Run the benchmarks in bench/ (figures, not pass/fail)
	$(BIN)/python -m bench.embedded

schemas: $(STAMP) ## Regenerate schemas/expanded/ (the expanded top-level schemas) from schemas/*.avsc
	$(BIN)/python -m streamflow.serde.expand

.PHONY: help install demo serve fmt lint type pytest canary test bench schemas
