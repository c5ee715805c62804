"""Quoted table and column names, for the hand-written statements."""

from __future__ import annotations

from django.apps import apps

__all__ = ["quote", "table"]


def quote(name: str) -> str:
    """Quote a table or column name (as both backends' ``quote_name`` do)."""
    if name.startswith('"') and name.endswith('"'):
        return name
    return f'"{name}"'


def table(model: str) -> str:
    """Return the quoted table of django_rivet's model ``model``."""
    return quote(apps.get_model("django_rivet", model)._meta.db_table)
