"""Quoted table and column names, and the history mark's expressions, for the
hand-written statements."""

from __future__ import annotations

from django.apps import apps

__all__ = ["MARK_CLAIMED", "MARK_RELEASED", "quote", "table"]

# The history mark (workflows/history_cache.py). A claim turns a release's
# token T into "c:T", and a claimed mark (a run that never released) into
# "stale"; a release writes its token (a parameter) unless a write without
# the lease reset the mark to "" meanwhile.
MARK_CLAIMED = (
    '"history_mark" = CASE WHEN substr("history_mark", 1, 2) = \'c:\' '
    "THEN 'stale' ELSE 'c:' || \"history_mark\" END"
)
MARK_RELEASED = "CASE WHEN \"history_mark\" = '' THEN '' ELSE %s END"


def quote(name: str) -> str:
    """Quote a table or column name (as both backends' ``quote_name`` do)."""
    if name.startswith('"') and name.endswith('"'):
        return name
    return f'"{name}"'


def table(model: str) -> str:
    """Return the quoted table of django_rivet's model ``model``."""
    return quote(apps.get_model("django_rivet", model)._meta.db_table)
