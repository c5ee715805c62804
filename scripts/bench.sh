#!/usr/bin/env bash
# Run every benchmark in bench/ (make bench). Each bench_*.py is standalone:
# it starts what it needs (PostgreSQL with default durability, Redis, daphne,
# Celery), measures a baseline in the same run, prints a table and writes
# bench/results/<name>.json. Pass names to run a subset: scripts/bench.sh invoke
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${VENV:-.venv}/bin/python
mkdir -p bench/results
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ $# -gt 0 ]; then
  benches=()
  for name in "$@"; do benches+=("bench/bench_$name.py"); done
else
  benches=(bench/bench_*.py)
fi
for bench in "${benches[@]}"; do
  printf '\n==> %s\n' "$bench"
  "$PY" "$bench"
done
