#!/usr/bin/env bash
# Install into a virtualenv (made when missing) what `make` targets need.
#
# usage: scripts/install.sh <venv> <python> <pip requirement>...
#
# uv resolves and installs the same versions as pip (same PyPI, same
# constraints from pyproject.toml) in about 19 seconds instead of 64 on a
# fresh clone. It compiles the bytecode as pip does: where
# PYTHONDONTWRITEBYTECODE is set (CI here), every process would otherwise
# compile what it imports, each time it starts. uv is installed into the
# venv itself, by pip; when that cannot be had (an offline index without
# it) or uv fails, pip installs everything as before.
set -euo pipefail
venv=$1
python=$2
shift 2

test -x "$venv/bin/python" || "$python" -m venv "$venv"
if "$venv/bin/python" -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1 \
  && "$venv/bin/uv" pip install -q --compile-bytecode --python "$venv/bin/python" "$@"; then
  exit 0
fi
# No uv, or uv could not install (an index only pip is configured for).
echo "installing with pip instead of uv (a minute or two)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install --disable-pip-version-check "$@"
