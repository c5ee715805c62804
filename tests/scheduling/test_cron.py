"""Recurring jobs of an actor: ctx.cron by expression or interval, runs, history.

Firing in the job's zone, coalescing missed runs, skipping runs that fall due
while one runs, and refusing bad definitions; the rules of the expressions
themselves (zones, DST, anchored intervals) are in tests/test_crontab.py.
"""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings

from django_rivet import Actor, InvalidCron, action, actors
from django_rivet.models import CronJob, CronRun
from django_rivet.scheduling import claims, cron_runs
from django_rivet.testing import freeze_time, register_temporarily, run_due
from tests.support.clock import START

# pg: the PostgreSQL leg runs this module (claims of due cron runs (SKIP LOCKED)).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]

PARIS = ZoneInfo("Europe/Paris")


def state_of(handle):
    from django_rivet.models import Actor as ActorRow

    return ActorRow.objects.get(pk=handle.actor_id).decoded_state()


def run_until(clock, when):
    """Advance the virtual clock to ``when`` and run what is due."""
    clock.set(when)
    return run_due()


def paris(*args):
    return datetime(*args, tzinfo=PARIS)


# -- cron jobs of an actor ------------------------------------------------------------
def test_cron_job_fires_on_its_expression_in_its_zone_across_dst():
    with freeze_time(datetime(2026, 3, 28, 0, 0, tzinfo=UTC)) as clock:
        alarm = actors.get_or_create("alarmClock", "nightly")
        job = alarm.call("set_cron", "nightly", "30 2 * * *", "Europe/Paris")
        assert job["next_run_at"] == paris(2026, 3, 28, 2, 30)
        fired = []
        for _ in range(3):
            next_run = CronJob.objects.get().next_run_at
            assert run_until(clock, next_run) == 1
            fired.append(next_run.astimezone(PARIS).strftime("%d %H:%M%z"))
    assert fired == ["28 02:30+0100", "29 03:00+0200", "30 02:30+0200"]
    scheduled = [tick["scheduled_at"] for tick in state_of(alarm)["ticks"]]
    assert [t.astimezone(PARIS).strftime("%d %H:%M") for t in scheduled] == [
        "28 02:30",
        "29 03:00",
        "30 02:30",
    ]


def test_cron_defaults_to_the_project_time_zone(settings):
    settings.TIME_ZONE = "Asia/Tokyo"
    with freeze_time(START):
        alarm = actors.get_or_create("alarmClock", "tokyo")
        job = alarm.call("set_cron", "daily", "0 9 * * *")
    assert job["tz"] == "Asia/Tokyo"
    assert job["next_run_at"] == datetime(2026, 6, 2, 0, 0, tzinfo=UTC)


def test_every_runs_one_interval_after_the_call_on_an_anchored_cadence():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "every")
        job = alarm.call("set_every", "tick", 60)
        assert job["next_run_at"] == START + timedelta(seconds=60)
        assert run_until(clock, START + timedelta(seconds=59.9)) == 0
        # Fired late each time: the schedule does not drift.
        assert run_until(clock, START + timedelta(seconds=61.5)) == 1
        assert run_until(clock, START + timedelta(seconds=125)) == 1
        assert run_until(clock, START + timedelta(seconds=179.9)) == 0
        assert run_until(clock, START + timedelta(seconds=180)) == 1
    ticks = state_of(alarm)["ticks"]
    assert [t["scheduled_at"] - START for t in ticks] == [
        timedelta(seconds=60),
        timedelta(seconds=120),
        timedelta(seconds=180),
    ]
    assert [t["fired_at"] - START for t in ticks] == [
        timedelta(seconds=61.5),
        timedelta(seconds=125),
        timedelta(seconds=180),
    ]
    assert CronJob.objects.get().next_run_at == START + timedelta(seconds=240)


def test_runs_missed_while_nothing_fired_coalesce_into_one():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "missed")
        alarm.call("set_every", "tick", 60)
        assert run_until(clock, START + timedelta(minutes=30)) == 1
        assert run_due() == 0
    (tick,) = state_of(alarm)["ticks"]
    assert tick["scheduled_at"] == START + timedelta(seconds=60)
    assert CronJob.objects.get().next_run_at == START + timedelta(minutes=31)


def test_fire_info_of_a_cron_run():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "cron-info")
        alarm.call("set_every", "heartbeat", 10)
        run_until(clock, START + timedelta(seconds=12))
    job = CronJob.objects.get()
    assert state_of(alarm)["ticks"] == [
        {
            "kind": "cron",
            "id": job.pk,
            "name": "heartbeat",
            "scheduled_at": START + timedelta(seconds=10),
            "fired_at": START + timedelta(seconds=12),
            "attempt": 1,
        }
    ]


def test_runs_falling_due_during_a_long_run_are_skipped():
    with freeze_time(START) as clock:

        class Slow(Actor):
            name = "slow"
            initial_state = {"runs": 0}

            @action
            def start(self, ctx):
                ctx.cron.every("work", 60, "work")

            @action
            def work(self, ctx):
                ctx.state["runs"] += 1
                clock.advance(150)  # this run takes 2.5 intervals

        with register_temporarily(Slow):
            slow = actors.get_or_create("slow")
            slow.call("start")
            assert run_until(clock, START + timedelta(seconds=60)) == 1
            history = slow_history()
            assert [(e.result, e.scheduled_at - START) for e in history] == [
                ("ok", timedelta(seconds=60)),
                ("skipped", timedelta(seconds=120)),
                ("skipped", timedelta(seconds=180)),
            ]
            assert CronJob.objects.get().next_run_at == START + timedelta(seconds=240)
            assert state_of(slow) == {"runs": 1}


def slow_history():
    return list(CronRun.objects.order_by("id"))


def test_a_run_due_while_another_worker_runs_the_job_is_skipped():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "overlap")
        alarm.call("set_every", "tick", 60)
        clock.set(START + timedelta(seconds=60))
        # Another worker claimed the first run and is still running it.
        claim = cron_runs.claim_cron(CronJob.objects.get())
        assert isinstance(claim, cron_runs.CronClaim)
        assert run_due() == 0  # not due: the claim moved next_run_at on
        clock.set(START + timedelta(seconds=120))
        assert run_due() == 1  # the second run overlaps the first: skipped
        assert cron_runs.fire_claimed_cron(claim) == claims.Fired.OK
        history = alarm.call("cron_history", "tick")
    assert [(e["result"], e["scheduled_at"] - START) for e in history] == [
        ("ok", timedelta(seconds=60)),
        ("skipped", timedelta(seconds=120)),
    ]
    skipped = history[1]
    assert skipped["fired_at"] is None and skipped["error"] is None
    assert len(state_of(alarm)["ticks"]) == 1


def test_history_is_trimmed_to_max_history_newest_first():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "trim")
        alarm.call("set_every_history", "tick", 5, 3)
        for step in range(1, 6):
            assert run_until(clock, START + timedelta(seconds=5 * step)) == 1
        history = alarm.call("cron_history", "tick")
        assert alarm.call("cron_history", "tick", 1) == history[:1]
    assert [e["scheduled_at"] - START for e in history] == [
        timedelta(seconds=25),
        timedelta(seconds=20),
        timedelta(seconds=15),
    ]
    assert all(e["result"] == "ok" and e["error"] is None for e in history)
    assert all(e["action"] == "tick" for e in history)
    assert CronRun.objects.count() == 3


@override_settings(RIVET={"SCHEDULE_MAX_RETRIES": 0})
def test_a_raising_cron_action_records_an_error_and_runs_again_next_time():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "cron-boom")
        alarm.call("set_every", "boom", 10, "boom")
        assert run_until(clock, START + timedelta(seconds=10)) == 1
        assert run_due() == 0  # no retries
        assert run_until(clock, START + timedelta(seconds=20)) == 1
        history = alarm.call("cron_history", "boom")
    assert [e["result"] for e in history] == ["error", "error"]
    assert history[0]["error"] == "RuntimeError: boom on purpose"
    assert history[0]["fired_at"] == START + timedelta(seconds=20)
    assert state_of(alarm)["rings"] == []
    job = CronJob.objects.get()
    assert job.running is False and job.claim_token is None


def test_a_cron_job_whose_action_no_longer_exists_is_deleted():
    class Versioned(Actor):
        name = "versioned"

        @action
        def go(self, ctx):
            ctx.cron.every("old", 10, "old_action")

        @action
        def old_action(self, ctx):
            raise AssertionError("removed code must not run")

    class VersionedLater(Actor):
        name = "versioned"

    with freeze_time(START) as clock:
        with register_temporarily(Versioned):
            actors.get_or_create("versioned").call("go")
        clock.advance(10)
        with register_temporarily(VersionedLater):
            assert run_due() == 1
    assert not CronJob.objects.exists()


def test_an_action_can_delete_its_own_job():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "self-delete")
        alarm.call("set_every", "twice", 5, "tick_then_stop", "twice")
        for step in range(1, 5):
            run_until(clock, START + timedelta(seconds=5 * step))
    assert len(state_of(alarm)["ticks"]) == 2
    assert not CronJob.objects.exists()


def test_setting_the_same_job_again_keeps_its_schedule_and_a_change_resets_it():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "idempotent")
        alarm.call("set_every", "tick", 60)
        clock.advance(30)
        again = alarm.call("set_every", "tick", 60)
        assert again["next_run_at"] == START + timedelta(seconds=60)
        changed = alarm.call("set_every", "tick", 90)
        assert changed["next_run_at"] == START + timedelta(seconds=120)
        assert changed["interval"] == 90.0
        assert CronJob.objects.count() == 1


def test_get_list_and_delete_jobs():
    with freeze_time(START):
        alarm = actors.get_or_create("alarmClock", "jobs")
        alarm.call("set_every", "b", 10)
        alarm.call("set_cron", "a", "*/5 * * * *", "UTC")
        assert [job["name"] for job in alarm.call("cron_jobs")] == ["a", "b"]
        job = alarm.call("cron_job", "a")
        assert job["kind"] == "cron"
        assert job["expression"] == "*/5 * * * *"
        assert job["action"] == "tick"
        assert job["next_run_at"] == START + timedelta(minutes=5)
        assert job["running"] is False
        assert alarm.call("cron_job", "missing") is None
        assert alarm.call("delete_cron", "a") is True
        assert alarm.call("delete_cron", "a") is False
        assert alarm.call("cron_history", "a") == []
        assert [job["name"] for job in alarm.call("cron_jobs")] == ["b"]


@pytest.mark.parametrize(
    "expression, tz",
    [
        ("61 * * * *", "UTC"),  # out of range
        ("* * *", "UTC"),  # too few fields
        ("* * * * * *", "UTC"),  # seconds are not supported
        ("0 0 31 2 *", "UTC"),  # never matches
        ("0 9 * * *", "Mars/Olympus_Mons"),
        ("0 9 * * *", "../etc/passwd"),
    ],
)
def test_invalid_cron_expressions_and_zones_are_refused(expression, tz):
    alarm = actors.get_or_create("alarmClock", "invalid")
    with pytest.raises(InvalidCron) as refused:
        alarm.call("set_cron", "bad", expression, tz)
    assert refused.value.qualified_code == "actor/invalid_cron"
    assert not CronJob.objects.exists()


@pytest.mark.parametrize("name", ["", "x" * 129, "job\x00"])
def test_a_bad_job_name_is_refused_on_every_database(name):
    alarm = actors.get_or_create("alarmClock", "bad-name")
    with pytest.raises(ValueError, match="cron job name"):
        alarm.call("set_cron", name, "0 9 * * *")
    assert not CronJob.objects.exists()


def test_every_interval_must_be_at_least_five_seconds():
    alarm = actors.get_or_create("alarmClock", "too-fast")
    with pytest.raises(InvalidCron):
        alarm.call("set_every", "fast", 4.9)
    alarm.call("set_every", "ok", 5)
    assert CronJob.objects.count() == 1


@pytest.mark.parametrize(
    ("expression", "message", "field"),
    [
        ("61 * * * *", "minute 61 out of range 0-59", "minute"),
        ("0 24 * * *", "hour 24 out of range 0-23", "hour"),
        ("0 0 0 * *", "day of month 0 out of range 1-31", "day of month"),
        ("0 0 1 13 *", "month 13 out of range 1-12", "month"),
        ("0 0 * * 8", "day of week 8 out of range 0-7", "day of week"),
        ("5-70 * * * *", "minute 70 out of range 0-59", "minute"),
        ("0,61 * * * *", "minute 61 out of range 0-59", "minute"),
        ("*/0 * * * *", "minute step 0", "minute"),
    ],
)
def test_a_bad_cron_field_is_named_with_its_range(expression, message, field):
    """Issue 12: '61 * * * *' has five fields; say which one is wrong."""
    alarm = actors.get_or_create("alarmClock", "field-range")
    with pytest.raises(InvalidCron) as refused:
        alarm.call("set_cron", "bad", expression, "UTC")
    assert message in refused.value.message
    assert "use five fields" not in refused.value.message
    assert refused.value.metadata["field"] == field


@pytest.mark.parametrize(
    "expression", ["0 9 * * 7", "0 9 * jan-mar mon-fri", "0 9 L * *", "0 9 * * 5#3"]
)
def test_valid_cron_syntax_beyond_plain_numbers_is_kept(expression):
    alarm = actors.get_or_create("alarmClock", "syntax")
    alarm.call("set_cron", "ok", expression, "UTC")
    assert CronJob.objects.count() == 1
