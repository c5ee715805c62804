#!/usr/bin/env bash
# The documentation site (Sphinx + MyST-Parser), built strict: every warning
# is an error (-W), all of them reported (--keep-going). That covers each
# Markdown link between pages and to a heading's anchor, every toctree entry,
# each cross-reference a docstring makes to django-rivet's names, and the
# docstrings autodoc renders. Links to other sites are not checked (the
# build machines reach no website); tests/project/test_docs.py checks the README's
# relative links. -E: read every page again, so no warning hides in a cache.
#
# usage: scripts/docs.sh [output dir]   (default docs/_build/html)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
out=${1:-docs/_build/html}
"$VENV/bin/python" -m sphinx -E -W --keep-going -q -b html \
  -d docs/_build/doctrees docs "$out"
echo "docs built into $out"
