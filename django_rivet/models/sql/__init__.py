"""SQL per database: one :class:`Dialect` object per supported database.

Everything django-rivet does differently on PostgreSQL and on SQLite --
a hand-written statement, a lock, a capability -- is answered by the
dialect of the connection, the way Django asks a backend's
``DatabaseOperations``::

    from django_rivet.models import db, sql

    connection = db.connection()
    with connection.cursor() as cursor:
        cursor.execute(sql.dialect(connection).lease_check_sql(True), [id, token])

Other databases are refused (system check ``rivet.E401``, and
``NotSupportedError`` here).
"""

from __future__ import annotations

from django.db import NotSupportedError
from django.db.backends.base.base import BaseDatabaseWrapper

from .base import (
    ACTOR_COLUMNS,
    ACTOR_COLUMNS_BY_KEY,
    CONN_COLUMNS,
    AdmissionSQL,
    Dialect,
    Statement,
)
from .messages import SendSQL
from .postgresql import PostgreSQLDialect
from .sqlite import SQLiteDialect

__all__ = [
    "ACTOR_COLUMNS",
    "ACTOR_COLUMNS_BY_KEY",
    "CONN_COLUMNS",
    "SUPPORTED_VENDORS",
    "AdmissionSQL",
    "Dialect",
    "PostgreSQLDialect",
    "SQLiteDialect",
    "SendSQL",
    "Statement",
    "dialect",
    "supports",
]

_CLASSES: dict[str, type[Dialect]] = {
    dialect.vendor: dialect for dialect in (PostgreSQLDialect, SQLiteDialect)
}
SUPPORTED_VENDORS = tuple(_CLASSES)
# One instance per vendor: it caches its statements.
_DIALECTS: dict[str, Dialect] = {}


def supports(vendor: str) -> bool:
    """Tell whether django-rivet runs on Django backends of ``vendor``."""
    return vendor in _CLASSES


def dialect(connection: BaseDatabaseWrapper) -> Dialect:
    """Return the dialect of ``connection``'s database.

    Raises ``NotSupportedError`` for a database django-rivet does not support.
    """
    found = _DIALECTS.get(connection.vendor)
    if found is None:
        cls = _CLASSES.get(connection.vendor)
        if cls is None:
            raise NotSupportedError(
                f"django-rivet does not support the {connection.vendor!r} "
                f"database backend (of {connection.alias!r}); it runs on "
                f"{' and '.join(SUPPORTED_VENDORS)} (rivet.E401)"
            )
        found = _DIALECTS[connection.vendor] = cls()
    return found
