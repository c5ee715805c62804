"""Real Celery workers on a real Redis fire schedules exactly once.

The test process creates schedules (sending their ETA tasks to Redis after
commit); workers started from the project's Celery app fire them against the
same test database. Nothing here asserts timing: the tests poll the database
with generous deadlines.
"""

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from django_rivet import actors
from django_rivet.models import Actor as ActorRow
from django_rivet.models import Schedule, ScheduleStatus
from tests.support.celery_app import app
from tests.support.database import SEVERAL_PROCESSES
from tests.support.polling import wait_for
from tests.support.servers import celery_broker, celery_worker, kill9, server_env

# Several worker processes on one database: PostgreSQL only.
pytestmark = [*SEVERAL_PROCESSES, pytest.mark.django_db(transaction=True)]


def rings(actor_id):
    state = ActorRow.objects.get(pk=actor_id).decoded_state()
    return [ring["label"] for ring in state["rings"]]


def done(*schedule_ids):
    fired = Schedule.objects.filter(pk__in=schedule_ids, status=ScheduleStatus.DONE)
    return fired.count() == len(schedule_ids)


def wait_until_consuming(client):
    """Send a harmless task and wait until a worker has taken it."""
    app.send_task("rivet.deliver_queue", [str(uuid.uuid4())])
    wait_for(lambda: client.llen("celery") == 0, what="a worker consuming")


def test_a_worker_fires_a_schedule_through_its_eta_task(broker, redis_url):
    env = server_env(RIVET_TEST_REDIS_URL=redis_url)
    alarm = actors.get_or_create("alarmClock", "celery")
    with celery_worker(env):  # no beat: only the ETA task can fire it
        schedule_id = alarm.call("set_alarm", 2, "from celery")
        assert Schedule.objects.get(pk=schedule_id).enqueued is True
        wait_for(lambda: done(schedule_id), what="the schedule firing")
    assert rings(alarm.actor_id) == ["from celery"]
    (ring,) = ActorRow.objects.get(pk=alarm.actor_id).decoded_state()["rings"]
    assert ring["info"]["kind"] == "schedule"
    assert ring["info"]["id"] == schedule_id


def test_the_sweeper_fires_a_schedule_whose_worker_was_killed(broker, redis_url):
    env = server_env(RIVET_TEST_REDIS_URL=redis_url)
    alarm = actors.get_or_create("alarmClock", "killed")
    with celery_worker(env, name="doomed") as doomed:
        wait_until_consuming(broker)
        schedule_id = alarm.call("set_alarm", 3, "survivor")
        # The worker holds the ETA task in memory (unacknowledged)...
        wait_for(
            lambda: broker.llen("celery") == 0 and broker.hlen("unacked") > 0,
            what="the worker prefetching the ETA task",
        )
        kill9(doomed)  # ...and dies before it is due.
    assert Schedule.objects.get(pk=schedule_id).status == ScheduleStatus.PENDING
    with celery_worker(env, beat=True, name="sweeper"):
        wait_for(lambda: done(schedule_id), what="the sweeper firing it")
        time.sleep(1)  # room for a wrong second firing to show up
    assert rings(alarm.actor_id) == ["survivor"]


def test_two_workers_and_two_beat_sweepers_fire_100_schedules_once_each(
    broker, redis_url
):
    env = server_env(RIVET_TEST_REDIS_URL=redis_url)
    past = datetime.now(UTC) - timedelta(minutes=1)
    expected, schedule_ids = {}, []
    with celery_broker("memory://"):  # their own tasks are lost
        for index in range(10):
            alarm = actors.get_or_create("alarmClock", f"race-{index}")
            labels = [f"{index}/{n}" for n in range(10)]
            for label in labels:
                schedule_ids.append(alarm.call("set_alarm_at", past, label))
            expected[alarm.actor_id] = labels
    # Duplicate deliveries for half of them race the sweepers.
    for schedule_id in schedule_ids[::2]:
        for _ in range(2):
            app.send_task("rivet.fire_schedule", [schedule_id])
    with (
        celery_worker(env, beat=True, pool="threads", concurrency=2, name="a"),
        celery_worker(env, beat=True, pool="threads", concurrency=2, name="b"),
    ):
        wait_for(lambda: done(*schedule_ids), timeout=80, what="all 100 firing")
        time.sleep(1)
    for actor_id, labels in expected.items():
        assert sorted(rings(actor_id)) == sorted(labels)
