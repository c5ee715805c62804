"""Failed background work is retried with backoff, then parked where people see it.

Schedules, cron runs and queue messages: each attempt is an invocation of
its own (a failed one rolls back), ``ctx.fire_info["attempt"]`` counts them,
a ``UserError`` is never retried, and a failure for good logs an ERROR and
sends ``work_failed`` once. Time is the virtual clock: each test moves it to
the stored retry time and runs what is due.
"""

import logging
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_rivet import Actor, UserError, action, actors, clock, queue_handler
from django_rivet.models import (
    CronJob,
    CronRun,
    QueueMessage,
    QueueMessageStatus,
    Schedule,
    ScheduleStatus,
)
from django_rivet.scheduling import retries
from django_rivet.signals import work_failed
from django_rivet.testing import freeze_time, register_temporarily, run_due
from tests.support.clock import START

# pg: the PostgreSQL leg runs this module (failed attempts roll back; counters in
# SQL).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]

# (what, attempt, virtual time): survives the rollback of failed attempts.
CALLS = []
# Keys of the flakyWork actors whose "fixable" action fails.
BROKEN = set()


class Flaky(Actor):
    """Work that fails its first ``fail_until`` attempts (-1: always)."""

    name = "flakyWork"
    initial_state = {"done": []}

    @action
    def plan(self, ctx, seconds: float, fail_until: int, max_retries=None):
        return ctx.schedule.after(seconds, "work", fail_until, max_retries=max_retries)

    @action
    def plan_refusal(self, ctx, seconds: float):
        return ctx.schedule.after(seconds, "refuse")

    @action
    def every(self, ctx, name: str, seconds: float, fail_until: int, max_retries=None):
        return ctx.cron.every(
            name, seconds, "work", fail_until, max_retries=max_retries
        )

    @action
    def work(self, ctx, fail_until: int):
        attempt = ctx.fire_info["attempt"]
        CALLS.append(("work", attempt, clock.now()))
        ctx.state["done"].append(attempt)  # rolled back when the attempt fails
        if fail_until < 0 or attempt <= fail_until:
            raise RuntimeError(f"attempt {attempt} fails")
        return attempt

    @action
    def plan_fixable(self, ctx, seconds: float):
        return ctx.schedule.after(seconds, "fixable")

    @action
    def fixable(self, ctx):
        CALLS.append(("fixable", ctx.fire_info["attempt"], clock.now()))
        if ctx.key in BROKEN:
            raise RuntimeError("broken until fixed")

    @action
    def refuse(self, ctx):
        CALLS.append(("refuse", ctx.fire_info["attempt"], clock.now()))
        raise UserError("not today", code="refused")

    @action
    def retry(self, ctx, schedule_id: str):
        return ctx.schedule.retry(schedule_id)

    @action
    def schedule(self, ctx, schedule_id: str):
        return ctx.schedule.get(schedule_id)

    @action
    def history(self, ctx, name: str):
        return ctx.cron.history(name)

    @action
    def relay(self, ctx, key: str, body: str):
        """Send to another actor's queue and wait, from inside an action."""
        box = ctx.actors.get_or_create("flakyWork", key)
        return box.send("jobs", body, wait=True, timeout=30)

    @queue_handler("jobs", max_retries=2)
    def on_job(self, ctx, body):
        CALLS.append((body, ctx.fire_info["attempt"], clock.now()))
        ctx.state["done"].append(body)
        if body.startswith("fail"):
            raise RuntimeError(f"{body} fails")
        if body == "refuse":
            raise UserError("not this one", code="refused")
        return body.upper()


@pytest.fixture(autouse=True)
def flaky():
    CALLS.clear()
    BROKEN.clear()
    with register_temporarily(Flaky):
        yield
    CALLS.clear()


@pytest.fixture
def failures():
    """Every work_failed signal sent during the test."""
    sent = []

    def receiver(sender, **kwargs):
        sent.append({"sender": sender, **kwargs})

    work_failed.connect(receiver)
    yield sent
    work_failed.disconnect(receiver)


def done(handle):
    from django_rivet.models import Actor as ActorRow

    return ActorRow.objects.get(pk=handle.actor_id).decoded_state()["done"]


def run_schedule_to_the_end(clock, schedule_id):
    """Move the clock to each retry of the schedule and fire it."""
    for _ in range(20):
        row = Schedule.objects.get(pk=schedule_id)
        if row.status != ScheduleStatus.PENDING:
            return row
        clock.set(row.run_at)
        run_due()
    raise AssertionError("the schedule never finished")


def delays(times):
    return [later - earlier for earlier, later in zip(times, times[1:], strict=False)]


def test_an_action_failing_twice_then_succeeding_runs_3_times_with_growing_delays():
    with freeze_time(START) as clock:
        box = actors.get_or_create("flakyWork", "twice")
        schedule_id = box.call("plan", 10, 2)
        clock.advance(10)
        row = run_schedule_to_the_end(clock, schedule_id)
    assert row.status == ScheduleStatus.DONE
    assert row.attempts == 3
    assert [attempt for _, attempt, _ in CALLS] == [1, 2, 3]
    first, second = delays([at for _, _, at in CALLS])
    # min(MAX, BASE * 2**(n-1)) with BASE 1 s, less up to a quarter (jitter).
    assert 0.75 <= first <= 1.0
    assert 1.5 <= second <= 2.0
    assert done(box) == [3]  # the failed attempts' writes rolled back


@override_settings(RIVET={"RETRY_BACKOFF_BASE": 10, "RETRY_BACKOFF_MAX": 25})
def test_the_backoff_follows_the_settings_and_stops_growing_at_the_maximum():
    with freeze_time(START) as clock:
        box = actors.get_or_create("flakyWork", "capped")
        schedule_id = box.call("plan", 0, 4, 5)
        run_schedule_to_the_end(clock, schedule_id)
    gaps = delays([at for _, _, at in CALLS])
    nominal = [10, 20, 25, 25]
    assert len(gaps) == 4
    for gap, expected in zip(gaps, nominal, strict=True):
        assert expected * 0.75 <= gap <= expected


def test_failing_always_is_failed_after_max_retries_plus_one_runs_then_retry_reruns_it(
    failures,
):
    with freeze_time(START) as clock:
        box = actors.get_or_create("flakyWork", "always")
        schedule_id = box.call("plan", 5, -1, 2)
        clock.advance(5)
        row = run_schedule_to_the_end(clock, schedule_id)
        assert row.status == ScheduleStatus.FAILED
        assert len(CALLS) == 3
        clock.advance(3600)
        assert run_due() == 0  # parked, not retried any more
        info = box.call("schedule", schedule_id)
        assert info["status"] == "failed"
        assert info["attempts"] == 3
        assert info["error"] == info["last_error"] == "RuntimeError: attempt 3 fails"
        assert "RuntimeError: attempt 3 fails" in row.traceback
        assert len(failures) == 1
        (failure,) = failures
        assert failure["sender"] is Flaky
        assert failure["kind"] == "schedule"
        assert failure["actor_id"] == box.actor_id
        assert failure["action"] == "work"
        assert failure["id"] == schedule_id
        assert str(failure["error"]) == "attempt 3 fails"

        assert box.call("retry", schedule_id) is True
        assert box.call("retry", schedule_id) is False  # pending now, not failed
        CALLS.clear()
        assert run_due() == 1
        assert [attempt for _, attempt, _ in CALLS] == [1]  # attempts start over
        assert box.call("schedule", schedule_id)["attempts"] == 1


def test_a_schedule_waiting_for_its_retry_is_pending_with_its_new_run_at():
    with freeze_time(START) as clock:
        box = actors.get_or_create("flakyWork", "waiting")
        schedule_id = box.call("plan", 5, 1)
        clock.advance(5)
        assert run_due() == 1
        info = box.call("schedule", schedule_id)
    assert info["status"] == "pending"
    assert START + timedelta(seconds=5.75) <= info["run_at"]
    assert info["run_at"] <= START + timedelta(seconds=6)
    assert info["attempts"] == 1
    assert info["error"] is None
    assert info["last_error"] == "RuntimeError: attempt 1 fails"
    assert info["max_retries"] == 3  # RIVET["SCHEDULE_MAX_RETRIES"]


def test_a_user_error_is_not_retried(failures):
    with freeze_time(START) as clock:
        box = actors.get_or_create("flakyWork", "refusal")
        schedule_id = box.call("plan_refusal", 1)
        clock.advance(1)
        assert run_due() == 1
        clock.advance(3600)
        assert run_due() == 0
        box.send("jobs", "refuse")
        assert run_due() == 1
        clock.advance(3600)
        assert run_due() == 0
    assert Schedule.objects.get(pk=schedule_id).status == ScheduleStatus.FAILED
    assert QueueMessage.objects.get().status == QueueMessageStatus.FAILED
    assert [what for what, _, _ in CALLS] == ["refuse", "refuse"]
    assert [f["kind"] for f in failures] == ["schedule", "message"]


@override_settings(RIVET={"SCHEDULE_MAX_RETRIES": 1})
def test_without_max_retries_the_setting_decides():
    with freeze_time(START) as clock:
        box = actors.get_or_create("flakyWork", "setting")
        schedule_id = box.call("plan", 0, -1)
        row = run_schedule_to_the_end(clock, schedule_id)
    assert row.status == ScheduleStatus.FAILED
    assert len(CALLS) == 2


def test_max_retries_is_checked_when_scheduling():
    box = actors.get_or_create("flakyWork", "bad-retries")
    kept = box.call("plan", 5, 0, 7)
    assert Schedule.objects.get(pk=kept).max_retries == 7
    for bad in (-1, 1001, "3", True):
        with pytest.raises((TypeError, ValueError), match="max_retries"):
            box.call("plan", 5, 0, bad)
    assert Schedule.objects.count() == 1


def test_each_failed_attempt_logs_a_warning_with_its_traceback_and_the_last_an_error(
    caplog,
):
    caplog.set_level(logging.WARNING, logger="django_rivet")
    with freeze_time(START) as clock:
        box = actors.get_or_create("flakyWork", "logged")
        schedule_id = box.call("plan", 0, -1, 1)
        run_schedule_to_the_end(clock, schedule_id)
    records = [r for r in caplog.records if r.name == "django_rivet.scheduler"]
    assert [r.levelname for r in records] == ["WARNING", "WARNING", "ERROR"]
    assert all(r.exc_info and r.exc_info[0] is RuntimeError for r in records[:2])
    assert "failed for good" in records[2].getMessage()
    assert "attempts=2" in records[2].getMessage()


# -- cron -----------------------------------------------------------------------------
def test_a_failed_cron_run_is_retried_before_the_next_run_and_recorded_once(failures):
    with freeze_time(START) as clock:
        box = actors.get_or_create("flakyWork", "cron")
        box.call("every", "job", 60, 2)
        clock.advance(60)
        assert run_due() == 1
        job = CronJob.objects.get()
        assert job.retry_at is not None
        assert job.next_run_at == START + timedelta(seconds=120)
        assert box.call("history", "job") == []  # not recorded while retrying
        for _ in range(2):
            clock.set(CronJob.objects.get().retry_at)
            assert run_due() == 1
        history = box.call("history", "job")
        assert len(history) == 1
        assert history[0]["result"] == "ok"
        assert history[0]["attempts"] == 3
        assert history[0]["scheduled_at"] == START + timedelta(seconds=60)
        assert [a for _, a, _ in CALLS] == [1, 2, 3]
        assert all(at < START.timestamp() + 120 for _, _, at in CALLS)
        job = CronJob.objects.get()
        assert (job.retry_at, job.attempts) == (None, 0)
        # The next run is a run of its own, attempt 1 again.
        clock.set(START + timedelta(seconds=120))
        assert run_due() == 1
    assert [a for _, a, _ in CALLS][-1] == 1
    assert failures == []


def test_a_cron_retry_that_would_reach_the_next_run_is_given_up(failures):
    with freeze_time(START) as clock:
        box = actors.get_or_create("flakyWork", "cron-short")
        # Every 5 s: retries wait ~1 s, ~2 s, then ~4 s would pass the next run.
        box.call("every", "job", 5, -1, 5)
        clock.advance(5)
        run_due()
        while (job := CronJob.objects.get()).retry_at is not None:
            clock.set(job.retry_at)
            run_due()
        history = box.call("history", "job")
        assert [(e["result"], e["attempts"]) for e in history] == [("error", 3)]
        assert history[0]["error"] == "RuntimeError: attempt 3 fails"
        assert CronRun.objects.get().traceback.startswith("Traceback")
        assert clock.now() < START.timestamp() + 10  # before the next run
    assert len(failures) == 1
    assert failures[0]["kind"] == "cron"
    assert failures[0]["action"] == "work"
    assert failures[0]["id"] == CronJob.objects.get().pk


def test_a_late_retry_runs_before_the_next_run_which_then_runs_too():
    with freeze_time(START) as clock:
        box = actors.get_or_create("flakyWork", "cron-late")
        box.call("every", "job", 60, 1)  # every run's first attempt fails
        clock.advance(60)
        run_due()  # attempt 1 fails; its retry waits ~1 s
        clock.advance(90)  # nothing fired meanwhile: the retry and run 120 due
        assert run_due() == 2
        history = box.call("history", "job")
    assert [(e["scheduled_at"], e["result"], e["attempts"]) for e in history] == [
        (START + timedelta(seconds=60), "ok", 2),
    ]
    # Run 120 was not skipped: it ran after the retry (and waits for its own).
    assert [(attempt, at - START.timestamp()) for _, attempt, at in CALLS] == [
        (1, 60),
        (2, 150),
        (1, 150),
    ]
    assert CronJob.objects.get().retry_for == START + timedelta(seconds=120)


# -- queue messages -------------------------------------------------------------------
def test_a_failing_message_holds_its_queue_until_its_retries_are_spent(failures):
    with freeze_time(START) as clock:
        box = actors.get_or_create("flakyWork", "queue")
        box.send("jobs", "fail-1")
        box.send("jobs", "next")
        assert run_due() == 1
        assert [body for body, _, _ in CALLS] == ["fail-1"]  # "next" waits
        for _ in range(2):
            clock.set(
                QueueMessage.objects.get(body__isnull=False, attempts__gt=0).retry_at
            )
            assert run_due() >= 1
    assert CALLS[:3] == [
        ("fail-1", 1, CALLS[0][2]),
        ("fail-1", 2, CALLS[1][2]),
        ("fail-1", 3, CALLS[2][2]),
    ]
    assert [body for body, _, _ in CALLS[3:]] == ["next"]  # then the queue moved on
    failed = QueueMessage.objects.get(status=QueueMessageStatus.FAILED)
    assert failed.attempts == 3
    assert failed.error["detail"] == "RuntimeError: fail-1 fails"
    assert done(box) == ["next"]
    assert [(f["kind"], f["action"], f["id"]) for f in failures] == [
        ("message", "jobs", failed.pk)
    ]


@pytest.mark.django_db(transaction=True)  # the sender delivers in a worker thread
@override_settings(RIVET={"RETRY_BACKOFF_BASE": 0.01})
def test_a_waiting_sender_is_told_failed_once_the_retries_are_spent():
    box = actors.get_or_create("flakyWork", "waiting-sender")
    reply = box.send("jobs", "fail-2", wait=True, timeout=30)
    assert reply == {
        "status": "failed",
        "error": {
            "group": "rivet",
            "code": "internal_error",
            "message": "An internal error occurred",
            "metadata": None,
        },
    }
    assert [attempt for _, attempt, _ in CALLS] == [1, 2, 3]
    assert box.send("jobs", "ok", wait=True, timeout=30) == {
        "status": "completed",
        "response": "OK",
    }


@pytest.mark.django_db(transaction=True)
@override_settings(RIVET={"RETRY_BACKOFF_BASE": 0.01})
def test_http_and_rivetkit_senders_get_the_failure_through_the_same_path(client):
    box = actors.get_or_create("flakyWork", "http")
    response = client.post(
        "/rivet/actors/flakyWork/queue/jobs?key=http",
        {"body": "refuse", "wait": True, "timeout": 30},
        content_type="application/json",
    )
    assert response.status_code == 200
    assert response.json() == {
        "status": "failed",
        "error": {
            "group": "user",
            "code": "refused",
            "message": "not this one",
            "metadata": None,
        },
    }
    # The RivetKit client has no failed status: it gets the error, as for
    # an action.
    response = client.post(
        f"/rivet/gateway/{box.actor_id}/queue/jobs",
        {"body": "fail-3", "name": "jobs", "wait": True, "timeout": 30000},
        content_type="application/json",
    )
    assert response.status_code == 500
    assert response.json()["code"] == "internal_error"
    assert [attempt for body, attempt, _ in CALLS if body == "fail-3"] == [1, 2, 3]


@pytest.mark.django_db(transaction=True)
@override_settings(RIVET={"RETRY_BACKOFF_BASE": 0.01})
async def test_a_sender_waiting_inside_a_websocket_action_is_told_failed():
    from django_rivet.testing import RivetCommunicator

    communicator = RivetCommunicator("flakyWork", "ws-relay")
    assert (await communicator.handshake())["type"] == "init"
    reply = await communicator.call("relay", "ws-target", "fail-4")
    await communicator.disconnect()
    assert reply["status"] == "failed"
    assert reply["error"]["code"] == "internal_error"
    assert [attempt for body, attempt, _ in CALLS if body == "fail-4"] == [1, 2, 3]


# -- retrying what failed: rivet_retry ---------------------------------------------
@override_settings(RIVET={"SCHEDULE_MAX_RETRIES": 0})
def test_rivet_retry_runs_failed_schedules_and_messages_again(capsys):
    with freeze_time(START):
        box = actors.get_or_create("flakyWork", "command")
        BROKEN.add(("command",))
        first = box.call("plan_fixable", 0)
        second = box.call("plan_fixable", 0)
        box.send("jobs", "refuse")
        run_due()
        assert Schedule.objects.failed().count() == 2
        BROKEN.clear()
        call_command("rivet_retry", "schedules", first)
        assert "1 schedule(s)" in capsys.readouterr().out
        assert run_due() == 1
        assert Schedule.objects.get(pk=first).status == ScheduleStatus.DONE
        assert Schedule.objects.get(pk=second).status == ScheduleStatus.FAILED
        message = QueueMessage.objects.get()
        call_command("rivet_retry", "messages", "--all")
        assert "1 message(s)" in capsys.readouterr().out
        assert QueueMessage.objects.get().status == QueueMessageStatus.PENDING
        assert run_due() == 1
        assert QueueMessage.objects.get(pk=message.pk).attempts == 1


def test_rivet_retry_needs_ids_or_all():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="or pass --all"):
        call_command("rivet_retry", "schedules")
    with pytest.raises(CommandError, match="not a schedule id"):
        call_command("rivet_retry", "schedules", "not-a-uuid")
    with pytest.raises(CommandError, match="not a message id"):
        call_command("rivet_retry", "messages", "x")


def test_backoff_stays_within_the_jitter_band():
    for attempt, nominal in [(1, 1), (2, 2), (3, 4), (9, 256), (10, 300), (80, 300)]:
        for _ in range(20):
            assert nominal * 0.75 <= retries.backoff(attempt) <= nominal


@pytest.mark.parametrize(
    "rivet",
    [
        {"SCHEDULE_MAX_RETRIES": -1},
        {"SCHEDULE_MAX_RETRIES": None},
        {"SCHEDULE_MAX_RETRIES": 1.5},
        {"RETRY_BACKOFF_BASE": 0},
        {"RETRY_BACKOFF_MAX": "300"},
    ],
)
def test_bad_retry_settings_are_e004(rivet):
    from django.core import checks

    with override_settings(RIVET=rivet):
        found = [
            m.id for m in checks.run_checks() if m.id and m.id.startswith("rivet.")
        ]
    assert found == ["rivet.E004"]
