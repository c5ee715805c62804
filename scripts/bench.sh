#!/usr/bin/env bash
# The benchmarks (make bench): python -m bench, after installing the
# bench-only extras (DBOS for P5, pyinstrument and py-spy for profiling) into
# the venv.
# Every measure starts what it needs -- PostgreSQL with default durability,
# Redis, daphne, a Celery worker -- and stops it on exit. P11 installs
# @rivetkit/workflow-engine from npm into bench/.cache/node (git-ignored)
# when node and npm are present.
#
#   scripts/bench.sh              every measure, full size (~30 min)
#   scripts/bench.sh P1 P5        some of them
#   scripts/bench.sh --quick      tiny sizes, < 1 min: checks each one runs
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${VENV:-.venv}/bin/python
if ! "$PY" -c 'import dbos, pyinstrument, django_tasks_db' 2>/dev/null \
  || ! test -x "$(dirname "$PY")/py-spy"; then
  scripts/install.sh "${VENV:-.venv}" python3 -c scripts/constraints.txt -e '.[bench]'
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# The standalone scripts main gained before they are folded into the runner
# (bench/bench_retention.py, bench_rivetkit.py, bench_transport.py):
# `scripts/bench.sh retention` runs bench/bench_retention.py.
if [ $# -eq 1 ] && [ -f "bench/bench_$1.py" ]; then
  mkdir -p bench/results
  exec "$PY" "bench/bench_$1.py"
fi
exec "$PY" -m bench "$@"
