#!/usr/bin/env bash
# Refresh scripts/constraints.txt: the newest release of every dependency,
# as a fresh install resolves them today (every extra, the bench's too).
#
# The venvs of `make test`, `make run` and `make bench` install within these
# pins, so that a dependency's new release cannot turn CI red between two
# commits (Celery 5.6.3 did, in a test fixture). Refresh them on purpose:
#
#   scripts/constraints.sh && make test   # then commit the new pins
#
# The Django 6 leg of `make test` takes them all but Django's (the newest
# 6.x, its venv remade each week).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scripts/install.sh "$work/venv" "${PYTHON:-python3}" \
  -e '.[postgres,redis,client,dev,docs,tasks,bench]'
{
  echo "# The versions make test, make run and make bench install (pip -c)."
  echo "# Made by scripts/constraints.sh on $(date -u +%Y-%m-%d); see there."
  "$work/venv/bin/python" -m pip freeze --exclude-editable | grep -viE '^uv=='
} > scripts/constraints.txt
echo "wrote scripts/constraints.txt ($(grep -vc '^#' scripts/constraints.txt) pins)"
