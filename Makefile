# little: durable, replayable LLM agent runs on Kafka.
# `make demo` runs the main job on the embedded world; `make test` runs everything against a
# real Kafka broker (`make test-fast`: the quick loop, no broker and no browser). Both set up what they need from a clean clone. `make help` lists targets.

SHELL := /bin/bash
.DEFAULT_GOAL := help
export UV_PYTHON_DOWNLOADS := never
export UV_LINK_MODE := copy
# compiled at install (in parallel), not by the first processes that import each module
export UV_COMPILE_BYTECODE := 1

TOOLS := .tools
UV := $(TOOLS)/bin/uv
UV_VERSION := 0.13.8
VENV := .venv
PY := $(VENV)/bin/python
KAFKA := deploy/local-kafka/kafka.sh

.PHONY: help
help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[1m%-14s\033[0m %s\n", $$1, $$2}'

$(UV):
	python3 -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet uv==$(UV_VERSION)

$(VENV)/.synced: $(UV) uv.lock pyproject.toml libs/little/pyproject.toml services/pyproject.toml
	$(UV) sync --frozen --all-groups --no-group bench
	@touch $@

.PHONY: setup
setup: $(VENV)/.synced ## Install the Python dependencies from uv.lock into .venv

.PHONY: system-deps
system-deps: ## Install from Debian what is missing: a JDK and Maven (local Kafka broker), Chromium (browser tests), PostgreSQL's server (store tests)
	@if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless maven; \
	  else echo "need java 17+ and mvn for the local Kafka broker (or set LITTLE_TEST_KAFKA_BOOTSTRAP)"; fi; \
	fi
	@# The PostgreSQL tests start their own server with initdb + postgres (tests/postgres_server.py),
	@# found on PATH or in /usr/lib/postgresql/<version>/bin. The package also creates the
	@# unprivileged `postgres` user the server runs as when the tests run as root.
	@if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
	    && [ -z "$${LITTLE_TEST_POSTGRES_URL:-}" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql; \
	  else echo "need PostgreSQL's initdb and postgres for the store tests (or set LITTLE_TEST_POSTGRES_URL)"; fi; \
	fi
	@if [ "$$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1 && [ -z "$${LITTLE_TEST_POSTGRES_URL:-}" ]; then \
	  useradd --system --no-create-home --shell /usr/sbin/nologin postgres; \
	fi
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "need Debian's chromium (/usr/bin/chromium) for the run inspector's browser tests"; fi; \
	fi

.PHONY: demo
demo: setup ## The main job: a run on the embedded world, then its replay
	$(VENV)/bin/little demo

.PHONY: lint
lint: setup ## ruff format --check and ruff check
	$(VENV)/bin/ruff format --check libs services tests bench
	$(VENV)/bin/ruff check libs services tests bench

.PHONY: typecheck
typecheck: setup ## mypy --strict on the library, the services and a file typed against the public API
	$(VENV)/bin/mypy libs/little/src/little services/little_services tests/typecheck/public_api.py

.PHONY: test
test: setup system-deps lint typecheck bytecode ## Lint, types and the whole suite against a real broker
	$(VENV)/bin/pytest $(WORKERS) $(PYTEST_ARGS)

# Our own sources compiled to bytecode before the tests (~1 s; only what changed): the tests
# start hundreds of Python processes (crash tests, the CLI), and where PYTHONDONTWRITEBYTECODE
# is set (many CI and container images) each one compiled every module it imported from
# source, ~0.2 s a process (measured: test-fast 4:26 -> 2:56 on a loaded 2-core machine).
.PHONY: bytecode
bytecode: setup
	@$(PY) -m compileall -q -j 0 libs/little/src services tests bench

# Both test targets spread the tests over two pytest-xdist workers, one per core, each taking
# the next test when it is free (the crash and Kafka tests mostly wait on child processes and the
# broker, so two of them overlap well); with `make test` the controlling pytest starts one broker
# for both (tests/kafka_broker.py). WORKERS= (empty) runs everything in one process. The quick
# loop runs a fifth of each fuzz test's inputs (tests/fuzz/__init__.py) and leaves out the tests
# marked slow (the framework crash matrices, the longest demo); make test runs all of them.
WORKERS ?= -n 2 --dist worksteal
FAST := -m "not kafka and not browser and not slow"

.PHONY: test-fast
test-fast: setup bytecode ## The quick loop while working: pytest on what needs no broker and no browser
	LITTLE_TEST_FUZZ_SCALE=0.2 $(VENV)/bin/pytest $(WORKERS) $(FAST) $(PYTEST_ARGS)

.PHONY: screenshot
screenshot: setup system-deps ## Save the run inspector's page of a crashed-and-resumed run as docs/run-inspector.png
	UI_SCREENSHOT=docs/run-inspector.png $(VENV)/bin/pytest -q tests/ui/test_run_inspector.py -k crashed_and_resumed

.PHONY: kafka-start kafka-stop
kafka-start: system-deps ## Start the local Kafka broker (KRaft, from Maven jars)
	$(KAFKA) start
kafka-stop: ## Stop the local Kafka broker
	$(KAFKA) stop

.PHONY: bench
bench: setup system-deps ## Run the benchmarks (local broker) and print their tables
	$(KAFKA) start
	@status=0; \
	$(PY) bench/log_append.py || status=$$?; \
	$(PY) bench/concurrent_runs.py || status=$$?; \
	$(PY) bench/durable_call.py || status=$$?; \
	$(PY) bench/replay_modes.py || status=$$?; \
	$(KAFKA) stop; exit $$status

# The peers (DBOS, LangGraph) are the `bench` dependency group, which `setup` leaves out: this
# target adds it to .venv (the next `setup` after a change of uv.lock removes it again). With
# LITTLE_BENCH_KAFKA_BOOTSTRAP (or LITTLE_TEST_KAFKA_BOOTSTRAP) set it uses that broker, else the
# local one, started and stopped here. PEERS_ARGS passes options (e.g. PEERS_ARGS="--n 1,100").
.PHONY: bench-peers
bench-peers: setup system-deps ## little beside DBOS and LangGraph on the same workload (bench/peers.py)
	$(UV) sync --frozen --all-groups
	@if [ -n "$${LITTLE_BENCH_KAFKA_BOOTSTRAP:-}$${LITTLE_TEST_KAFKA_BOOTSTRAP:-}" ]; then \
	  $(PY) bench/peers.py $(PEERS_ARGS); \
	else \
	  $(KAFKA) start || exit 1; status=0; $(PY) bench/peers.py $(PEERS_ARGS) || status=$$?; \
	  $(KAFKA) stop; exit $$status; \
	fi

.PHONY: clean
clean: ## Remove the venv, tools and local data (not the broker jar cache)
	rm -rf $(VENV) $(TOOLS) .little .pytest_cache .mypy_cache .ruff_cache
