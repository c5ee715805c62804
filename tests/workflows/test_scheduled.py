"""Workflows on a schedule: @workflow(cron=...), one workflow per tick.

Driven under the virtual clock with run_due (which runs the ticks, then the
workflows they started).
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command

from django_rivet import workflows
from django_rivet.models import ScheduledWorkflow, Workflow
from django_rivet.testing import freeze_time, run_due
from django_rivet.workflows import scheduled, workflow
from django_rivet.workflows.registry import register_temporarily

# pg: the PostgreSQL leg runs this module (tick claims under locks).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]

START = datetime(2026, 6, 1, 1, 59, tzinfo=UTC)


@workflow(name="nightly_report", cron="0 2 * * *", tz="UTC")
async def nightly_report(ctx, tick):
    return await ctx.step("report", lambda: f"report for {tick['scheduled_at']}")


@workflow(name="paris_report", cron="30 9 * * 1-5", tz="Europe/Paris")
async def paris_report(ctx, tick):
    return tick


@pytest.fixture(autouse=True)
def nightly_report_registered():
    with register_temporarily(nightly_report):
        yield


def ids():
    return sorted(Workflow.objects.values_list("pk", flat=True))


def test_each_tick_starts_exactly_one_workflow_named_after_the_tick():
    with freeze_time(START) as clock:
        assert run_due() == 0
        row = ScheduledWorkflow.objects.get(name="nightly_report")
        assert row.next_tick_at == datetime(2026, 6, 1, 2, 0, tzinfo=UTC)
        clock.advance(60)
        assert run_due() == 2  # the tick, then its workflow's run
        assert run_due() == 0
        clock.advance(86400)
        run_due()
    assert ids() == [
        "nightly_report@2026-06-01T02:00:00Z",
        "nightly_report@2026-06-02T02:00:00Z",
    ]
    handle = workflows.get("nightly_report@2026-06-01T02:00:00Z")
    assert handle.result(timeout=1) == "report for 2026-06-01T02:00:00Z"
    assert handle.snapshot().input == {
        "scheduled_at": "2026-06-01T02:00:00Z",
        "schedule": "nightly_report",
        "context": None,
    }


def test_the_expression_is_read_in_its_time_zone():
    monday = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
    with freeze_time(monday) as clock, register_temporarily(paris_report):
        run_due()
        clock.set(datetime(2026, 6, 1, 7, 30, tzinfo=UTC))  # 09:30 in Paris
        run_due()
    assert "paris_report@2026-06-01T07:30:00Z" in ids()


def test_two_beats_racing_for_one_tick_start_it_once():
    with freeze_time(START) as clock:
        run_due()
        clock.advance(60)
        # Two beats read the row before either moves it on.
        first = ScheduledWorkflow.objects.get(name="nightly_report")
        second = ScheduledWorkflow.objects.get(name="nightly_report")
        definition = scheduled.definitions()["nightly_report"]
        assert scheduled._tick(first, definition) == 1
        assert scheduled._tick(second, definition) == 0
        assert run_due() == 1  # only the workflow's run
    assert ids() == ["nightly_report@2026-06-01T02:00:00Z"]


def test_missed_ticks_fold_into_one_and_backfill_starts_the_rest(capsys):
    with freeze_time(START) as clock:
        run_due()
        clock.advance(3 * 86400)  # nothing ran for three days
        run_due()
        assert ids() == ["nightly_report@2026-06-01T02:00:00Z"]
        row = ScheduledWorkflow.objects.get(name="nightly_report")
        assert row.next_tick_at == datetime(2026, 6, 4, 2, 0, tzinfo=UTC)
        call_command(
            "rivet_backfill",
            "nightly_report",
            "--from",
            "2026-06-01T00:00",
            "--to",
            "2026-06-04T02:00:00+00:00",
        )
        assert "Started 3 workflow(s); 1 tick(s) had one already." in (
            capsys.readouterr().out
        )
        call_command(
            "rivet_backfill",
            "nightly_report",
            "--from",
            "2026-06-01",
            "--to",
            "2026-06-04T03:00",
        )
        assert "Started 0 workflow(s); 4 tick(s)" in capsys.readouterr().out
    assert ids() == [f"nightly_report@2026-06-0{day}T02:00:00Z" for day in (1, 2, 3, 4)]


def test_rivet_backfill_refuses_what_it_cannot_do(monkeypatch):
    monkeypatch.setattr(scheduled, "MAX_BACKFILL", 5)
    for args, why in (
        (
            ["greet", "--from", "2026-06-01", "--to", "2026-06-02"],
            "no workflow of that name has a cron schedule",
        ),
        (["nightly_report", "--from", "yesterday", "--to", "2026-06-02"], "ISO"),
        (["nightly_report", "--from", "2026-06-02", "--to", "2026-06-01"], "before"),
        (
            ["nightly_report", "--from", "2026-06-01", "--to", "2026-06-07"],
            "More than 5",
        ),
    ):
        with pytest.raises(CommandError, match=why):
            call_command("rivet_backfill", *args)
    assert not Workflow.objects.exists()


def test_pause_resume_and_run_now():
    with freeze_time(START) as clock:
        run_due()
        assert scheduled.pause("nightly_report") is True
        assert scheduled.pause("nightly_report") is False
        clock.advance(2 * 86400)
        run_due()
        assert ids() == []  # paused: no tick started
        workflow_id = scheduled.run_now("nightly_report")
        assert workflow_id == "nightly_report@2026-06-03T01:59:00Z"
        assert scheduled.resume("nightly_report") is True
        # Resumed from the next tick after now: the paused ones are not run.
        row = ScheduledWorkflow.objects.get(name="nightly_report")
        assert row.next_tick_at == datetime(2026, 6, 3, 2, 0, tzinfo=UTC)
        clock.advance(60)
        run_due()
    assert ids() == [
        "nightly_report@2026-06-03T01:59:00Z",
        "nightly_report@2026-06-03T02:00:00Z",
    ]


def test_a_changed_expression_reschedules_from_now():
    with freeze_time(START) as clock:
        run_due()

        @workflow(name="nightly_report", cron="0 3 * * *", tz="UTC")
        async def later(ctx, tick):
            return None

        with register_temporarily(later):
            clock.advance(60)  # 02:00: the old expression's tick
            run_due()
            row = ScheduledWorkflow.objects.get(name="nightly_report")
            assert row.expression == "0 3 * * *"
            assert row.next_tick_at == datetime(2026, 6, 1, 3, 0, tzinfo=UTC)
    assert ids() == []


def test_a_workflow_without_a_schedule_makes_no_row():
    with freeze_time(START):
        run_due()
    assert set(ScheduledWorkflow.objects.values_list("name", flat=True)) == {
        "nightly_report"
    }
    assert scheduled.next_tick_due() == pytest.approx(
        (START + timedelta(minutes=1)).timestamp()
    )


# -- rivet.E702 ------------------------------------------------------------------------
def rivet_errors():
    from django.core import checks

    return [m for m in checks.run_checks() if m.id and m.id.startswith("rivet.")]


@pytest.mark.parametrize(
    ("cron", "tz", "problem"),
    [
        ("0 25 * * *", "UTC", "hour 25 out of range 0-23"),
        ("0 2 * * *", "Mars/Olympus", "Mars/Olympus"),
        ("0 0 31 2 *", "UTC", "never matches"),
    ],
)
def test_a_scheduled_workflow_that_cannot_be_scheduled_is_e702(cron, tz, problem):
    @workflow(name="broken_schedule", cron=cron, tz=tz)
    async def broken(ctx, tick):
        return None

    with register_temporarily(broken), freeze_time(START):
        (error,) = rivet_errors()
        assert error.id == "rivet.E702"
        assert "broken_schedule" in error.msg
        assert problem in error.msg
        run_due()  # skipped (and logged), never scheduled
    assert not ScheduledWorkflow.objects.filter(name="broken_schedule").exists()
