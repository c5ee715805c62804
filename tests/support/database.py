"""The test database for a whole module whose servers work in the background.

pytest-django flushes the database after each transactional test. A module
that shares servers which keep working between tests (Celery workers and
beat sweeping every second, daphne finishing disconnects) would have that
flush run beside their transactions: on PostgreSQL the flush's TRUNCATE and
their row locks deadlock, and the servers' sessions keep the database from
being dropped. Such a module opens the database once for all its tests with
:func:`module_database`, stops its servers, and only then flushes.

Its tests then carry no ``django_db`` mark (the per-test flush is what they
avoid) and must not depend on each other's rows: give each test its own keys.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

#: The marks of a module whose servers are several processes claiming the same
#: rows: the production shape, PostgreSQL only (docs/production.md: SQLite
#: serves one process; SQLite with one Celery worker beside daphne, as the
#: quickstart's production path runs, is tests/project/test_install_path.py's).
SEVERAL_PROCESSES = [
    pytest.mark.pg,
    pytest.mark.servers,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="one process only on SQLite"
    ),
]


@contextlib.contextmanager
def module_database(django_db_blocker: Any) -> Iterator[None]:
    """Allow database access until the block exits, then flush the database.

    Enter it *before* starting the servers (``with module_database(...),
    servers():``), so that they are stopped, and their sessions closed,
    before the flush.
    """
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    from django_rivet.testing import close_db_connections

    with django_db_blocker.unblock():
        # pytest-django creates the test database only when a collected test
        # asks for it (a django_db mark or the db fixtures); a module run on
        # its own has none, so it is created here and dropped at the end.
        own = None
        if connection.settings_dict["NAME"] != connection.creation._get_test_db_name():
            own = setup_databases(verbosity=0, interactive=False, aliases={"default"})
        try:
            yield
        finally:
            close_db_connections()
            if own is None:
                call_command("flush", interactive=False, verbosity=0)
            else:
                teardown_databases(own, verbosity=0)
