"""One at a time across OS processes; different actors in parallel."""

import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from django_rivet import Actor, action, actors
from django_rivet.models import Actor as ActorRow
from django_rivet.testing import register_temporarily
from tests.support import workers
from tests.support.threads import closing

# pg: the PostgreSQL leg runs this module (row locks across OS processes).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def test_four_processes_incrementing_one_actor_lose_nothing():
    actors.get_or_create("counter", "race")
    db_name = connection.settings_dict["NAME"]
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        start = manager.Event()
        with context.Pool(4) as pool:
            results = [
                pool.apply_async(workers.increment_many, (db_name, "race", 250, start))
                for _ in range(4)
            ]
            start.set()
            finals = [r.get(timeout=300) for r in results]
    assert actors.get("counter", "race").call("getCount") == 1000
    # Exactly one process saw the last increment.
    assert sorted(finals)[-1] == 1000
    # One state write for the creation, then one per increment.
    assert ActorRow.objects.get(name="counter").version == 1001


class Gate(Actor):
    """A waits inside its action until B has run to completion."""

    name = "gate"
    initial_state = {"runs": 0}
    b_done = threading.Event()

    @action
    def wait_for_b(self, ctx):
        ctx.state["runs"] += 1
        return self.b_done.wait(10)

    @action
    def release(self, ctx):
        ctx.state["runs"] += 1
        return "released"


@pytest.mark.skipif(
    "connection.vendor != 'postgresql'",
    reason="SQLite has one writer: invocations of different actors serialize "
    "(documented); row locks make them parallel on PostgreSQL",
)
def test_a_slow_action_on_one_actor_does_not_block_another():
    Gate.b_done.clear()
    with register_temporarily(Gate):
        a = actors.get_or_create("gate", "a")
        b = actors.get_or_create("gate", "b")
        with ThreadPoolExecutor(2) as pool:
            waiting = pool.submit(closing(a.call), "wait_for_b")
            assert b.call("release") == "released"
            Gate.b_done.set()
            # A saw B finish while A's invocation (and row lock) was open.
            assert waiting.result(timeout=20) is True


def test_threads_in_one_process_run_one_actor_one_at_a_time():
    handle = actors.get_or_create("counter", "threads")
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(closing(lambda _: handle.call("increment")), range(100)))
    assert handle.call("getCount") == 100


class BackendPid(Actor):
    """Reports the database session its invocation runs on."""

    name = "backendPid"

    @action
    def pid(self, ctx):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]


@pytest.mark.skipif(
    "connection.vendor != 'postgresql'",
    reason="needs a server that can drop a worker thread's connection",
)
async def test_worker_threads_reconnect_after_the_server_drops_them():
    from asgiref.sync import sync_to_async
    from django.db.utils import OperationalError

    with register_temporarily(BackendPid):
        handle = await actors.aget_or_create("backendPid", "reconnect")
        pid = await handle.acall("pid")

        def drop(pid):
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

        await sync_to_async(drop)(pid)
        outcomes = []
        for _ in range(10):
            try:
                await handle.acall("pid")
                outcomes.append("ok")
            except OperationalError:
                outcomes.append("failed")
    # A dropped connection may fail the one call that finds it (Django closes
    # it when the rollback fails), never a later one in that thread.
    assert outcomes.count("failed") <= 1
    assert outcomes[-5:] == ["ok"] * 5
