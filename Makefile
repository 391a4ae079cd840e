# Two commands set everything up on a fresh clone: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help install run test lint bench clean
CHROMIUM := /usr/bin/chromium

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP) ## create .venv and install the project with its test tools

# The dashboard tests drive Debian's Chromium through Playwright (no browser download at run time).
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "install Chromium at $(CHROMIUM) for the dashboard tests"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

run: install ## start the server on 127.0.0.1:3002 (local model, local LanceDB, local kanban)
	$(BIN)/memory-mcp serve

test: install $(CHROMIUM) ## lint, then run every test
	$(BIN)/ruff check app tests bench
	$(BIN)/pytest

lint: install ## ruff only
	$(BIN)/ruff check app tests bench

bench: install ## retrieval-quality and speed benchmarks (prints tables, writes bench/results/*.json)
	$(BIN)/python -m bench.locomo
	$(BIN)/python -m bench.speed

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache
