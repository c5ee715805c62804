#!/usr/bin/env bash
# Throwaway Redis on 127.0.0.1 for tests, benchmarks and `make run-celery`.
#
#   scripts/redis.sh start DIR    prints the redis:// URL on stdout
#   scripts/redis.sh stop DIR
set -euo pipefail

cmd=${1:?usage: redis.sh start|stop DIR}
dir=${2:?usage: redis.sh start|stop DIR}

log() { echo "redis.sh: $*" >&2; }

case "$cmd" in
start)
  if ! command -v redis-server >/dev/null 2>&1; then
    log "installing Debian's redis-server"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 && apt-get install -y -qq redis-server >&2
  fi
  mkdir -p "$dir"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir"
  for _ in $(seq 1 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05
  done
  echo "$port" >"$dir/port"
  log "Redis $(redis-server --version | awk '{print $3}') on 127.0.0.1:$port"
  echo "redis://127.0.0.1:$port/0"
  ;;
stop)
  if [ -f "$dir/redis.pid" ]; then
    pid=$(cat "$dir/redis.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: redis.sh start|stop DIR" >&2; exit 2 ;;
esac
