"""One-shot schedules: ctx.schedule, firing when due, exactly once in effect."""

from datetime import timedelta

import pytest
from django.test import override_settings

from django_rivet import (
    ActionNotFound,
    Actor,
    InvalidArgs,
    TooManySchedules,
    UserError,
    action,
    actors,
)
from django_rivet.models import CronJob, QueueMessage, Schedule, ScheduleStatus
from django_rivet.scheduling import claims, due, schedule_runs
from django_rivet.scheduling.schedules import MAX_PENDING_SCHEDULES
from django_rivet.testing import freeze_time, register_temporarily, run_due
from tests.support.clock import START

# pg: the PostgreSQL leg runs this module (claims of due schedules (SKIP LOCKED)).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]


def rings(handle):
    return [ring["label"] for ring in state_of(handle)["rings"]]


def state_of(handle):
    from django_rivet.models import Actor as ActorRow

    return ActorRow.objects.get(pk=handle.actor_id).decoded_state()


def test_after_fires_once_when_due_and_not_before():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "after")
        alarm.call("set_alarm", 30, "wake up")
        clock.advance(29.9)
        assert run_due() == 0
        assert rings(alarm) == []
        clock.advance(0.1)
        assert run_due() == 1
        assert rings(alarm) == ["wake up"]
        clock.advance(3600)
        assert run_due() == 0
    assert rings(alarm) == ["wake up"]


def test_after_accepts_a_timedelta():
    class Later(Actor):
        name = "later"

        @action
        def go(self, ctx):
            ctx.schedule.after(timedelta(minutes=2), "done")

        @action
        def done(self, ctx):
            ctx.state = "done"

    with freeze_time(START) as clock, register_temporarily(Later):
        later = actors.get_or_create("later")
        later.call("go")
        clock.advance(119)
        assert run_due() == 0
        clock.advance(1)
        assert run_due() == 1
        assert state_of(later) == "done"


def test_async_actions_schedule_with_the_async_twins():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "async")
        alarm.call("aset_alarm", 5, "async")
        clock.advance(5)
        assert run_due() == 1
    assert rings(alarm) == ["async"]


def test_at_fires_at_the_given_time_and_past_times_fire_at_once():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "at")
        alarm.call("set_alarm_at", START + timedelta(minutes=10), "later")
        alarm.call("set_alarm_at", START - timedelta(days=1), "overdue")
        assert run_due() == 1
        assert rings(alarm) == ["overdue"]
        clock.advance(599)
        assert run_due() == 0
        clock.advance(1)
        assert run_due() == 1
    assert rings(alarm) == ["overdue", "later"]


def test_cancel_stops_a_pending_schedule_and_reports_whether_it_did():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "cancel")
        keep = alarm.call("set_alarm", 10, "keep")
        drop = alarm.call("set_alarm", 10, "drop")
        assert alarm.call("cancel_alarm", drop) is True
        assert alarm.call("cancel_alarm", drop) is False
        assert alarm.call("cancel_alarm", "not-a-uuid") is False
        clock.advance(10)
        assert run_due() == 1
        assert alarm.call("cancel_alarm", keep) is False  # already fired
    assert rings(alarm) == ["keep"]


def test_get_and_list_describe_schedules():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "list")
        second = alarm.call("set_alarm", 20, "second")
        first = alarm.call("set_alarm", 10, "first")
        listed = alarm.call("alarms")
        assert [item["id"] for item in listed] == [first, second]
        assert listed[0]["action"] == "ring"
        assert listed[0]["args"] == ["first"]
        assert listed[0]["run_at"] == START + timedelta(seconds=10)
        assert listed[0]["status"] == "pending"
        clock.advance(10)
        run_due()
        fired = alarm.call("alarm", first)
        assert fired["status"] == "done"
        assert fired["fired_at"] == START + timedelta(seconds=10)
        assert fired["finished_at"] is not None
        assert [item["id"] for item in alarm.call("alarms")] == [second]
        assert alarm.call("alarm", "missing") is None
    other = actors.get_or_create("alarmClock", "someone else")
    assert other.call("alarm", second) is None  # only the owner sees it


def test_fire_info_tells_the_action_what_fired_it():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "info")
        schedule_id = alarm.call("set_alarm", 60, "x")
        clock.advance(75)  # fired 15 s late
        run_due()
    info = state_of(alarm)["rings"][0]["info"]
    assert info == {
        "kind": "schedule",
        "id": schedule_id,
        "name": "ring",
        "scheduled_at": START + timedelta(seconds=60),
        "fired_at": START + timedelta(seconds=75),
        "attempt": 1,
    }


def test_rolled_back_action_schedules_nothing():
    alarm = actors.get_or_create("alarmClock", "rollback")
    with pytest.raises(UserError):
        alarm.call("schedule_everything_then_fail")
    assert not Schedule.objects.exists()
    assert not CronJob.objects.exists()
    assert not QueueMessage.objects.exists()


@override_settings(RIVET={"SCHEDULE_MAX_RETRIES": 0})
def test_raising_action_without_retries_is_failed_and_not_run_again():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "boom")
        schedule_id = alarm.call("schedule_call", 5, "boom")
        clock.advance(5)
        assert run_due() == 1
        clock.advance(3600)
        assert run_due() == 0
    row = Schedule.objects.get(pk=schedule_id)
    assert row.status == ScheduleStatus.FAILED
    assert row.error == "RuntimeError: boom on purpose"
    assert row.fired_at == START + timedelta(seconds=5)
    assert state_of(alarm)["rings"] == []  # the action's writes rolled back


def test_unknown_action_or_bad_arguments_are_refused_when_scheduling():
    alarm = actors.get_or_create("alarmClock", "refused")
    with pytest.raises(ActionNotFound):
        alarm.call("schedule_call", 5, "no_such_action")
    with pytest.raises(InvalidArgs):
        alarm.call("schedule_call", 5, "ring", "a", "too many")
    with pytest.raises(InvalidArgs):
        alarm.call("schedule_call", 5, "ring", 42)  # label: str
    with pytest.raises(ValueError):
        alarm.call("set_alarm", -1, "negative")
    assert not Schedule.objects.exists()


def test_schedule_of_an_action_that_no_longer_exists_is_deleted():
    class Versioned(Actor):
        name = "versioned"

        @action
        def go(self, ctx):
            ctx.schedule.after(10, "old_action")

        @action
        def old_action(self, ctx):
            raise AssertionError("removed code must not run")

    class VersionedLater(Actor):
        name = "versioned"

        @action
        def go(self, ctx):
            pass

    with freeze_time(START) as clock:
        with register_temporarily(Versioned):
            actors.get_or_create("versioned").call("go")
        assert Schedule.objects.count() == 1
        clock.advance(10)
        with register_temporarily(VersionedLater):
            assert run_due() == 1
    assert not Schedule.objects.exists()


def test_at_most_1000_pending_schedules_per_actor():
    class Many(Actor):
        name = "many"

        @action
        def fill(self, ctx, count: int):
            for _ in range(count):
                ctx.schedule.after(60, "noop")

        @action
        def noop(self, ctx):
            pass

    with register_temporarily(Many):
        many = actors.get_or_create("many")
        many.call("fill", MAX_PENDING_SCHEDULES)
        with pytest.raises(TooManySchedules) as refused:
            many.call("fill", 1)
        assert refused.value.code == "too_many_schedules"
        assert refused.value.metadata == {"limit": 1000}
        # Another actor has its own budget.
        actors.get_or_create("many", "other").call("fill", 1)
    assert Schedule.objects.count() == MAX_PENDING_SCHEDULES + 1


def test_duplicate_deliveries_fire_once():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "dupes")
        schedule_id = alarm.call("set_alarm", 1, "once")
        assert schedule_runs.fire_schedule(schedule_id) == claims.Fired.NOT_CLAIMED
        clock.advance(1)
        assert schedule_runs.fire_schedule(schedule_id) == claims.Fired.OK
        assert schedule_runs.fire_schedule(schedule_id) == claims.Fired.NOT_CLAIMED
        assert run_due() == 0
    assert rings(alarm) == ["once"]


def test_a_claim_taken_over_after_its_lease_fires_once():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "stale")
        alarm.call("set_alarm", 1, "once")
        clock.advance(1)
        # A firer claims the schedule, then stalls past its lease.
        (stalled,) = schedule_runs.claim_schedules(due_before=clock.datetime())
        clock.advance(claims.claim_lease() + 1)
        assert due.recover_stale_claims() == 1
        assert run_due() == 1
        # The stalled firer wakes up: its claim is gone, nothing happens.
        assert schedule_runs.fire_claimed_schedule(stalled) == claims.Fired.LOST
    assert rings(alarm) == ["once"]


def test_schedules_go_away_with_their_actor():
    alarm = actors.get_or_create("alarmClock", "destroyed")
    alarm.call("set_alarm", 10, "never")
    alarm.destroy()
    assert not Schedule.objects.exists()


def test_a_pending_schedule_can_be_fired_now_on_demand():
    with freeze_time(START):
        alarm = actors.get_or_create("alarmClock", "force")
        schedule_id = alarm.call("set_alarm", 3600, "early")
        assert schedule_runs.fire_schedule(schedule_id) == claims.Fired.NOT_CLAIMED
        assert schedule_runs.fire_schedule(schedule_id, force=True) == claims.Fired.OK
        assert schedule_runs.fire_schedule(schedule_id, force=True) == (
            claims.Fired.NOT_CLAIMED
        )
    assert rings(alarm) == ["early"]
