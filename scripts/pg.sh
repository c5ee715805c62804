#!/usr/bin/env bash
# Throwaway PostgreSQL cluster on 127.0.0.1 for tests and benchmarks.
#
#   scripts/pg.sh start DIR [--durable]   prints the database URL on stdout
#   scripts/pg.sh stop DIR
#
# PostgreSQL refuses to run as root, so when we are root the cluster runs as
# the 'postgres' user (created by Debian's package). DIR must not be under
# /root; the server log stays inside DIR. Without --durable the cluster trades
# durability for speed (fsync off), which is right for tests, not benchmarks.
set -euo pipefail

cmd=${1:?usage: pg.sh start|stop DIR}
dir=${2:?usage: pg.sh start|stop DIR}
durable=${3:-}

log() { echo "pg.sh: $*" >&2; }

pg_bin() {
  local ver
  ver=$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1 || true)
  [ -n "$ver" ] && echo "/usr/lib/postgresql/$ver/bin"
}

ensure_installed() {
  if [ -z "$(pg_bin)" ] || [ ! -x "$(pg_bin)/initdb" ]; then
    log "installing Debian's postgresql"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 && apt-get install -y -qq postgresql >&2
  fi
}

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

case "$cmd" in
start)
  ensure_installed
  bin=$(pg_bin)
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
  chmod 700 "$dir"
  as_owner "$bin/initdb" -D "$dir/data" -U rivet --auth=trust --no-sync -E UTF8 \
    --locale=C >/dev/null
  port=$(free_port)
  opts="-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200"
  if [ "$durable" != "--durable" ]; then
    opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  fi
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/data/server.log" -o "$opts" -w start >/dev/null
  echo "$port" >"$dir/port"
  version=$(as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U rivet -d postgres -Atc 'show server_version')
  log "PostgreSQL $version on 127.0.0.1:$port (data in $dir)"
  echo "postgres://rivet@127.0.0.1:$port/postgres"
  ;;
stop)
  bin=$(pg_bin)
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: pg.sh start|stop DIR" >&2; exit 2 ;;
esac
