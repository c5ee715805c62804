"""What the wire may show of an exception raised while running actor code.

Database failures are told apart here, because they mean different things
to a caller: an outage (the server is down or restarting, the connection
was lost) is ``actor/unavailable`` and a lock wait that ran out (or a
deadlock) is ``actor/busy`` -- both retryable, with a ``retry_after`` hint,
and in both nothing was committed. A missing table is a configuration
error, not an outage (no ``retry_after``: retrying cannot help): the log
names the table and the command that creates it -- ``migrate`` for
django-rivet's tables or a project model with a migration, ``makemigrations
<app>`` first for a model no migration creates. Everything else stays
``rivet/internal_error``: a bug, with details in the server log only
(unless errors are exposed: ``EXPOSE_ERRORS``, by default ``DEBUG``).
"""

from __future__ import annotations

import logging
import re

from django.apps import apps
from django.db import Error as DatabaseError
from django.db import InterfaceError, OperationalError, ProgrammingError
from django.db.models import Model

from ..conf import expose_errors
from ..exceptions import (
    ActorBusy,
    ActorUnavailable,
    InternalError,
    InvalidValue,
    RivetError,
)

logger = logging.getLogger("django_rivet.actors")

__all__ = [
    "MIGRATE_HINT",
    "RETRY_AFTER",
    "caused_by_missing_table",
    "database_error",
    "is_connection_failure",
    "is_missing_table",
    "is_read_only_write",
    "log_missing_table",
    "migration_advice",
    "missing_table_name",
    "public_error",
]

# Seconds a caller is told to wait before retrying (metadata "retry_after"
# and the HTTP Retry-After header).
RETRY_AFTER = 1

MIGRATE_HINT = "run `manage.py migrate`"

# PostgreSQL SQLSTATEs (psycopg's ``sqlstate``, psycopg2's ``pgcode``).
_PG_UNAVAILABLE = frozenset(
    {
        "57P01",  # admin_shutdown: the server is stopping
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now: starting up or shutting down
        "53300",  # too_many_connections
    }
)
_PG_BUSY = frozenset(
    {
        "55P03",  # lock_not_available: lock_timeout expired
        "40P01",  # deadlock_detected: one of the waiters was chosen to fail
    }
)
# A table or a column the code expects is not there: migrations not made
# or not applied (or being applied right now).
_PG_UNDEFINED = frozenset({"42P01", "42703"})  # undefined_table, undefined_column
# SQLite result codes (sqlite3 errors carry ``sqlite_errorname``), matched
# with their extended codes: a table locked in a shared-cache database is
# SQLITE_LOCKED_SHAREDCACHE, a failed write SQLITE_IOERR_WRITE.
_SQLITE_BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED")
_SQLITE_UNAVAILABLE = ("SQLITE_CANTOPEN", "SQLITE_IOERR", "SQLITE_FULL")


def _sqlite_code(name: str) -> str:
    """The primary result code of a (possibly extended) SQLite code name."""
    return "_".join(name.split("_", 2)[:2])


def _driver_error(exc: BaseException) -> BaseException:
    """Return the driver's exception under Django's wrapper."""
    cause = exc.__cause__
    return cause if cause is not None else exc


def _sqlstate(error: BaseException) -> str | None:
    state = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
    return state if isinstance(state, str) else None


def _is_postgresql(error: BaseException) -> bool:
    return type(error).__module__.split(".")[0] in ("psycopg", "psycopg2")


def is_connection_failure(exc: BaseException) -> bool:
    """Tell whether ``exc`` says the database cannot be reached.

    True for a lost or refused connection and a server shutting down or
    starting up: nothing the caller sent was committed by the statement
    that failed, and retrying later may succeed.
    """
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    error = _driver_error(exc)
    name = getattr(error, "sqlite_errorname", None)
    if name is not None:
        return _sqlite_code(name) in _SQLITE_UNAVAILABLE
    if isinstance(exc, InterfaceError):
        # "the connection is closed", "connection already closed".
        return True
    if not _is_postgresql(error):
        return False
    state = _sqlstate(error)
    # psycopg reports a refused or dropped connection without an SQLSTATE.
    return state is None or state.startswith("08") or state in _PG_UNAVAILABLE


def _is_lock_failure(exc: BaseException) -> bool:
    if not isinstance(exc, OperationalError):
        return False
    error = _driver_error(exc)
    name = getattr(error, "sqlite_errorname", None)
    if name is not None:
        return _sqlite_code(name) in _SQLITE_BUSY
    return _is_postgresql(error) and _sqlstate(error) in _PG_BUSY


def is_read_only_write(exc: BaseException) -> bool:
    """Tell whether ``exc`` is a write refused by a read-only transaction.

    What a read-only action's writes to the database (its own models,
    another actor's lock) fail with: PostgreSQL's
    ``read_only_sql_transaction`` (25006), SQLite's ``SQLITE_READONLY``
    (``PRAGMA query_only``).
    """
    if not isinstance(exc, DatabaseError):
        return False
    error = _driver_error(exc)
    name = getattr(error, "sqlite_errorname", None)
    if name is not None:
        return _sqlite_code(name) == "SQLITE_READONLY"
    return _is_postgresql(error) and _sqlstate(error) == "25006"


def is_missing_table(exc: BaseException) -> bool:
    """Tell whether ``exc`` is a query on a table or column that does not exist."""
    if not isinstance(exc, OperationalError | ProgrammingError):
        return False
    error = _driver_error(exc)
    if getattr(error, "sqlite_errorname", None) is not None:
        return str(error).startswith(("no such table", "no such column"))
    return _is_postgresql(error) and _sqlstate(error) in _PG_UNDEFINED


def caused_by_missing_table(exc: BaseException) -> BaseException | None:
    """Return the missing-table error ``exc`` is or was raised from, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if is_missing_table(current):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def database_error(exc: BaseException) -> RivetError | None:
    """Return the coded error for a database outage or lock failure, if it is one.

    A missing table (migrations not made or not applied) is
    ``actor/unavailable`` too, without a retry hint, with a message that
    says what to run. ``None`` for every other exception (including other
    database errors, which are bugs: a missing column, a constraint the
    code should have checked...).
    """
    if not isinstance(exc, DatabaseError):
        return None
    metadata = {"retry_after": RETRY_AFTER}
    if _is_lock_failure(exc):
        return ActorBusy(
            "The actor stayed locked by other work; nothing changed, retry later",
            metadata=metadata,
        )
    if is_connection_failure(exc):
        return ActorUnavailable(
            "The database is unavailable; nothing changed, retry later",
            metadata=metadata,
        )
    if is_missing_table(exc):
        table = missing_table_name(exc)
        if not expose_errors():
            # The command, not the table: table names are no business of a
            # production client.
            return ActorUnavailable(
                f"The database lacks a table: "
                f"{migration_advice(table, detailed=False)} on the server. "
                "Nothing changed."
            )
        what = "column" if table is not None and "." in table else "table"
        return ActorUnavailable(
            f"The database lacks the {what} {table!r}: "
            f"{migration_advice(table)} on the server. Nothing changed.",
            metadata={"table": table},
        )
    return None


_TABLE_IN_MESSAGE = (
    re.compile(r"no such (?:table|column): (?:main\.)?(\S+)"),  # SQLite
    re.compile(r'(?:relation|column) "?([^"\s]+)"? does not exist'),  # PostgreSQL
)


def missing_table_name(exc: BaseException) -> str | None:
    """Return the table (or ``table.column``) a missing-table error names."""
    text = str(_driver_error(exc))
    for pattern in _TABLE_IN_MESSAGE:
        found = pattern.search(text)
        if found:
            return found.group(1)
    return None


def migration_advice(table: str | None, *, detailed: bool = True) -> str:
    """Say what creates ``table``: ``migrate``, or ``makemigrations <app>`` first.

    A table of a model no migration creates yet needs ``makemigrations`` for
    its app; one a migration creates (django-rivet's, or a project model
    migrated elsewhere) needs ``migrate``. Reads the migration files, not the
    database, and only on this error path.
    """
    model = _model_of(table.split(".")[0] if table else None)
    if model is None or model._meta.app_label == "django_rivet":
        return MIGRATE_HINT
    from django.db.migrations.loader import MigrationLoader

    try:
        state = MigrationLoader(None, ignore_no_migrations=True).project_state()
    except Exception:  # unreadable migrations: say what would still help
        return MIGRATE_HINT
    key = (model._meta.app_label, model._meta.model_name)
    if key in state.models:
        return MIGRATE_HINT
    if not detailed:
        return "run `manage.py makemigrations`, then `manage.py migrate`"
    return (
        f"run `manage.py makemigrations {model._meta.app_label}` (no migration "
        f"creates the model {model._meta.label}), then `manage.py migrate`"
    )


def _model_of(table: str | None) -> type[Model] | None:
    if table is None:
        return None
    for model in apps.get_models(include_auto_created=True):
        if model._meta.db_table == table:
            return model
    return None


def log_missing_table(exc: BaseException) -> None:
    """Log the one line that says a table is missing and what to do."""
    table = missing_table_name(exc)
    logger.error(
        "a database table is missing: %s; %s",
        table if table is not None else str(_driver_error(exc)).strip(),
        migration_advice(table),
    )


def public_error(exc: BaseException) -> RivetError:
    """Map any exception to what the wire may show; log internal ones."""
    if isinstance(exc, InvalidValue):
        # Only the server's own code makes these (state, KV, events, queue
        # bodies it writes; client data is refused as request/...): a bug
        # to fix on the server, so the log says where and what.
        logger.error(
            "actor code produced a value outside the value domain, "
            "nothing was committed: %s",
            exc.message,
        )
        return exc
    if isinstance(exc, RivetError):
        return exc
    coded = database_error(exc)
    if coded is not None:
        if is_missing_table(exc):
            # Not the actor's fault: the database lacks django-rivet's (or
            # the project's) tables.
            log_missing_table(exc)
        else:
            logger.warning(
                "database error answered as %s: %s",
                coded.qualified_code,
                str(_driver_error(exc)).strip(),
            )
        return coded
    logger.error("internal error in actor code", exc_info=exc)
    if expose_errors():
        return InternalError(f"{type(exc).__name__}: {exc}")
    return InternalError()
