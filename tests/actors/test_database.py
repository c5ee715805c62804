"""The invocation spine and its database (issue 12): limits, locks, connections.

State size, lock waits, the invocation threads' connections and missing
tables. The PostgreSQL-only tests run in the PostgreSQL leg of ``make
test``; a whole PostgreSQL restart under load is in
tests/deployment/test_database_outage.py, the checks on the database in
tests/checks/test_database.py, SQLite's shared cache and routers in
tests/models/test_db.py.
"""

import asyncio
import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.test import Client, override_settings

from django_rivet import ActorBusy, StateTooLarge, actors
from django_rivet.actors import spine
from django_rivet.actors.errors import public_error
from django_rivet.models import Actor as ActorRow
from django_rivet.models import ActorKV, Connection, db
from django_rivet.testing import RivetCommunicator
from tests.support.polling import await_for
from tests.support.servers import (
    ROOT,
    daphne_command,
    free_port,
    server_env,
    stop_process,
    wait_for_port,
)
from tests.testapp.models import Note

# pg: the PostgreSQL leg runs this module (locks, lock timeouts, connections and raw
# SQL).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

postgresql_only = pytest.mark.skipif(
    "connection.vendor != 'postgresql'", reason="PostgreSQL behaviour"
)


def post(client, path, body=None, **extra):
    return client.post(
        path, json.dumps(body or {}), content_type="application/json", **extra
    )


# -- MAX_STATE_BYTES -----------------------------------------------------------------
@override_settings(RIVET={"MAX_STATE_BYTES": 2000})
def test_a_call_growing_the_state_past_the_limit_is_rolled_back():
    client = Client()
    path = "/rivet/actors/hoard/actions/grow?key=h"
    assert post(client, path, {"args": [1000]}).json() == {"output": 1000}
    refused = post(client, path, {"args": [5000]})
    assert refused.status_code == 400
    body = refused.json()
    assert (body["group"], body["code"]) == ("actor", "state_too_large")
    assert body["metadata"]["limit"] == 2000
    # Neither the state nor the KV write nor the handler's own model write.
    hoard = actors.get("hoard", "h")
    assert hoard.call("size") == 1000
    assert Note.objects.filter(text="hoard").count() == 1
    assert ActorKV.objects.count() == 1
    with pytest.raises(StateTooLarge):
        hoard.call("grow", 5000)
    assert hoard.call("size") == 1000


@override_settings(RIVET={"MAX_STATE_BYTES": 2000})
async def test_a_connection_state_past_the_limit_is_refused():
    comm = RivetCommunicator("hoard", ["c"])
    assert (await comm.handshake())["type"] == "init"
    await comm.send_json_to(
        {"type": "action", "id": 1, "name": "grow_conn", "args": [10]}
    )
    assert (await comm.receive_json_from(10))["output"] == 10
    await comm.send_json_to(
        {"type": "action", "id": 2, "name": "grow_conn", "args": [5000]}
    )
    error = await comm.receive_json_from(10)
    assert (error["code"], error["action_id"]) == ("state_too_large", 2)
    states = await sync_to_async(
        lambda: [bytes(s) for s in Connection.objects.values_list("state", flat=True)]
    )()
    assert [len(s) < 100 for s in states] == [True]
    await comm.disconnect()


# -- connections of the invocation threads -------------------------------------------
def each_invoke_thread(probe):
    """Run ``probe`` once in every invocation thread (bypassing their hygiene)."""
    size = spine.INVOKE_THREADS
    barrier = threading.Barrier(size, timeout=30)

    def job():
        try:
            return probe()
        finally:
            barrier.wait()

    # ThreadPoolExecutor.submit: the probe sees each thread as the last job
    # left it, without the close_old_connections() jobs get around them.
    futures = [ThreadPoolExecutor.submit(spine.executor, job) for _ in range(size)]
    return [future.result() for future in futures]


async def many_calls(count=48):
    handles = [await actors.aget_or_create("counter", f"t{n}") for n in range(8)]
    results = await asyncio.gather(
        *(handles[n % 8].acall("increment") for n in range(count))
    )
    return sorted(results)


def open_connections():
    return sum(each_invoke_thread(lambda: connection.connection is not None))


async def test_invocation_threads_follow_conn_max_age(monkeypatch):
    """Django's default CONN_MAX_AGE=0 closes after each job; None keeps them."""
    settings = connections.settings["default"]
    await asyncio.to_thread(db.close_worker_connections)
    try:
        monkeypatch.setitem(settings, "CONN_MAX_AGE", 0)
        await many_calls()
        assert await asyncio.to_thread(open_connections) == 0
        monkeypatch.setitem(settings, "CONN_MAX_AGE", None)
        await many_calls()
        assert await asyncio.to_thread(open_connections) > 0
    finally:
        monkeypatch.undo()
        await asyncio.to_thread(db.close_worker_connections)


@postgresql_only
async def test_a_dead_connection_in_an_invocation_thread_is_replaced(monkeypatch):
    """What a PostgreSQL restart does to idle threads, without the restart."""
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", None)
    await asyncio.to_thread(db.close_worker_connections)

    def backend_pid():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    def terminate(pids):
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid",
                    [pids],
                )
        finally:
            connections.close_all()  # this helper thread's own connection

    def alive(pids):
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s::int[])",
                    [pids],
                )
                return cursor.fetchone()[0]
        finally:
            connections.close_all()

    try:
        pids = await asyncio.to_thread(each_invoke_thread, backend_pid)
        assert len(set(pids)) == spine.INVOKE_THREADS
        await asyncio.to_thread(terminate, pids)
        await await_for(
            lambda: asyncio.to_thread(lambda: not alive(pids)),
            what="the terminated sessions gone",
        )
        # Every thread's connection is dead now; every call still succeeds.
        assert await many_calls(48) == sorted(n // 8 + 1 for n in range(48))
    finally:
        monkeypatch.undo()
        await asyncio.to_thread(db.close_worker_connections)


# -- lock waits ----------------------------------------------------------------------
def hold_row_lock(actor_id, locked, release):
    try:
        with transaction.atomic():
            ActorRow.objects.select_for_update().get(pk=actor_id)
            locked.set()
            release.wait(60)
    finally:
        connections.close_all()


@postgresql_only
def test_a_lock_wait_past_lock_timeout_is_actor_busy_and_changes_nothing():
    counter = actors.get_or_create("counter", "busy")
    assert counter.call("increment") == 1
    locked, release = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=hold_row_lock, args=(counter.actor_id, locked, release)
    )
    holder.start()
    try:
        assert locked.wait(30)
        with override_settings(RIVET={"LOCK_TIMEOUT": 0.2}):
            with pytest.raises(ActorBusy) as busy:
                counter.call("increment")
            assert busy.value.metadata == {"retry_after": 1}
            response = post(
                Client(), "/rivet/actors/counter/actions/increment?key=busy"
            )
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "1"
        assert response.json()["code"] == "busy"
    finally:
        release.set()
        holder.join(30)
    assert counter.call("getCount") == 1


@postgresql_only
def test_the_lock_bound_never_leaks_into_a_callers_own_transaction():
    counter = actors.get_or_create("counter", "nested")
    with transaction.atomic(), connection.cursor() as cursor:
        counter.call("increment")
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"


# -- missing tables ------------------------------------------------------------------
def test_a_missing_table_is_logged_as_a_migration_problem(caplog):
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT * FROM django_rivet_nothing_here")
    except Exception as exc:  # the driver's own error, wrapped by Django
        error = exc
    with caplog.at_level("ERROR", logger="django_rivet"):
        coded = public_error(error)
    # The caller is told too, without the driver's text (it names tables),
    # and without a retry hint: retrying cannot create a table.
    assert coded.qualified_code == "actor/unavailable"
    assert "`manage.py migrate`" in coded.message
    assert "django_rivet_nothing_here" not in coded.message
    assert "retry_after" not in (coded.metadata or {})
    [record] = caplog.records
    assert record.getMessage() == (
        "a database table is missing: django_rivet_nothing_here; "
        "run `manage.py migrate`"
    )
    assert record.exc_info is None


@pytest.mark.servers
@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="once, on SQLite")
def test_a_server_without_migrations_says_to_run_migrate(tmp_path):
    env = server_env(RIVET_SERVER_DB_NAME=str(tmp_path / "never-migrated.sqlite3"))
    log_path = tmp_path / "daphne.log"
    port = free_port()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            daphne_command(port),
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_for_port(port, proc=proc)
            response = httpx.post(
                f"http://127.0.0.1:{port}/rivet/actors/counter/actions/increment",
                json={},
                timeout=30,
            )
        finally:
            stop_process(proc)
    # A coded answer that says what is wrong, not a bare 500.
    assert response.status_code == 503
    assert response.json()["code"] == "unavailable"
    assert "run `manage.py migrate`" in response.json()["message"]
    text = log_path.read_text()
    assert (
        "a database table is missing: django_rivet_actor; run `manage.py migrate`"
        in text
    )
    assert "Retry-After" not in response.headers  # retrying cannot help
    assert "internal error in actor code" not in text


@pytest.mark.servers
@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="once, on SQLite")
def test_the_shell_without_migrations_raises_an_error_that_says_to_migrate(tmp_path):
    env = server_env(RIVET_SERVER_DB_NAME=str(tmp_path / "never-migrated.sqlite3"))
    code = (
        "from django_rivet import actors\n"
        "actors.get_or_create('counter', 'k').call('increment')\n"
    )
    shell = subprocess.run(
        [sys.executable, "-m", "django", "shell", "-c", code],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shell.returncode != 0
    last_line = shell.stderr.strip().splitlines()[-1]
    assert last_line.startswith("django_rivet.exceptions.ActorUnavailable: ")
    assert "run `manage.py migrate`" in last_line
