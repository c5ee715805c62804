"""Workflow schedules created at run time: ``workflows.schedules``.

DBOS Transact's scheduler tests (tests/test_scheduler.py), translated: each
test names the DBOS test it comes from. Driven under the virtual clock with
``run_due`` (the ticks, then the workflows they started), so "fires every
second, wait until it ran twice" becomes "every minute, advance the clock
two minutes" (cron here has five fields: no seconds). Where a difference
is deliberate, the test says so (docs/workflows.md, "Coming from DBOS").
"""

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings

from django_rivet import workflows
from django_rivet.exceptions import (
    InvalidCron,
    ScheduleExists,
    ScheduleNotFound,
    UnknownWorkflowQueue,
    WorkflowNotFound,
)
from django_rivet.models import ScheduledWorkflow, Workflow
from django_rivet.testing import freeze_time, run_due
from django_rivet.workflows import workflow
from django_rivet.workflows.registry import register_temporarily
from tests.support.clock import START

# pg: the PostgreSQL leg runs this module (ticks and apply under locks).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]

schedules = workflows.schedules

# A daily expression that cannot tick during a test (START is 12:00 UTC).
FAR = "0 0 * * *"


@workflow(name="sched_target")
async def sched_target(ctx, tick):
    return tick


@workflow(name="sched_other")
async def sched_other(ctx, tick):
    return tick


@workflow(name="sched_coded", cron="0 2 * * *", tz="UTC")
async def sched_coded(ctx, tick):
    return tick


@pytest.fixture(autouse=True)
def registered():
    with register_temporarily(sched_target, sched_other, sched_coded):
        yield


@pytest.fixture
def clock():
    with freeze_time(START) as clock:
        yield clock


def inputs(schedule_name):
    """The inputs of a schedule's workflows, oldest tick first."""
    rows = Workflow.objects.filter(pk__startswith=f"{schedule_name}@").order_by("pk")
    return [
        workflows.get(pk).snapshot().input for pk in rows.values_list("pk", flat=True)
    ]


def contexts(schedule_name):
    return [each["context"] for each in inputs(schedule_name)]


# -- DBOS test_schedule_crud -----------------------------------------------------------
def test_create_list_get_delete_and_the_list_filters(clock):
    created = schedules.create(
        "test-schedule",
        "sched_target",
        "* * * * *",
        tz="America/New_York",
        context={"env": "test"},
    )
    assert created.name == "test-schedule"
    (listed,) = schedules.list(from_code=False)
    assert listed == created
    assert (listed.workflow_name, listed.cron, listed.tz) == (
        "sched_target",
        "* * * * *",
        "America/New_York",
    )
    assert listed.context == {"env": "test"}
    assert (listed.queue, listed.paused, listed.from_code) == (None, False, False)
    assert listed.next_tick_at == START + timedelta(minutes=1)
    assert schedules.get("test-schedule") == created
    assert schedules.get("nonexistent") is None

    with pytest.raises(InvalidCron, match="Invalid cron expression"):
        schedules.create("bad-schedule", "sched_target", "not a cron")
    with pytest.raises(ScheduleExists, match="exists already"):
        schedules.create("test-schedule", "sched_target", "0 0 * * *")
    with pytest.raises(InvalidCron, match="Fake/Zone"):
        schedules.create("bad-tz", "sched_target", "* * * * *", tz="Fake/Zone")
    # Ours, not DBOS's: the workflow must be registered, the name fit.
    with pytest.raises(WorkflowNotFound):
        schedules.create("no-workflow", "no_such_workflow", "* * * * *")
    with pytest.raises(ValueError, match="1-200 characters"):
        schedules.create("x" * 201, "sched_target", "* * * * *")

    schedules.create("other-schedule", sched_other, "0 0 * * *")
    assert schedules.pause("other-schedule") is True
    runtime = {"from_code": False}
    names = lambda found: [s.name for s in found]  # noqa: E731
    assert names(schedules.list(paused=False, **runtime)) == ["test-schedule"]
    assert names(schedules.list(paused=True)) == ["other-schedule"]
    assert len(schedules.list(**runtime)) == 2
    assert names(schedules.list(workflow_name="sched_target")) == ["test-schedule"]
    assert names(schedules.list(workflow_name="sched_other")) == ["other-schedule"]
    assert len(schedules.list(workflow_name=["sched_target", "sched_other"])) == 2
    assert names(schedules.list(prefix="test-")) == ["test-schedule"]
    assert names(schedules.list(prefix="other-")) == ["other-schedule"]
    assert len(schedules.list(prefix=["test-", "other-"])) == 2
    assert schedules.list(prefix="nonexistent-") == []
    assert len(schedules.list(paused=False, prefix="test-")) == 1
    assert schedules.list(paused=True, prefix="test-") == []

    assert schedules.delete("other-schedule") is True
    assert schedules.delete("test-schedule") is True
    assert schedules.delete("test-schedule") is False
    assert schedules.get("test-schedule") is None
    assert schedules.list(**runtime) == []


# -- DBOS test_list_schedules_undeserializable_context ---------------------------------
def test_a_context_is_json_so_listing_never_meets_one_it_cannot_read(clock):
    # A deliberate difference: DBOS pickles a context, so a class renamed
    # since makes it unreadable and list_schedules falls back to the raw
    # string. Here a context is JSON, refused at create when it is not, and
    # every stored one reads back.
    class Region:
        pass

    with pytest.raises(TypeError, match="stored as JSON"):
        schedules.create("bad-schedule", "sched_target", "* * * * *", context=Region())
    schedules.create("good-schedule", "sched_target", "* * * * *", context=("us", 1))
    assert schedules.get("good-schedule").context == ["us", 1]
    assert schedules.get("bad-schedule") is None


# -- DBOS test_apply_schedules ---------------------------------------------------------
def test_apply_creates_and_replaces_and_checks_everything_first(clock):
    applied = schedules.apply(
        [
            {
                "schedule_name": "sched-a",
                "workflow_name": "sched_target",
                "cron": "* * * * *",
                "context": {"region": "us"},
            },
            {
                "schedule_name": "sched-b",
                "workflow_name": sched_other,
                "cron": "0 0 * * *",
                "catch_up": True,
                "tz": "Europe/London",
            },
        ]
    )
    assert [s.name for s in applied] == ["sched-a", "sched-b"]
    by_name = {s.name: s for s in schedules.list(from_code=False)}
    assert len(by_name) == 2
    assert by_name["sched-a"].cron == "* * * * *"
    assert by_name["sched-a"].context == {"region": "us"}
    assert by_name["sched-a"].catch_up is False
    assert by_name["sched-a"].tz == "UTC"  # DBOS: None (its default zone)
    assert by_name["sched-b"].cron == "0 0 * * *"
    assert by_name["sched-b"].context is None
    assert by_name["sched-b"].catch_up is True
    assert by_name["sched-b"].tz == "Europe/London"

    # Replace sched-a, add sched-c: sched-b, not named, stays as it is.
    schedules.apply(
        [
            {
                "schedule_name": "sched-a",
                "workflow_name": "sched_target",
                "cron": "0 * * * *",
            },
            {
                "schedule_name": "sched-c",
                "workflow_name": "sched_other",
                "cron": "*/5 * * * *",
                "context": [1, 2, 3],
            },
        ]
    )
    by_name = {s.name: s for s in schedules.list(from_code=False)}
    assert len(by_name) == 3
    assert by_name["sched-a"].cron == "0 * * * *"
    assert by_name["sched-a"].context is None
    assert by_name["sched-a"].next_tick_at == datetime(2026, 6, 1, 13, 0, tzinfo=UTC)
    assert by_name["sched-c"].cron == "*/5 * * * *"
    assert by_name["sched-c"].context == [1, 2, 3]

    before = schedules.list()
    with pytest.raises(InvalidCron, match="Invalid cron expression"):
        schedules.apply(
            [
                {"schedule_name": "fine", "workflow_name": "sched_target", "cron": FAR},
                {"schedule_name": "bad", "workflow_name": "sched_target", "cron": "no"},
            ]
        )
    for missing, spec in (
        ("schedule_name", {"workflow_name": "sched_target", "cron": FAR}),
        ("workflow_name", {"schedule_name": "x", "cron": FAR}),
        ("cron", {"schedule_name": "x", "workflow_name": "sched_target"}),
    ):
        with pytest.raises(ValueError, match=f"missing required field '{missing}'"):
            schedules.apply([spec])
    with pytest.raises(ValueError, match="Unknown schedule field"):
        schedules.apply(
            [
                {
                    "schedule_name": "x",
                    "workflow_name": "sched_target",
                    "cron": FAR,
                    "schedule": FAR,
                }
            ]
        )
    # One wrong schedule changes nothing, not even the right ones before it.
    assert schedules.list() == before

    for name in ("sched-a", "sched-b", "sched-c"):
        schedules.delete(name)
    assert schedules.list(from_code=False) == []


# -- DBOS test_apply_schedules_optional_context ----------------------------------------
def test_apply_without_a_context_fires_with_none(clock):
    schedules.apply(
        [
            {
                "schedule_name": "no-context",
                "workflow_name": "sched_target",
                "cron": "* * * * *",
            }
        ]
    )
    (listed,) = schedules.list(from_code=False)
    assert listed.context is None
    clock.advance(60)
    run_due()
    assert inputs("no-context") == [
        {
            "scheduled_at": "2026-06-01T12:01:00Z",
            "schedule": "no-context",
            "context": None,
        }
    ]
    assert workflows.get("no-context@2026-06-01T12:01:00Z").status == "completed"


# -- DBOS test_apply_schedules_concurrent ----------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_concurrent_applies_of_one_schedule_make_one_row():
    workers = 4
    barrier = threading.Barrier(workers)
    spec = {
        "schedule_name": "shared-schedule",
        "workflow_name": "sched_target",
        "cron": "* * * * *",
        "context": {"region": "us"},
    }

    def apply_same_schedule():
        from django.db import connections

        try:
            barrier.wait(timeout=30)
            schedules.apply([spec])
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=workers) as executor:
        for future in [executor.submit(apply_same_schedule) for _ in range(workers)]:
            future.result()
    (row,) = schedules.list(from_code=False)
    assert (row.name, row.cron, row.context) == (
        "shared-schedule",
        "* * * * *",
        {"region": "us"},
    )
    created_at = row.created_at
    schedules.apply([dict(spec, cron="0 * * * *", context={"region": "eu"})])
    (row,) = schedules.list(from_code=False)
    # Updated in place (DBOS checks its schedule_id; the name is ours).
    assert row.created_at == created_at
    assert (row.cron, row.context) == ("0 * * * *", {"region": "eu"})
    schedules.delete("shared-schedule")


# -- DBOS test_apply_schedules_live_update ---------------------------------------------
def test_a_reapplied_context_is_the_next_ticks(clock):
    spec = {
        "schedule_name": "live-update",
        "workflow_name": "sched_target",
        "cron": "* * * * *",
    }
    schedules.apply([dict(spec, context={"version": 1})])
    clock.advance(60)
    run_due()
    schedules.apply([dict(spec, context={"version": 2})])
    # Same expression: the next tick stays where it was.
    assert schedules.get("live-update").next_tick_at == START + timedelta(minutes=2)
    clock.advance(120)
    run_due()
    assert contexts("live-update") == [{"version": 1}, {"version": 2}]


# -- DBOS test_apply_schedules_preserves_runtime_state ---------------------------------
def test_apply_keeps_the_paused_state_and_the_last_tick(clock):
    spec = {"schedule_name": "state-keep", "workflow_name": "sched_target", "cron": FAR}
    schedules.apply([dict(spec, context={"version": 1})])
    schedules.pause("state-keep")
    last = datetime(2020, 1, 1, tzinfo=UTC)
    ScheduledWorkflow.objects.filter(name="state-keep").update(last_tick_at=last)
    schedules.apply([dict(spec, context={"version": 2})])
    kept = schedules.get("state-keep")
    assert kept.paused is True
    assert kept.last_tick_at == last
    assert kept.context == {"version": 2}


# -- DBOS test_schedule_crud_from_workflow ---------------------------------------------
@workflow(name="sched_manager")
async def sched_manager(ctx, _input):
    @sync_to_async
    def crud():
        schedules.create(
            "wf-schedule", "sched_target", FAR, context={"from": "workflow"}
        )
        listed = [(s.name, s.context) for s in schedules.list(from_code=False)]
        schedules.delete("wf-schedule")
        return {"listed": listed, "after": schedules.get("wf-schedule") is None}

    # A difference: these are database functions, not steps of their own
    # (DBOS records createSchedule, listSchedules...). A workflow calls them
    # in its own step (off the event loop), recorded once and not run again
    # on replay or fork.
    return await ctx.step("manage schedules", crud)


@pytest.mark.django_db(transaction=True)  # the step runs off the loop's thread
def test_a_workflow_manages_schedules_in_a_step(clock):
    with register_temporarily(sched_manager):
        handle = workflows.start("sched_manager", None)
        run_due()
        assert handle.result(timeout=1) == {
            "listed": [["wf-schedule", {"from": "workflow"}]],
            "after": True,
        }


# -- DBOS test_dynamic_scheduler_fires -------------------------------------------------
def test_two_schedules_fire_with_their_contexts_and_zones(clock):
    schedules.create("every-minute-a", "sched_target", "* * * * *", context={"id": "a"})
    schedules.create(
        "every-minute-b",
        "sched_other",
        "* * * * *",
        context={"id": "b"},
        tz="America/New_York",
    )
    clock.advance(120)
    run_due()
    clock.advance(60)
    run_due()
    assert contexts("every-minute-a") == [{"id": "a"}] * 2
    assert contexts("every-minute-b") == [{"id": "b"}] * 2
    # The missed 12:01 tick folded into one late tick (no catch_up).
    assert [each["scheduled_at"] for each in inputs("every-minute-a")] == [
        "2026-06-01T12:01:00Z",
        "2026-06-01T12:03:00Z",
    ]
    for name in ("every-minute-a", "every-minute-b"):
        found = schedules.get(name)
        # A difference: last_tick_at is a UTC datetime whatever the zone
        # (DBOS's last_fired_at is a string in the schedule's zone).
        assert found.last_tick_at == datetime(2026, 6, 1, 12, 3, tzinfo=UTC)
        assert found.last_workflow_id == f"{name}@2026-06-01T12:03:00Z"


# -- DBOS test_dynamic_scheduler_delete_stops_firing -----------------------------------
def test_a_deleted_schedule_stops_firing(clock):
    schedules.create("delete-test", "sched_target", "* * * * *", context="delete-ctx")
    clock.advance(60)
    run_due()
    assert contexts("delete-test") == ["delete-ctx"]
    schedules.delete("delete-test")
    clock.advance(600)
    run_due()
    assert len(inputs("delete-test")) == 1
    # Its workflows stay.
    assert workflows.get("delete-test@2026-06-01T12:01:00Z").status == "completed"


# -- DBOS test_dynamic_scheduler_add_after_launch --------------------------------------
def test_a_schedule_added_while_the_worker_runs_fires(clock):
    clock.advance(120)
    run_due()
    assert not Workflow.objects.exists()
    schedules.create("late-add", "sched_target", "* * * * *")
    clock.advance(120)
    run_due()
    assert len(inputs("late-add")) == 1  # 12:03, and 12:04 is now
    clock.advance(60)
    run_due()
    assert len(inputs("late-add")) == 2


# -- DBOS test_dynamic_scheduler_replace_schedule --------------------------------------
def test_a_schedule_replaced_by_delete_and_create(clock):
    schedules.create("replaceable", "sched_target", FAR, context={"version": 1})
    clock.advance(180)
    run_due()
    assert not Workflow.objects.exists()
    schedules.delete("replaceable")
    schedules.create(
        "replaceable-fast", "sched_target", "* * * * *", context={"version": 2}
    )
    clock.advance(60)
    run_due()
    clock.advance(60)
    run_due()
    assert contexts("replaceable-fast") == [{"version": 2}] * 2
    schedules.delete("replaceable-fast")
    schedules.create(
        "replaceable-fast", "sched_target", "* * * * *", context={"version": 3}
    )
    clock.advance(60)
    run_due()
    clock.advance(60)
    run_due()
    assert contexts("replaceable-fast") == [{"version": 2}] * 2 + [{"version": 3}] * 2
    assert contexts("replaceable") == []


# -- DBOS test_backfill_schedule, test_backfill_naive_datetime -------------------------
def test_backfill_starts_the_ticks_of_a_range_once(clock):
    schedules.create(
        "backfill-test", "sched_target", "0 * * * *", context={"env": "backfill"}
    )
    start = datetime(2025, 1, 1, 0, 30, tzinfo=UTC)
    end = start + timedelta(hours=3)
    handles = schedules.backfill("backfill-test", start, end)
    assert [h.workflow_id for h in handles] == [
        f"backfill-test@2025-01-01T0{hour}:00:00Z" for hour in (1, 2, 3)
    ]
    run_due()
    assert [h.result(timeout=1)["context"] for h in handles] == [
        {"env": "backfill"}
    ] * 3
    # Again: the same ids, nothing new started.
    again = schedules.backfill("backfill-test", start, end)
    assert [h.workflow_id for h in again] == [h.workflow_id for h in handles]
    assert len(inputs("backfill-test")) == 3
    # A difference: both ends are included (DBOS stops before `end`).
    assert (
        len(schedules.backfill("backfill-test", start, start + timedelta(minutes=30)))
        == 1
    )
    # Without a zone: UTC, the start's and the end's each.
    naive = schedules.backfill(
        "backfill-test",
        datetime(2025, 1, 1, 4, 30, tzinfo=UTC),
        datetime(2025, 1, 1, 6, 30),
    )
    assert [h.workflow_id for h in naive] == [
        "backfill-test@2025-01-01T05:00:00Z",
        "backfill-test@2025-01-01T06:00:00Z",
    ]
    with pytest.raises(ScheduleNotFound, match="no-such-schedule"):
        schedules.backfill("no-such-schedule", start, end)


# -- DBOS test_backfill_with_timezone --------------------------------------------------
def test_backfill_reads_the_expression_in_the_schedules_zone(clock):
    schedules.create("tz-utc", "sched_target", "0 0 * * *")
    schedules.create("tz-ny", "sched_other", "0 0 * * *", tz="America/New_York")
    start = datetime(2024, 12, 31, 23, 0, tzinfo=UTC)
    end = datetime(2025, 1, 3, 0, 0, tzinfo=UTC) - timedelta(seconds=1)
    utc = schedules.backfill("tz-utc", start, end)
    ny = schedules.backfill("tz-ny", start, end)
    assert [h.workflow_id for h in utc] == [
        "tz-utc@2025-01-01T00:00:00Z",
        "tz-utc@2025-01-02T00:00:00Z",
    ]
    # Midnight in New York (winter) is 05:00 UTC.
    assert [h.workflow_id for h in ny] == [
        "tz-ny@2025-01-01T05:00:00Z",
        "tz-ny@2025-01-02T05:00:00Z",
    ]


# -- DBOS test_trigger_schedule --------------------------------------------------------
def test_trigger_starts_the_workflow_now_with_the_context(clock):
    schedules.create("trigger-test", "sched_target", FAR, context=[1, 2, 3])
    handle = schedules.trigger("trigger-test")
    # A difference: the id is the tick's, "<schedule>@<now>" (DBOS:
    # "sched-<schedule>-trigger-<now>"), so two triggers in one second
    # start one workflow.
    assert handle.workflow_id == "trigger-test@2026-06-01T12:00:00Z"
    run_due()
    assert handle.result(timeout=1) == {
        "scheduled_at": "2026-06-01T12:00:00Z",
        "schedule": "trigger-test",
        "context": [1, 2, 3],
    }
    with pytest.raises(ScheduleNotFound):
        schedules.trigger("no-such-schedule")


# -- DBOS test_list_workflows_by_schedule_name -----------------------------------------
def test_the_runs_of_a_schedule_are_found_by_their_id_prefix(clock):
    manual = workflows.start("sched_target", None)
    for name in ("search-a", "search-b"):
        schedules.create(name, "sched_target", FAR)
    handle_a = schedules.trigger("search-a")
    handle_b = schedules.trigger("search-b")
    run_due()
    # A difference: a run's schedule is its id's prefix and its input's
    # "schedule" (DBOS stores a schedule_name column to filter on).
    runs_a = workflows.filter(id_prefix="search-a@")
    assert [h.workflow_id for h in runs_a] == [handle_a.workflow_id]
    assert runs_a[0].name == "sched_target"
    assert runs_a[0].snapshot().input["schedule"] == "search-a"
    both = workflows.filter(id_prefix=["search-a@", "search-b@"])
    assert {h.workflow_id for h in both} == {handle_a.workflow_id, handle_b.workflow_id}
    assert manual.workflow_id not in {h.workflow_id for h in both}
    assert workflows.filter(id_prefix="never-fired@") == []


# -- DBOS test_pause_resume_schedule ---------------------------------------------------
def test_pause_and_resume(clock):
    schedules.create("pause-test", "sched_target", "* * * * *")
    clock.advance(60)
    run_due()
    assert schedules.pause("pause-test") is True
    assert schedules.pause("pause-test") is False
    assert schedules.get("pause-test").paused is True
    clock.advance(600)
    run_due()
    assert len(inputs("pause-test")) == 1
    assert schedules.resume("pause-test") is True
    assert schedules.resume("pause-test") is False
    assert schedules.get("pause-test").paused is False
    clock.advance(60)
    run_due()
    # Resumed from the next tick after now: the paused ones are not started.
    assert [each["scheduled_at"] for each in inputs("pause-test")] == [
        "2026-06-01T12:01:00Z",
        "2026-06-01T12:12:00Z",
    ]
    with pytest.raises(ScheduleNotFound):
        schedules.pause("no-such-schedule")


# -- DBOS test_automatic_backfill_on_restart -------------------------------------------
def test_catch_up_starts_every_tick_missed_while_nothing_ran(clock):
    schedules.create("backfill-restart", "sched_target", "0 * * * *", catch_up=True)
    schedules.create("folded", "sched_target", "0 * * * *")
    assert schedules.get("backfill-restart").catch_up is True
    clock.advance(3 * 3600 + 600)  # nothing ran from 12:00 to 15:10
    run_due()
    assert [each["scheduled_at"] for each in inputs("backfill-restart")] == [
        "2026-06-01T13:00:00Z",
        "2026-06-01T14:00:00Z",
        "2026-06-01T15:00:00Z",
    ]
    # Without catch_up the missed ticks fold into one late tick.
    assert [each["scheduled_at"] for each in inputs("folded")] == [
        "2026-06-01T13:00:00Z"
    ]
    assert schedules.get("backfill-restart").next_tick_at == datetime(
        2026, 6, 1, 16, 0, tzinfo=UTC
    )


# -- DBOS test_schedule_crud_async ----------------------------------------------------
@pytest.mark.django_db(transaction=True)  # the twins run off the loop's thread
async def test_the_async_twins(clock):
    created = await schedules.acreate(
        "async-schedule", "sched_target", "* * * * *", context={"async": True}
    )
    assert await schedules.alist(from_code=False) == [created]
    assert (await schedules.aget("async-schedule")).context == {"async": True}
    assert await schedules.aget("nonexistent") is None
    assert len(await schedules.alist(paused=False, prefix="async-")) == 1
    assert await schedules.alist(prefix="nope-") == []
    assert await schedules.apause("async-schedule") is True
    assert await schedules.aresume("async-schedule") is True
    clock.advance(1)
    handle = await schedules.atrigger("async-schedule")
    assert handle.workflow_id == "async-schedule@2026-06-01T12:00:01Z"
    start = datetime(2025, 1, 1, tzinfo=UTC)
    backfilled = await schedules.abackfill("async-schedule", start, start)
    assert [h.workflow_id for h in backfilled] == [
        "async-schedule@2025-01-01T00:00:00Z"
    ]
    assert await schedules.adelete("async-schedule") is True
    assert await schedules.aget("async-schedule") is None
    applied = await schedules.aapply(
        [
            {
                "schedule_name": "async-sched-a",
                "workflow_name": "sched_target",
                "cron": "* * * * *",
            },
            {
                "schedule_name": "async-sched-b",
                "workflow_name": "sched_other",
                "cron": "0 0 * * *",
                "catch_up": True,
                "tz": "Europe/London",
            },
        ]
    )
    assert [(s.name, s.catch_up, s.tz) for s in applied] == [
        ("async-sched-a", False, "UTC"),
        ("async-sched-b", True, "Europe/London"),
    ]


# -- Not translated ----------------------------------------------------------------
# test_instance_method_schedule_rejected, test_static_class_method_schedule,
# test_classmethod_schedule: a schedule names a registered workflow, never a
# function or method. test_schedule_thread_signature,
# test_long_schedule_shutdown: no thread per schedule here (one loop fires
# them all). test_schedule_name_survives_export_import: no export/import of
# workflows. test_client_*: DBOSClient's copies of the tests above (the
# remote client here drives actors, not schedules).
# test_scheduled_workflow_datetime_with_portable_serializer: scheduled_at is
# an ISO 8601 string in a JSON input already.


# -- DBOS test_schedule_with_queue_name ------------------------------------------------
@override_settings(RIVET={"WORKFLOW_QUEUES": {"scheduler-test-queue": {}}})
def test_a_schedule_starts_its_ticks_on_its_queue(clock):
    with pytest.raises(UnknownWorkflowQueue, match="nonexistent-queue"):
        schedules.create("bad-queue", "sched_target", FAR, queue="nonexistent-queue")
    schedules.create(
        "queued-schedule",
        "sched_target",
        "* * * * *",
        context={"queued": True},
        queue="scheduler-test-queue",
    )
    assert schedules.get("queued-schedule").queue == "scheduler-test-queue"
    assert schedules.list(from_code=False)[0].queue == "scheduler-test-queue"
    clock.advance(60)
    run_due()
    clock.advance(60)
    run_due()
    clock.advance(1)  # a trigger at a tick's second would be that tick's
    handle = schedules.trigger("queued-schedule")
    run_due()
    rows = Workflow.objects.filter(pk__startswith="queued-schedule@")
    assert rows.count() == 3
    assert set(rows.values_list("queue", flat=True)) == {"scheduler-test-queue"}
    assert handle.result(timeout=1)["context"] == {"queued": True}
    schedules.delete("queued-schedule")
    schedules.create("no-queue-schedule", "sched_target", FAR)
    assert schedules.get("no-queue-schedule").queue is None


# -- ours: the @workflow(cron=) schedules are rows of the same kind --------------------
def test_the_codes_schedules_are_listed_and_managed_with_them(clock):
    schedules.create("sched_coded-eu", "sched_coded", "0 2 * * *", tz="Europe/Paris")
    listed = {s.name: s for s in schedules.list()}
    assert listed["sched_coded"].from_code is True
    assert listed["sched_coded"].workflow_name == "sched_coded"
    assert listed["sched_coded-eu"].from_code is False
    # Several schedules of one workflow: the code's and one made at run time.
    assert [s.name for s in schedules.list(workflow_name="sched_coded")] == [
        "sched_coded",
        "sched_coded-eu",
    ]
    # The code's follow the code: not created over, applied or deleted.
    with pytest.raises(ScheduleExists, match="cron"):
        schedules.create("sched_coded", "sched_target", FAR)
    with pytest.raises(ScheduleExists, match="cron"):
        schedules.apply(
            [
                {
                    "schedule_name": "sched_coded",
                    "workflow_name": "sched_target",
                    "cron": FAR,
                }
            ]
        )
    with pytest.raises(ScheduleExists, match="cron"):
        schedules.delete("sched_coded")
    # ...but paused, resumed and triggered alike.
    assert schedules.pause("sched_coded") is True
    assert schedules.get("sched_coded").paused is True
    assert schedules.resume("sched_coded") is True
    assert (
        schedules.trigger("sched_coded").workflow_id
        == "sched_coded@2026-06-01T12:00:00Z"
    )
    clock.set(datetime(2026, 6, 2, 2, 0, tzinfo=UTC))
    run_due()
    assert {pk for pk in Workflow.objects.values_list("pk", flat=True)} == {
        "sched_coded@2026-06-01T12:00:00Z",
        "sched_coded@2026-06-02T02:00:00Z",
        "sched_coded-eu@2026-06-02T00:00:00Z",
    }
    assert inputs("sched_coded-eu")[0]["schedule"] == "sched_coded-eu"


def test_a_runtime_schedule_of_an_unregistered_workflow_waits(clock):
    schedules.create("waiting", "sched_target", "* * * * *")
    # As if its workflow were removed from the code since.
    ScheduledWorkflow.objects.filter(name="waiting").update(workflow_name="gone")
    clock.advance(120)
    run_due()  # not ticked, not listed, nothing raised
    assert not Workflow.objects.exists()
    assert schedules.get("waiting") is None
