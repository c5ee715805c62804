"""The one database of django-rivet's tables: SQLite's shared cache, routers.

An in-memory shared-cache SQLite database (Django's in-memory test database)
waits for table locks instead of failing at once, and a lock held past the
timeout is a retryable ``actor/busy``; a project that routes django-rivet's
models to a database of their own keeps everything there.
"""

import sqlite3
import subprocess
import sys
import threading

import pytest
from django.db import OperationalError
from django.db.utils import ConnectionHandler

from django_rivet.actors.errors import public_error
from tests.support.servers import ROOT, server_env

# pg: the PostgreSQL leg runs this module (the router scenario on PostgreSQL).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


# -- SQLite's shared cache: Django's in-memory test database --------------------------
def shared_cache_database(name, timeout):
    """A Django connection handler for one in-memory, shared-cache SQLite database."""
    uri = f"file:{name}?mode=memory&cache=shared"
    handler = ConnectionHandler(
        {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": uri,
                 "OPTIONS": {"timeout": timeout}}}
    )  # fmt: skip
    # Another connection to the same memory, holding the write lock when asked.
    holder = sqlite3.connect(
        uri, uri=True, isolation_level=None, check_same_thread=False
    )
    holder.execute("CREATE TABLE note (text TEXT)")
    return handler, holder


def test_in_a_shared_cache_a_statement_waits_for_the_table_lock():
    handler, holder = shared_cache_database("rivet_waits", timeout=10)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO note VALUES ('first')")
    release = threading.Timer(0.3, holder.execute, ["COMMIT"])
    release.start()
    try:
        with handler["default"].cursor() as cursor:
            # Without the wait: "database table is locked" at once.
            cursor.execute("INSERT INTO note VALUES ('second')")
            cursor.execute("SELECT text FROM note ORDER BY rowid")
            assert cursor.fetchall() == [("first",), ("second",)]
    finally:
        release.join()
        handler.close_all()
        holder.close()


def test_in_a_shared_cache_a_lock_held_past_the_timeout_is_actor_busy():
    handler, holder = shared_cache_database("rivet_busy", timeout=0.2)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO note VALUES ('first')")
    try:
        with pytest.raises(OperationalError) as locked:
            with handler["default"].cursor() as cursor:
                cursor.execute("INSERT INTO note VALUES ('second')")
    finally:
        handler.close_all()
        holder.execute("ROLLBACK")
        holder.close()
    assert locked.value.__cause__.sqlite_errorname == "SQLITE_LOCKED_SHAREDCACHE"
    # A lock failure, retryable: not an internal error in actor code.
    assert public_error(locked.value).qualified_code == "actor/busy"


# -- a router sending django-rivet to its own database -------------------------------
@pytest.mark.django_db(transaction=False)
def test_routed_to_another_database_everything_stays_there():
    """tests/support/router_scenario.py in a pytest of its own (two databases)."""
    env = {
        name: value
        for name, value in server_env().items()
        if name not in ("RIVET_SERVER_DB_NAME", "DJANGO_SETTINGS_MODULE")
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--ds", "tests.settings.router",
         "tests/support/router_scenario.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


# -- this process's writers in turn (SQLite) ------------------------------------------
def test_sqlite_writers_of_the_process_take_turns():
    """The second writer waits on the turn, not in SQLite's busy handler."""
    from django_rivet.models import db

    if db.connection().vendor != "sqlite":
        pytest.skip("PostgreSQL's row locks queue: no turn is taken there")
    order, second_waits = [], threading.Event()

    def second():
        second_waits.set()
        with db.write_turn() as end:
            order.append(("second", end is not None))

    with db.write_turn() as end:
        assert end is not None
        thread = threading.Thread(target=second)
        thread.start()
        assert second_waits.wait(10)
        thread.join(0.05)
        assert thread.is_alive()  # waiting for this turn to end
        order.append(("first", True))
        end()  # ended early (what an on_commit hook does)
        thread.join(10)
        order.append(("first ends", True))
    assert order == [("first", True), ("second", True), ("first ends", True)]


def test_no_turn_is_taken_inside_a_transaction_or_twice():
    """Inside a transaction the caller may hold SQLite's lock: no turn is taken."""
    from django_rivet.models import db

    with db.atomic(), db.write_turn() as end:
        assert end is None
    with db.write_turn() as outer, db.write_turn() as inner:
        assert inner is None
        assert (outer is None) == (db.connection().vendor != "sqlite")


# -- the KV write path's cursor ------------------------------------------------------
def test_the_kv_cursor_is_kept_while_its_connection_and_logging_are():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_rivet.models import db

    first = db.kv_cursor(connection)
    assert db.kv_cursor(connection) is first  # kept: no cursor made per write
    with CaptureQueriesContext(connection) as queries:
        logged = db.kv_cursor(connection)
        assert logged is not first  # logging switched on: a logging cursor
        logged.execute("SELECT 1")
    assert [q["sql"] for q in queries] == ["SELECT 1"]
    assert db.kv_cursor(connection) is not logged  # and off again
    connection.close()
    fresh = db.kv_cursor(connection)  # a new connection: a cursor of its own
    fresh.execute("SELECT 1")
    assert fresh.fetchone() == (1,)
