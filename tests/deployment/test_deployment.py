"""The production shape, whole: two web processes, two workers and a beat.

PostgreSQL (the suite's PostgreSQL leg database) + Redis + 2 daphne + 2
Celery workers + 1 Celery beat, all started here, as docs/production.md
describes (short leases and sweeps: tests/settings/workflow.py):

* a broadcast made through one web process reaches sockets on both;
* 200 increments spread over both web processes land exactly once, and
  every socket sees all 200 events in order;
* a cron job fires once per tick, not once per worker;
* a workflow started on one worker resumes on the other after its worker
  is killed (-9), each transactional step once.

PostgreSQL only: SQLite serves one process (docs/production.md). Nothing
asserts timing; waits poll with generous deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import tempfile

import pytest
import redis

from django_rivet import actors, workflows
from django_rivet.client import Client
from django_rivet.models import Actor as ActorRow
from django_rivet.models import Workflow
from tests.support.database import SEVERAL_PROCESSES, module_database
from tests.support.polling import await_for, wait_for
from tests.support.servers import (
    PYTHON,
    ROOT,
    celery_broker,
    daphne_process,
    kill9,
    server_env,
    stop_process,
)
from tests.testapp.models import StepRow

# No django_db mark: the module's servers keep sweeping between tests, so
# the database is flushed once, after they stopped (tests/support/database.py).
pytestmark = SEVERAL_PROCESSES


def celery(env, folder, *args, name):
    """Start ``celery -A tests.support.celery_app <args>`` logging to ``folder``."""
    log = open(os.path.join(folder, f"{name}.log"), "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [PYTHON, "-m", "celery", "-A", "tests.support.celery_app", *args],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    return proc


def worker(env, folder, name):
    return celery(
        env, folder, "worker", "--pool", "solo", "--without-mingle",
        "--without-gossip", "--loglevel", "INFO", "-n", f"{name}@%h", name=name,
    )  # fmt: skip


@pytest.fixture(scope="module")
def deployment(redis_url, django_db_setup, django_db_blocker):
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    with django_db_blocker.unblock():
        env = server_env(
            RIVET_TEST_REDIS_URL=redis_url,
            DJANGO_SETTINGS_MODULE="tests.settings.workflow",
        )
    folder = tempfile.mkdtemp(prefix="rivet-deployment-")
    procs = []
    with module_database(django_db_blocker), contextlib.ExitStack() as stack:
        stack.enter_context(celery_broker(redis_url))
        webs = [stack.enter_context(daphne_process(env)) for _ in range(2)]
        try:
            workers = [worker(env, folder, name) for name in ("wa", "wb")]
            procs += workers
            procs.append(
                celery(env, folder, "beat", "-s", f"{folder}/beat-schedule",
                       "--loglevel", "INFO", name="beat")
            )  # fmt: skip
            yield {"urls": [url for url, _ in webs], "workers": workers}
        finally:
            for proc in procs:
                stop_process(proc, timeout=12)


async def test_broadcasts_cross_processes_and_200_increments_land_once(deployment):
    a, b = (Client(url + "/rivet") for url in deployment["urls"])
    try:
        sockets = [
            await a.actor("counter", "deploy").connect(),
            await b.actor("counter", "deploy").connect(),
        ]
        seen = [[], []]
        for socket, values in zip(sockets, seen, strict=True):
            socket.on("changed", values.append)
            await socket.call("getCount")  # subscribed
        # One broadcast through A reaches the socket on B, and back.
        assert await a.actor("counter", "deploy").acall("increment") == 1
        await await_for(lambda: seen[1] == [1], what="A's broadcast on B")
        assert await b.actor("counter", "deploy").acall("increment") == 2
        await await_for(lambda: seen[0] == [1, 2], what="B's broadcast on A")
        # 198 more, ten at a time, alternating web processes.
        gate = asyncio.Semaphore(10)

        async def increment(index):
            async with gate:
                client = (a, b)[index % 2]
                return await client.actor("counter", "deploy").acall("increment")

        outputs = await asyncio.gather(*[increment(i) for i in range(198)])
        assert sorted(outputs) == list(range(3, 201))  # each call once
        assert await a.actor("counter", "deploy").acall("getCount") == 200
        for values in seen:
            await await_for(lambda values=values: len(values) >= 200, what="events")
            assert values == list(range(1, 201))
        for socket in sockets:
            await socket.close()
    finally:
        await a.aclose()
        await b.aclose()


def test_a_cron_job_fires_once_per_tick_with_two_workers_and_a_beat(deployment):
    clock = actors.get_or_create("alarmClock", "deploy-cron")
    clock.call("set_every", "tick", 5)  # the shortest interval allowed
    wait_for(lambda: len(clock.call("cron_history", "tick", 100)) >= 4,
             timeout=90, what="four ticks")  # fmt: skip
    # The actor's record of its runs first, then the job's history (which
    # then holds at least those runs).
    state = ActorRow.objects.get(pk=clock.actor_id).decoded_state()
    history = clock.call("cron_history", "tick", 100)
    clock.call("delete_cron", "tick")
    ticks = [tick["scheduled_at"] for tick in state["ticks"]]
    scheduled = [run["scheduled_at"] for run in history]
    # Each tick once: no scheduled time twice, in the history or in the runs.
    assert len(ticks) >= 4
    assert len(set(scheduled)) == len(scheduled)
    assert len(set(ticks)) == len(ticks)
    assert set(ticks) <= set(scheduled)


def test_a_workflow_resumes_on_the_other_worker_after_its_worker_is_killed(
    deployment,
):
    handle = workflows.start("rowWriter", {"steps": 20, "delay": 0.25}, id="deploy")
    wait_for(
        lambda: StepRow.objects.filter(workflow_id="deploy").count() >= 4,
        what="a few steps",
    )
    owner = Workflow.objects.get(pk="deploy").lease_owner
    pid = int(owner.rsplit(":", 1)[1])
    running = [proc for proc in deployment["workers"] if proc.pid == pid]
    assert running, (owner, [proc.pid for proc in deployment["workers"]])
    kill9(running[0])  # mid-step, maybe mid-transaction
    assert handle.result(timeout=90) == 20  # finished by the other worker
    steps = list(
        StepRow.objects.filter(workflow_id="deploy").values_list(
            "step", "transactional"
        )
    )
    once = [step for step, transactional in steps if transactional]
    assert sorted(once, key=lambda s: int(s[1:])) == [f"s{i}" for i in range(0, 20, 2)]
    assert {step for step, _ in steps} == {f"s{i}" for i in range(20)}
    assert Workflow.objects.get(pk="deploy").run_count >= 2
