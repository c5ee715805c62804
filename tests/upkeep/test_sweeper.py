"""The sweeper: lost work is fired, stale claims recovered, many sweepers safe."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from django_rivet import actors, dispatch
from django_rivet.models import (
    CronJob,
    CronRun,
    QueueMessage,
    Schedule,
    ScheduleStatus,
)
from django_rivet.scheduling import claims, cron_runs, queue_delivery, schedule_runs
from django_rivet.scheduling.due import enqueue_upcoming, recover_stale_claims
from django_rivet.testing import freeze_time, run_due
from django_rivet.upkeep import sweeper
from tests.support.clock import START
from tests.support.threads import in_threads

# pg: the PostgreSQL leg runs this module (concurrent sweepers, claims, locks).
pytestmark = pytest.mark.pg


def rings(handle):
    from django_rivet.models import Actor as ActorRow

    state = ActorRow.objects.get(pk=handle.actor_id).decoded_state()
    return [ring["label"] for ring in state["rings"]]


@pytest.mark.django_db
def test_sweep_fires_a_schedule_only_once_it_is_a_sweep_interval_late():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "lost")
        alarm.call("set_alarm", 10, "lost task")
        clock.advance(10)
        # Its Celery task may still be on the way: leave it alone for now.
        assert sweeper.sweep()["fire_lost"] == 0
        clock.advance(5)
        assert sweeper.sweep()["fire_lost"] == 1
        assert sweeper.sweep()["fire_lost"] == 0
    assert rings(alarm) == ["lost task"]


@pytest.mark.django_db
def test_sweep_runs_lost_cron_runs_and_delivers_lost_messages():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "lost-cron")
        alarm.call("set_every", "tick", 10)
        box = actors.get_or_create("mailbox", "lost-message")
        box.send("jobs", "hello")
        clock.advance(16)
        assert sweeper.sweep()["fire_lost"] == 2
    assert CronRun.objects.get().result == "ok"
    assert QueueMessage.objects.get().status == "done"


@pytest.mark.django_db
def test_stale_claims_return_to_pending_and_fire_once():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "stale")
        alarm.call("set_alarm", 10, "alarm")
        alarm.call("set_every", "tick", 10)
        box = actors.get_or_create("mailbox", "stale")
        box.send("jobs", "message")
        clock.advance(10)
        # A worker claims everything, then dies before committing.
        (schedule_claim,) = schedule_runs.claim_schedules(due_before=clock.datetime())
        cron_claim = cron_runs.claim_cron(CronJob.objects.get())
        message_claim = queue_delivery.claim_next_message(box.actor_id)
        assert run_due() == 0
        clock.advance(claims.claim_lease() - 10)
        assert recover_stale_claims() == 0
        clock.advance(11)
        assert recover_stale_claims() == 3
        job = CronJob.objects.get()
        assert job.running is False
        assert job.next_run_at == START + timedelta(seconds=10)  # the lost run
        assert run_due() == 3
        for late in (
            schedule_runs.fire_claimed_schedule(schedule_claim),
            cron_runs.fire_claimed_cron(cron_claim),
            queue_delivery.deliver_claimed_message(message_claim),
        ):
            assert late == claims.Fired.LOST
    assert rings(alarm) == ["alarm"]
    assert CronRun.objects.filter(result="ok").count() == 1
    assert QueueMessage.objects.get().status == "done"


@pytest.mark.django_db
def test_work_entering_the_eta_horizon_gets_one_celery_task(recording_dispatch):
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "horizon")
        alarm.call("set_alarm", 3600, "in an hour")
        alarm.call("set_every", "hourly", 3600)
        assert Schedule.objects.get().enqueued is False
        assert CronJob.objects.get().enqueued_for is None
        assert enqueue_upcoming() == 0
        clock.advance(3600 - dispatch.ETA_HORIZON)
        assert enqueue_upcoming() == 2
        assert enqueue_upcoming() == 0
    due = (START + timedelta(hours=1)).timestamp()
    sent = [(job, eta) for job, _args, eta in recording_dispatch.sent]
    assert sorted(sent) == [("fire_schedule", due), ("run_cron", due)]


@pytest.mark.django_db
def test_fired_schedules_and_processed_messages_are_purged_after_a_day():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "purge")
        alarm.call("set_alarm", 1, "fired")
        alarm.call("set_alarm", 2 * 86400, "pending")
        box = actors.get_or_create("mailbox", "purge")
        box.send("jobs", "processed")
        clock.advance(1)
        run_due()
        clock.advance(86400 - 1)
        assert sweeper.purge_finished() == 0
        clock.advance(1.5)
        assert sweeper.purge_finished() == 2
    assert list(Schedule.objects.values_list("status", flat=True)) == ["pending"]
    assert not QueueMessage.objects.exists()


@pytest.mark.django_db
def test_listed_steps_run_and_a_failing_step_does_not_stop_the_sweep(
    monkeypatch,
):
    calls = []

    def broken():
        raise RuntimeError("broken step")

    steps = sweeper.steps()
    steps.insert(
        [s.name for s in steps].index("fire_lost"), sweeper.SweepStep("broken", broken)
    )
    steps.append(sweeper.SweepStep("extra", lambda: calls.append(1) or 7))
    monkeypatch.setattr(sweeper, "STEPS", tuple(steps))
    counts = sweeper.sweep()
    names = list(counts)
    assert names[0] == "recover_stale_claims"
    assert names.index("broken") == names.index("fire_lost") - 1
    assert names[-1] == "extra"
    assert counts["broken"] == 0 and counts["extra"] == 7 and calls == [1]


@pytest.mark.django_db
def test_rivet_sweep_command_reports_each_step(capsys):
    call_command("rivet_sweep")
    out = capsys.readouterr().out
    assert "fire_lost: 0" in out and "recover_stale_claims: 0" in out


@pytest.mark.django_db(transaction=True)
def test_concurrent_sweepers_fire_each_lost_schedule_exactly_once():
    past = datetime.now(UTC) - timedelta(minutes=1)
    alarms = [actors.get_or_create("alarmClock", f"race-{i}") for i in range(8)]
    expected = {}
    for alarm in alarms:
        labels = [f"{alarm.key[0]}/{n}" for n in range(6)]
        for label in labels:
            alarm.call("set_alarm_at", past, label)
        expected[alarm.actor_id] = labels
    start = threading.Barrier(4)

    def sweep():
        start.wait(10)
        for _ in range(3):
            sweeper.sweep()

    assert in_threads(sweep, 4, timeout=120) == []
    for alarm in alarms:
        assert sorted(rings(alarm)) == expected[alarm.actor_id]
    statuses = set(Schedule.objects.values_list("status", flat=True))
    assert statuses == {ScheduleStatus.DONE}
