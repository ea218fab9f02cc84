# Set-up lives here: `make demo` and `make test` create/refresh .venv from the pinned files.
# The venv is rebuilt only when a pinned file or pyproject.toml changes (stamp file).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.taxbreak-installed

.PHONY: demo dev test lint bench bench-env clean-warehouse help

help:
	@echo "make demo   - set up .venv, run the main pipeline on an embedded default and show the result"
	@echo "make dev    - dg dev: the Dagster UI, daemon and sensor (ARGS=\"--port 3001\"); SIGTERM stops it"
	@echo "make test   - set up .venv and run the test suite"
	@echo "make clean-warehouse - remove what the demo, analyze and report wrote under warehouse/ (your inbox files stay)"
	@echo "make bench  - every benchmark figure as a ratio to a reference run beside it (ARGS=\"--size-mib 512\")"
	@echo "make bench-env - the optional peers' environment .venv-bench (HTA; TraceLens with TRACELENS_SRC=DIR)"

$(STAMP): requirements.lock requirements-dev.lock constraints.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.lock -c constraints.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

# `make demo` adds one real GPU trace from the vendored public traces (tests/data/SOURCES.md): the H100 Qwen1.5-0.5B
# inference trace. `make demo DEMO_TRACE=` omits it.
DEMO_TRACE ?= tests/data/public/tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz

demo: $(STAMP)
	$(BIN)/python -m taxbreak.demo $(if $(wildcard $(DEMO_TRACE)),--trace $(DEMO_TRACE)) $(ARGS)

# `dg dev` through a launcher that resets SIGINT/SIGTERM first: started from a script (`make dev &`), a plain
# `dg dev` inherits SIGINT ignored and Dagster then ignores SIGTERM too (pipeline/dev.py, docs/orchestration.md).
dev: $(STAMP)
	$(BIN)/python -m taxbreak.pipeline.dev $(ARGS)

# The suite runs on parallel workers (pytest-xdist, pinned in requirements-dev.lock): TEST_WORKERS=auto is one per
# core, TEST_WORKERS=0 runs it in one process; PYTEST_ARGS="--durations=30" adds options. worksteal: an idle worker
# takes tests from a busy one's queue.
# The project's modules are byte-compiled first: many tests start `python -m taxbreak.cli` processes, and where
# PYTHONDONTWRITEBYTECODE is set each one would compile them again.
TEST_WORKERS ?= auto
PYTEST_ARGS ?=
test: $(STAMP)
	command -v chromium >/dev/null || (apt-get update && apt-get install -y --no-install-recommends chromium) || echo "chromium not installed: the report browser tests will skip"
	$(BIN)/ruff check .
	$(BIN)/python -m compileall -q taxbreak ingest pipeline schemas sql
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python bench/run_all.py $(ARGS)

# The peers the benchmarks compare with, in their own venv (never .venv, never the package): HTA from PyPI
# (traceinsight), AMD TraceLens (not on PyPI) from a local copy of its repository when TRACELENS_SRC names one.
BENCH_VENV := .venv-bench
TRACELENS_SRC ?=
bench-env:
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r bench/requirements-peers.txt
	if [ -n "$(TRACELENS_SRC)" ]; then $(BENCH_VENV)/bin/pip install --quiet --disable-pip-version-check \
	  --no-deps "$(TRACELENS_SRC)"; else echo "TraceLens skipped: set TRACELENS_SRC=/path/to/TraceLens"; fi

# What `make demo`, `taxbreak analyze` and `taxbreak report` write under the default home warehouse/: the lake, the
# warehouse file with its lock, WAL and run files (*.duckdb.*), the marts, the readers' snapshot (exports), the
# reports (report/: an older name), the .nsys-rep export cache, and the demo's own files in the inbox (its capture,
# the synthetic traces, the copied DEMO_TRACE, their sidecars). Your own files in the inbox stay, and so does a
# DAGSTER_HOME under it (warehouse/dagster). WAREHOUSE_HOME=DIR cleans another home (tests/capture/test_demo.py).
WAREHOUSE_HOME ?= warehouse
clean-warehouse:
	rm -rf $(addprefix $(WAREHOUSE_HOME)/,lake marts exports reports report cache) $(WAREHOUSE_HOME)/*.duckdb \
	  $(WAREHOUSE_HOME)/*.duckdb.*
	rm -f $(WAREHOUSE_HOME)/inbox/demo_dense_cpu.json.gz* $(WAREHOUSE_HOME)/inbox/synthetic_*.json.gz* \
	  $(if $(DEMO_TRACE),$(WAREHOUSE_HOME)/inbox/$(notdir $(DEMO_TRACE))*)
