#!/usr/bin/env bash
# Run the example project (make run / make run-celery).
#
#   scripts/run.sh              one process: daphne with the embedded worker
#                               (RIVET["EMBEDDED_WORKER"]), SQLite, no servers
#   scripts/run.sh --celery     the production shape on one machine: Redis, a
#                               Celery worker with beat (-B) and daphne
#   scripts/run.sh --check-port only check that HOST:PORT is free (make run
#                               does it before installing anything)
#
# Environment: HOST (default 127.0.0.1; 0.0.0.0 listens on every interface,
# add your host name to DJANGO_ALLOWED_HOSTS), PORT (default 8000),
# SQLITE_PATH (default example_project/db.sqlite3).
#
# It migrates the database, creates the example's scheduled actors and a
# `demo` superuser with a new password, starts the server, and prints the
# banner once that server -- not another one on the same port -- answers.
# Everything started here stops on Ctrl-C or exit.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
VENV=${VENV:-.venv}
case "$VENV" in /*) ;; *) VENV="$root/$VENV" ;; esac
PY="$VENV/bin/python"
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
mode=embedded
case "${1:-}" in
  "") ;;
  --celery) mode=celery ;;
  --check-port) mode=check ;;
  *) echo "usage: scripts/run.sh [--celery|--check-port]" >&2; exit 2 ;;
esac

step() { printf '==> %s\n' "$*"; }
port_busy() {
  cat >&2 <<MSG

  Port $PORT on $HOST is already in use (another server is listening there).
  Stop it, or pick another port:  make run PORT=$((PORT + 1))

MSG
  exit 1
}

# The check daphne's own bind makes: a listener on the port (SO_REUSEADDR
# lets a port in TIME_WAIT through, as Twisted does).
python3 - "$HOST" "$PORT" <<'PYEOF' || port_busy
import socket, sys

with socket.socket() as sock:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((sys.argv[1], int(sys.argv[2])))
    except OSError:
        sys.exit(1)
PYEOF
[ "$mode" = check ] && exit 0

export DJANGO_SETTINGS_MODULE=mysite.settings
export PYTHONPATH="$root/example_project:$root${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

started=$(date +%s%N)
work=$(mktemp -d /tmp/rivet-run.XXXXXX)
pids=()
cleanup() {
  trap "" INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    # Celery's warm shutdown finishes the task in progress; don't wait forever.
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  if [ -d "$work/redis" ]; then scripts/redis.sh stop "$work/redis" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "migrating the example's database (${SQLITE_PATH:-example_project/db.sqlite3})"
login=$("$PY" example_project/manage.py example_setup)  # migrates too
read -r demo_user demo_password <<<"$login"

if [ "$mode" = celery ]; then
  step "starting Redis and a Celery worker with beat"
  REDIS_URL=$(scripts/redis.sh start "$work/redis")
  export REDIS_URL RIVET_EMBEDDED_WORKER=0
  (cd example_project && exec "$PY" -m celery -A mysite worker -B \
    -s "$work/celerybeat-schedule" --pool threads --concurrency 4 \
    --without-mingle --without-gossip --loglevel INFO) &
  pids+=($!)
else
  export RIVET_EMBEDDED_WORKER=1
fi

step "starting daphne on $HOST:$PORT"
# daphne's output goes to this console and to a log, where the script reads
# that daphne itself holds the port.
(cd example_project && exec "$PY" -m daphne -b "$HOST" -p "$PORT" \
  mysite.asgi:application) > >(tee "$work/daphne.log") 2>&1 &
daphne=$!
pids+=("$daphne")

# Ready when our daphne listens and answers the home page; this first
# request also starts the embedded worker.
case "$HOST" in
  0.0.0.0) probe_host=127.0.0.1 ;;
  *:*) probe_host="[::1]" ;;  # IPv6 addresses: ask the loopback
  *) probe_host=$HOST ;;
esac
ready=""
for _ in $(seq 1 600); do
  if ! kill -0 "$daphne" 2>/dev/null; then
    grep -q "Address already in use" "$work/daphne.log" && port_busy
    echo "daphne exited; its output is above." >&2
    exit 1
  fi
  if grep -q "Listening on TCP address" "$work/daphne.log" &&
    "$PY" - "http://$probe_host:$PORT/" <<'PYEOF'; then
import sys, urllib.request

try:
    with urllib.request.urlopen(sys.argv[1], timeout=5) as response:
        sys.exit(response.status != 200)
except OSError:
    sys.exit(1)
PYEOF
    ready=1
    break
  fi
  sleep 0.1
done
[ -n "$ready" ] || { echo "daphne did not answer within a minute" >&2; exit 1; }

url="http://$probe_host:$PORT"
elapsed_ms=$((($(date +%s%N) - started) / 1000000))
elapsed=$((elapsed_ms / 1000)).$((elapsed_ms % 1000 / 100))
cat <<MSG

  django-rivet example ($mode worker), ready in ${elapsed} s: $url/

    chat      $url/chat/acme/general/   (open it in two windows)
    orders    $url/orders/
    digest    $url/digest/   (posts into #general every minute)
    counter   $url/counter/  (the clock's alarms and cron also print here)
    admin     $url/admin/    user $demo_user, password $demo_password
              (a new password at every start; \`make superuser\` makes your own)

  Another address: make run PORT=8001 HOST=0.0.0.0    Ctrl-C stops everything.

MSG
wait "$daphne"
