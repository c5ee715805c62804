# django-rivet: every target bootstraps its own virtualenv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run run-celery test test-fast bench lint format install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[postgres,redis,client,dev]'
	touch $(STAMP)

install: $(STAMP)

## Start the example project (daphne + embedded worker, SQLite, no servers).
run: $(STAMP)
	scripts/run.sh

## The production shape on one machine: Redis + Celery worker/beat + daphne.
run-celery: $(STAMP)
	scripts/run.sh --celery

## Lint, migrations check, system checks, then the suite on SQLite and on a
## throwaway PostgreSQL (and on Python 3.12 + Django 6 when available).
test: $(STAMP)
	scripts/test.sh

## The suite on SQLite only, without the real-server tests.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not servers"

## Every benchmark against its same-run baseline (starts its own servers);
## `make bench ARGS="P1 P5"` for some, ARGS=--quick for the smoke run.
bench: $(STAMP)
	scripts/bench.sh $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check django_rivet tests example_project bench
	$(VENV)/bin/ruff format --check django_rivet tests example_project bench
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy django_rivet

format: $(STAMP)
	$(VENV)/bin/ruff format django_rivet tests example_project bench
	$(VENV)/bin/ruff check --fix django_rivet tests example_project bench

clean:
	rm -rf $(VENV) .venv-py312 build dist *.egg-info
