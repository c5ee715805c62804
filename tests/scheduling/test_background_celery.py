"""Background work through real Celery workers on Redis.

Two workers (threads, 4 each) share the test database and the broker for
the whole module: retries fire from ETA tasks, queue admission follows each
finish, and two beats race for the ticks of a scheduled workflow. Attempts
and work_failed signals are appended to a file by tests.background_app
(failed attempts roll their database writes back). Nothing here asserts
timing beyond the backoff's own lower bounds: the tests poll the database
with generous deadlines.
"""

import contextlib
import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.test import override_settings

from django_rivet import actors, workflows
from django_rivet.models import Schedule, ScheduledWorkflow, ScheduleStatus, Workflow
from django_rivet.testing import register_temporarily
from django_rivet.workflows import registry as workflow_registry
from tests.background_app.actors import BackgroundFlaky
from tests.background_app.workflows import every_minute, queue_probe
from tests.settings.background import WORKFLOW_QUEUES
from tests.support.celery_app import app
from tests.support.database import SEVERAL_PROCESSES, module_database
from tests.support.polling import wait_for
from tests.support.servers import (
    celery_beat,
    celery_broker,
    celery_worker,
    server_env,
)
from tests.testapp.models import StepRow

# No per-test flush (tests/support/database.py): the workers keep claiming
# rows between tests, so the database is flushed once, after they stopped.
# Each test uses its own actor keys, queues and workflow names.
# Several worker processes on one database: PostgreSQL only.
pytestmark = SEVERAL_PROCESSES


@pytest.fixture(scope="module")
def workers(redis_url, django_db_setup, django_db_blocker, tmp_path_factory):
    """Two Celery workers without beat; yields (env, the record file)."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    record = tmp_path_factory.mktemp("background") / "record.jsonl"
    with module_database(django_db_blocker), contextlib.ExitStack() as stack:
        env = server_env(
            RIVET_TEST_REDIS_URL=redis_url,
            DJANGO_SETTINGS_MODULE="tests.settings.background",
            RIVET_TEST_RECORD=str(record),
        )
        for name in ("a", "b"):
            stack.enter_context(
                celery_worker(env, pool="threads", concurrency=4, name=name)
            )
        with celery_broker(redis_url):
            for _ in range(2):  # a harmless task each, taken once both consume
                app.send_task("rivet.deliver_queue", [str(uuid.uuid4())])
        wait_for(lambda: client.llen("celery") == 0, what="the workers consuming")
        client.close()
        yield env, record


@pytest.fixture
def recorded(workers, redis_url, monkeypatch):
    """Return a reader of what was recorded during this test.

    This process records too: a waiting sender delivers to its own message.
    """
    env, record = workers
    record.write_text("")
    monkeypatch.setenv("RIVET_TEST_RECORD", str(record))

    def read():
        return [json.loads(line) for line in record.read_text().splitlines()]

    with (
        celery_broker(redis_url),
        override_settings(RIVET={"WORKFLOW_QUEUES": WORKFLOW_QUEUES}),
        register_temporarily(BackgroundFlaky),
        workflow_registry.register_temporarily(queue_probe),
    ):
        yield read


def test_failed_actions_are_retried_with_growing_delays_then_parked(recorded):
    flaky = actors.get_or_create("backgroundFlaky", "twice")
    twice = flaky.call("plan", 0.5, 2)
    doomed = actors.get_or_create("backgroundFlaky", "always").call("plan", 0.5, -1, 1)

    def finished(*ids):
        rows = Schedule.objects.filter(pk__in=ids)
        return all(row.status in ("done", "failed") for row in rows)

    wait_for(lambda: finished(twice, doomed), what="both schedules finishing")
    time.sleep(1.5)  # room for a wrong extra attempt or signal to show up
    assert Schedule.objects.get(pk=twice).status == ScheduleStatus.DONE
    assert Schedule.objects.get(pk=doomed).status == ScheduleStatus.FAILED
    entries = recorded()
    attempts = [e for e in entries if e.get("key") == ["twice"]]
    assert [e["attempt"] for e in attempts] == [1, 2, 3]
    # Each retry was due backoff seconds after the attempt before it ran
    # (BASE 1 s: about 1 s, then 2 s, less jitter) and ran no earlier.
    gaps = [
        b["scheduled_at"] - a["at"]
        for a, b in zip(attempts, attempts[1:], strict=False)
    ]
    assert 0.75 <= gaps[0] < 1.5 <= gaps[1]
    assert all(e["at"] >= e["scheduled_at"] for e in attempts)
    assert [e["attempt"] for e in entries if e.get("key") == ["always"]] == [1, 2]
    signals = [e for e in entries if e.get("signal") == "work_failed"]
    assert [(s["kind"], s["id"]) for s in signals] == [("schedule", doomed)]


def test_a_waiting_sender_is_told_failed_when_the_retries_are_spent(recorded):
    box = actors.get_or_create("backgroundFlaky", "sender")
    reply = box.send("jobs", "boom", wait=True, timeout=60)
    assert reply["status"] == "failed"
    assert reply["error"]["code"] == "internal_error"
    attempts = [e["attempt"] for e in recorded() if e.get("message") == "boom"]
    assert attempts == [1, 2, 3]


def test_a_queue_with_concurrency_2_never_runs_3_workflows_on_2_workers(recorded):
    handles = [
        workflows.start("queueProbe", {"seconds": 0.3}, queue="probe")
        for _ in range(20)
    ]
    for handle in handles:
        handle.result(timeout=120)
    spans = [handle.result() for handle in handles]
    events = sorted(
        [(began, 1) for began, _ in spans] + [(end, -1) for _, end in spans]
    )
    running, most = 0, 0
    for _, change in events:
        running += change
        most = max(most, running)
    # 8 worker threads could run 8 at once: the queue held them to 2.
    assert most == 2


def test_a_rate_limited_queue_starts_at_most_2_per_second(recorded):
    handles = [
        workflows.start("queueProbe", {"seconds": 0}, queue="paced") for _ in range(6)
    ]
    for handle in handles:
        handle.result(timeout=60)
    starts = sorted(
        Workflow.objects.filter(queue="paced").values_list("started_at", flat=True)
    )
    for start in starts:
        window = [s for s in starts if start - timedelta(seconds=1) < s <= start]
        assert len(window) <= 2
    assert starts[-1] - starts[0] >= timedelta(seconds=2)


def test_a_scheduled_workflow_starts_once_per_tick_with_two_beats(
    recorded, workers, tmp_path
):
    env, _ = workers
    with (
        workflow_registry.register_temporarily(every_minute),
        celery_beat(env, tmp_path / "one-beat-schedule"),
        celery_beat(env, tmp_path / "two-beat-schedule"),
    ):
        wait_for(
            lambda: ScheduledWorkflow.objects.filter(name="everyMinute").exists(),
            what="a sweep creating the schedule",
        )
        # Ticks due now, one after the other: both beats' sweeps race for each.
        ticks = [datetime(2026, 1, 1, 0, minute, tzinfo=UTC) for minute in range(3)]
        for tick in ticks:
            ScheduledWorkflow.objects.filter(name="everyMinute").update(
                next_tick_at=tick, enqueued_for=None
            )
            wait_for(
                lambda tick=tick: (
                    ScheduledWorkflow.objects.get(name="everyMinute").next_tick_at
                    > tick
                ),
                what="the tick being taken",
            )
            time.sleep(1.0)  # another sweep by each beat
    ids = [f"everyMinute@2026-01-01T00:0{minute}:00Z" for minute in range(3)]
    for workflow_id in ids:
        assert workflows.get(workflow_id).result(timeout=60).startswith("2026-01-01")
        assert StepRow.objects.filter(workflow_id=workflow_id).count() == 1
        assert Workflow.objects.get(pk=workflow_id).run_count == 1
