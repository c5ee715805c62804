# django-rivet: every target bootstraps its own virtualenv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Two stamps: `make run` needs only the app and the example's extras (a fresh
# clone reaches its first page sooner); test, lint, docs and dist need the
# tools too. The full install is a superset, so it counts for both.
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
# The dependencies' versions the suite last passed with (scripts/constraints.sh
# refreshes them): a new release elsewhere cannot turn CI red between commits.
PINS := scripts/constraints.txt

.PHONY: run run-celery check-port superuser test test-fast bench lint format install clean dist docs

$(STAMP): pyproject.toml $(PINS)
	@echo "==> installing django-rivet and its dependencies into $(VENV)"
	scripts/install.sh $(VENV) $(PYTHON) -c $(PINS) -e '.[postgres,redis,client,dev,docs,tasks]'
	touch $(STAMP) $(RUN_STAMP)
	@echo "==> installed into $(VENV)"

$(RUN_STAMP): pyproject.toml $(PINS)
	@echo "==> installing django-rivet into $(VENV)"
	scripts/install.sh $(VENV) $(PYTHON) -c $(PINS) -e '.[redis,client]'
	touch $(RUN_STAMP)
	@echo "==> installed into $(VENV)"

install: $(STAMP)

## Start the example project (daphne + embedded worker, SQLite, no servers)
## on http://$(HOST):$(PORT)/. The port is checked before anything else.
HOST ?= 127.0.0.1
PORT ?= 8000
RUN := HOST=$(HOST) PORT=$(PORT) scripts/run.sh

run: check-port $(RUN_STAMP)
	@$(RUN)

## The production shape on one machine: Redis + Celery worker/beat + daphne.
run-celery: check-port $(RUN_STAMP)
	@$(RUN) --celery

check-port:
	@$(RUN) --check-port

## Create your own superuser for the example's admin (make run prints a
## demo login too).
superuser: $(RUN_STAMP)
	$(PY) example_project/manage.py migrate --noinput -v 0
	$(PY) example_project/manage.py createsuperuser

## Lint, the strict docs build, migrations check, system checks, then the
## suite on SQLite and on a throwaway PostgreSQL (and on Python 3.12 +
## Django 6 when available).
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

## The sdist and the wheel users install (PEP 517, isolated build), in dist/.
dist: $(RUN_STAMP)
	$(PY) -m pip install -q --disable-pip-version-check build
	rm -rf dist build
	$(PY) -m build --outdir dist .
	@ls -l dist

## The documentation site in docs/_build/html, strict: any warning (a broken
## cross-reference, a missing page in the toctree, a docstring autodoc cannot
## read) fails the build. scripts/docs.sh also checks the relative links.
docs: $(STAMP)
	VENV=$(VENV) scripts/docs.sh

clean:
	rm -rf $(VENV) .venv-py312 build dist docs/_build *.egg-info
