#!/usr/bin/env bash
# The whole suite, as `make test` and CI run it.
#
# 1. lint (ruff, import-linter, mypy --strict), the strict docs build,
#    migrations check, system checks;
# 2. pytest on SQLite (everything);
# 3. the benchmarks' smoke run (every measure at tiny sizes: each executes;
#    no timing is checked);
# 4. a throwaway PostgreSQL cluster, and pytest again on the tests whose
#    behaviour depends on the database (marked `pg`: locks, transactions, raw
#    SQL, JSON fields, concurrency);
# 5. when Python 3.12 exists: a second venv with the newest Django 6.x and the
#    SQLite suite without the real-server tests.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PY="$VENV/bin/python"
export PYTHONUNBUFFERED=1

# Each step's time is printed when the next starts, and all of them, with the
# total, at the end (also when a step fails).
started=$SECONDS
step_name=""
step_start=$SECONDS
timings=()
minutes() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
step_done() {
  if [ -n "$step_name" ]; then
    local took=$((SECONDS - step_start))
    printf '==> %s: %s\n' "$step_name" "$(minutes "$took")"
    timings+=("$(printf '%8s  %s' "$(minutes "$took")" "$step_name")")
  fi
  step_name=""
}
step() {
  step_done
  step_name=$*
  step_start=$SECONDS
  printf '\n==> %s\n' "$*"
}
summary() {
  step_done
  printf '\n==> time per step\n'
  printf '%s\n' "${timings[@]}"
  printf '%8s  total\n' "$(minutes $((SECONDS - started)))"
}

work=$(mktemp -d /tmp/rivet-test.XXXXXX)
chmod 755 "$work"
export RIVET_TEST_DB_DIR="$work"
cleanup() {
  trap - EXIT INT TERM
  summary
  scripts/pg.sh stop "$work/pg" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

step "ruff"
"$VENV/bin/ruff" check django_rivet tests example_project bench
"$VENV/bin/ruff" format --check django_rivet tests example_project bench

step "import layers"
"$VENV/bin/lint-imports"

step "mypy (strict, see pyproject)"
"$VENV/bin/mypy" django_rivet

step "docs (strict: warnings are errors)"
VENV="$VENV" scripts/docs.sh "$work/docs"

step "migrations are up to date"
"$PY" -m django makemigrations --check --dry-run --settings tests.settings --pythonpath .

step "system checks"
"$PY" -m django check --settings tests.settings --pythonpath .
"$PY" example_project/manage.py check

step "chromium for the browser tests"
if ! command -v chromium >/dev/null 2>&1; then
  echo "installing Debian's chromium"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi

step "pytest on SQLite"
"$PY" -m pytest -q "$@"

step "benchmarks smoke run (tiny sizes; checks each measure runs, not timings)"
VENV="$VENV" scripts/bench.sh --quick --output "$work/bench-quick.json"

step "pytest on PostgreSQL"
url=$(scripts/pg.sh start "$work/pg")
# Only the tests marked `pg`: the rest behave the same on either database
# and ran in the SQLite leg. The hostile-input sample runs at smoke size.
RIVET_HOSTILE=smoke RIVET_TEST_DATABASE_URL="$url" "$PY" -m pytest -q -m pg "$@"
scripts/pg.sh stop "$work/pg"

step "Python 3.12 + Django 6"
# A pyenv shim answers `command -v` even when it cannot run, so try each
# candidate for real.
py312=""
candidates=$(command -v python3.12 || true)
if command -v pyenv >/dev/null 2>&1; then
  candidates="$candidates $(ls "$(pyenv root)"/versions/3.12*/bin/python3.12 2>/dev/null || true)"
fi
for candidate in $candidates; do
  if "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
    py312=$candidate
    break
  fi
done
if [ -n "$py312" ]; then
  venv312=.venv-py312
  if [ ! -x "$venv312/bin/python" ] || [ pyproject.toml -nt "$venv312/.installed" ]; then
    "$py312" -m venv "$venv312"
    "$venv312/bin/python" -m pip install -q --upgrade pip
    "$venv312/bin/python" -m pip install -q -e '.[postgres,redis,client,dev]' 'django>=6,<7'
    touch "$venv312/.installed"
  fi
  "$venv312/bin/python" -c 'import django, sys; print("Python", sys.version.split()[0], "Django", django.get_version())'
  RIVET_HOSTILE=smoke "$venv312/bin/python" -m pytest -q -m "not servers" "$@"
else
  echo "no Python 3.12 interpreter on this machine: skipping the Django 6 leg"
fi
