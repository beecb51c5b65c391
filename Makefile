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

fmt: $(STAMP) ## Format and auto-fix
	$(BIN)/ruff format streamflow tests bench
	$(BIN)/ruff check --fix streamflow tests bench

lint: $(STAMP) ## ruff (lint + format check) and the import-linter contracts
	$(BIN)/ruff check streamflow tests bench
	$(BIN)/ruff format --check streamflow tests bench
	$(BIN)/lint-imports

type: $(STAMP) ## mypy --strict on streamflow/
	$(BIN)/mypy

pytest: $(STAMP) ## Run the test suite only
	$(BIN)/pytest $(PYTEST_ARGS)

test: lint type pytest ## Everything CI checks: lint, types, import contracts, tests

bench: $(STAMP) ## Run the benchmarks in bench/ (figures, not pass/fail)
	$(BIN)/python -m bench.embedded

schemas: $(STAMP) ## Regenerate schemas/expanded/ (the expanded top-level schemas) from schemas/*.avsc
	$(BIN)/python -m streamflow.serde.expand

.PHONY: help install demo fmt lint type pytest test bench schemas
