#!/usr/bin/env bash
# The whole suite, as `make test` and CI run it: the legs below, in two
# lanes at once (each leg has its own databases and servers; its output is
# printed whole when it ends, and a table of the legs' times at the end):
#   - static: ruff, import-linter, mypy --strict, the strict docs build,
#     migrations check, system checks;
#   - pytest on SQLite: the tests that start real servers (marked
#     `servers`), and the rest;
#   - a throwaway PostgreSQL cluster and pytest on the tests whose behaviour
#     depends on the database (marked `pg`);
#   - when Python 3.12 exists, a second venv with the newest Django 6.x and
#     the SQLite suite without the real-server and `pg` tests;
#   - the benchmarks' smoke run (every measure at tiny sizes: each executes;
#     no timing is checked).
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
lane_a=""
lane_b=""
cleanup() {
  trap - EXIT INT TERM
  for pid in $lane_a $lane_b; do
    kill -TERM -- "-$pid" 2>/dev/null || true
  done
  summary
  scripts/pg.sh stop "$work/pg" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

step "system packages (chromium, postgresql, redis-server)"
# Installed once, here, so the lanes below never run apt at the same time.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian's ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

# A second venv with the newest Django 6.x when Python 3.12 exists. A pyenv
# shim answers `command -v` even when it cannot run, so try each candidate
# for real.
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

# The legs run in two lanes at once: most of a leg waits (for servers,
# sockets, commits), so two of them share 2 cores well; a third lane was
# tried and made every leg slower (CPU is what bounds the run). Each leg has
# its own SQLite folder, Redis and servers; its output is printed whole when
# it ends. The lanes are balanced by the legs' times on 2 cores, which
# depend on what runs beside them (the PostgreSQL leg took 6m59s-8m16s):
# static 0m16s, SQLite servers 6m35s, SQLite rest 2m59s | bench smoke
# 1m21s, PostgreSQL 7m29s, Django 6 1m31s.
leg_static() {
  # Every check runs, also after one failed: the log shows them all. The
  # docs build (the longest, with mypy) runs beside the others; its output
  # follows theirs.
  local rc=0 docs_rc=0 docs_pid
  checked() {
    local begun=$SECONDS name=$1
    shift
    printf '==> %s\n' "$name"
    "$@" || rc=1
    printf '    %s: %s\n' "$name" "$(minutes $((SECONDS - begun)))"
  }
  (
    begun=$SECONDS status=0
    printf '==> docs (strict: warnings are errors)\n'
    VENV="$VENV" scripts/docs.sh "$work/docs" || status=$?
    printf '    docs (strict: warnings are errors): %s\n' "$(minutes $((SECONDS - begun)))"
    exit $status
  ) >"$work/docs.log" 2>&1 &
  docs_pid=$!
  checked "ruff" "$VENV/bin/ruff" check django_rivet tests example_project bench
  checked "ruff format" "$VENV/bin/ruff" format --check django_rivet tests example_project bench
  checked "import layers" "$VENV/bin/lint-imports"
  checked "mypy (strict, see pyproject)" "$VENV/bin/mypy" django_rivet
  checked "migrations are up to date" "$PY" -m django makemigrations --check --dry-run \
    --settings tests.settings --pythonpath .
  checked "system checks" "$PY" -m django check --settings tests.settings --pythonpath .
  checked "system checks (example project)" "$PY" example_project/manage.py check
  wait "$docs_pid" || docs_rc=$?
  cat "$work/docs.log"
  [ "$docs_rc" = 0 ] || rc=1
  return $rc
}
leg_sqlite_servers() {
  "$PY" -m pytest -q -m servers "$@"
}
leg_sqlite_rest() {
  "$PY" -m pytest -q -m "not servers" "$@"
}
leg_postgresql() {
  # Only the tests marked `pg`: the rest behave the same on either database
  # and ran in the SQLite legs. The hostile-input sample runs at smoke size.
  # (A leg runs inside `||`, where `set -e` does not apply: each failure
  # returns by hand.)
  local url rc=0
  url=$(scripts/pg.sh start "$work/pg") || return $?
  RIVET_HOSTILE=smoke RIVET_TEST_DATABASE_URL="$url" "$PY" -m pytest -q -m pg "$@" || rc=$?
  scripts/pg.sh stop "$work/pg"
  return $rc
}
leg_django6() {
  if [ -z "$py312" ]; then
    echo "no Python 3.12 interpreter on this machine: skipping the Django 6 leg"
    return 0
  fi
  # The venv lives outside the checkout, keyed by pyproject.toml and the
  # pins and at most a week old (a newer Django 6.x is picked up then): a
  # fresh clone does not pay for it. It may have been made from another
  # checkout, so this one comes first on the path (PYTHONPATH, which
  # subprocesses inherit too) and the leg prints where django_rivet is from.
  local key venv312
  key=$(cat pyproject.toml scripts/constraints.txt | sha256sum | cut -c1-12)
  venv312="${XDG_CACHE_HOME:-$HOME/.cache}/django-rivet/venv-py312-$key"
  mkdir -p "$(dirname "$venv312")"
  exec 8>"$venv312.lock"
  flock 8 # another checkout's make test may be making it right now
  if [ -n "$(find "$venv312/.installed" -mtime +7 2>/dev/null)" ]; then
    rm -f "$venv312/.installed"
  fi
  if [ ! -f "$venv312/.installed" ]; then
    rm -rf "$venv312"
    # The pins, but Django's: the newest 6.x.
    grep -v '^Django==' scripts/constraints.txt > "$venv312.pins"
    scripts/install.sh "$venv312" "$py312" -c "$venv312.pins" \
      -e '.[postgres,redis,client,dev]' 'django>=6,<7' || return $?
    touch "$venv312/.installed"
  fi
  exec 8>&-
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  "$venv312/bin/python" -c 'import django, django_rivet, sys; print("Python", sys.version.split()[0], "Django", django.get_version(), "django_rivet from", django_rivet.__path__[0])' || return $?
  # Neither the real-server tests nor those marked `pg`: those ran on both
  # databases already, and the tests of the Django-facing code (admin,
  # views, consumers, checks, commands, the ORM paths) are the rest.
  RIVET_HOSTILE=smoke "$venv312/bin/python" -m pytest -q -m "not servers and not pg" "$@"
}
leg_bench() {
  # Tiny sizes: checks each measure runs, not timings.
  VENV="$VENV" scripts/bench.sh --quick --output "$work/bench-quick.json"
}

# Runs its legs one after the other, each with its own SQLite folder; prints
# each leg's output when it ends (one at a time), records its time and
# status. A failed leg does not stop the lane: the run shows every failure.
lane() {
  local leg rc begun failed=0
  for leg in "$@"; do
    begun=$SECONDS
    mkdir -p "$work/$leg"
    rc=0
    RIVET_TEST_DB_DIR="$work/$leg" "leg_$leg" "${pytest_args[@]}" \
      >"$work/$leg.log" 2>&1 || rc=$?
    (
      flock 9
      printf '\n==> %s (%s, exit %s)\n' "$leg" "$(minutes $((SECONDS - begun)))" "$rc"
      cat "$work/$leg.log"
    ) 9>"$work/print.lock"
    printf '%8s  %s%s\n' "$(minutes $((SECONDS - begun)))" "$leg" \
      "$([ "$rc" = 0 ] || echo " FAILED (exit $rc)")" >>"$work/legs.txt"
    [ "$rc" = 0 ] || failed=1
  done
  return $failed
}

step "the test legs, in two lanes (static checks, SQLite servers, SQLite rest | bench smoke run, PostgreSQL, Django 6)"
pytest_args=("$@")
: >"$work/legs.txt"
# The legs in an order that keeps the lanes about even (per-leg times in
# CONTRIBUTING.md), the short ones first, so that the static checks' and
# the benchmarks' failures show early.
# Job control: each lane is a process group, so an interrupted run stops
# both lanes and the tests they run (cleanup kills the groups).
set -m
lane static sqlite_servers sqlite_rest &
lane_a=$!
lane bench postgresql django6 &
lane_b=$!
set +m
rc=0
wait "$lane_a" || rc=1
wait "$lane_b" || rc=1
printf '\n==> time per leg\n'
cat "$work/legs.txt"
if [ "$rc" != 0 ]; then
  echo "a test leg failed (see its output above)"
  exit 1
fi
