#!/usr/bin/env bash
# Run the example project on http://127.0.0.1:8000 (make run / make run-celery).
#
#   scripts/run.sh            one process: daphne with the embedded worker
#                             (RIVET["EMBEDDED_WORKER"]), SQLite, no servers
#   scripts/run.sh --celery   the production shape on one machine: Redis, a
#                             Celery worker with beat (-B) and daphne
#
# Both migrate the example project's SQLite database first and create the
# demo's clock actor, whose alarms and cron jobs print on this console.
# Everything started here stops on Ctrl-C or exit. HOST/PORT override the
# address.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PY="$root/${VENV:-.venv}/bin/python"
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
mode=embedded
case "${1:-}" in
  "") ;;
  --celery) mode=celery ;;
  *) echo "usage: scripts/run.sh [--celery]" >&2; exit 2 ;;
esac

export DJANGO_SETTINGS_MODULE=mysite.settings
export PYTHONPATH="$root/example_project:$root${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

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

"$PY" example_project/manage.py migrate --noinput -v 0

if [ "$mode" = celery ]; then
  REDIS_URL=$(scripts/redis.sh start "$work/redis")
  export REDIS_URL RIVET_EMBEDDED_WORKER=0
  (cd example_project && exec "$PY" -m celery -A mysite worker -B \
    -s "$work/celerybeat-schedule" --pool threads --concurrency 4 \
    --without-mingle --without-gossip --loglevel INFO) &
  pids+=($!)
else
  export RIVET_EMBEDDED_WORKER=1
fi

(cd example_project && exec "$PY" -m daphne -b "$HOST" -p "$PORT" \
  mysite.asgi:application) &
pids+=($!)

# Create the demo clock; this first request also starts the embedded worker.
"$PY" - "$HOST" "$PORT" <<'PYEOF'
import sys, time, urllib.request

host, port = sys.argv[1], sys.argv[2]
url = f"http://{host}:{port}/rivet/actors/clock"
deadline = time.monotonic() + 30
while True:
    request = urllib.request.Request(
        url, data=b"{}", method="PUT", headers={"Content-Type": "application/json"}
    )
    try:
        urllib.request.urlopen(request, timeout=5).read()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(f"daphne did not answer on {url}")
        time.sleep(0.2)
PYEOF

cat <<MSG

  django-rivet example ($mode worker): http://$HOST:$PORT/
  The clock actor ticks every 10 s, chimes every minute (cron) and rang a
  welcome alarm; set another one with
    curl -X POST -H 'Content-Type: application/json' -d '{"args": [15, "tea"]}' \\
      http://$HOST:$PORT/rivet/actors/clock/actions/remind
  Ctrl-C stops everything.

MSG
wait "${pids[-1]}"
