"""The admin for workflow queues and workflows on a schedule.

A queue's page shows its depth, how many run and the oldest wait; scheduled
workflows can be paused, resumed and run now. Every action is
permission-checked.
"""

import pytest
from django.test import override_settings
from django.urls import reverse

from django_rivet import workflows
from django_rivet.models import ScheduledWorkflow, Workflow, WorkflowQueue
from django_rivet.testing import freeze_time
from django_rivet.workflows import queues, scheduled, workflow
from django_rivet.workflows.registry import register_temporarily
from tests.support.admin import act
from tests.support.clock import START

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_retries(settings):
    settings.RIVET = {"SCHEDULE_MAX_RETRIES": 0}


@override_settings(RIVET={"WORKFLOW_QUEUES": {"pair": {"concurrency": 2}, "idle": {}}})
def test_the_queue_page_shows_depth_running_and_oldest_wait(viewer):
    with freeze_time(START) as clock:
        for _ in range(3):
            workflows.start("approval", {}, queue="pair")
        # The test transaction commits each start: admission ran already.
        clock.advance(300)
        page = viewer.get(
            reverse("admin:django_rivet_workflowqueue_changelist")
        ).content.decode()
    assert "concurrency 2" in page
    assert "status__exact=queued" in page
    assert ">1</a>" in page and ">2</a>" in page  # depth 1, running 2
    assert "5\xa0minutes" in page
    # Configured, never used: named, and the page view wrote no row for it.
    assert "Configured, not used yet: idle." in page
    assert not WorkflowQueue.objects.filter(name="idle").exists()
    stats = {s.name: s for s in queues.queue_stats()}
    assert (stats["pair"].depth, stats["pair"].running) == (1, 2)
    workflows_page = viewer.get(
        reverse("admin:django_rivet_workflow_changelist")
        + "?queue=pair&status__exact=queued"
    )
    assert workflows_page.status_code == 200
    assert Workflow.objects.filter(queue="pair", status="queued").count() == 1


@override_settings(
    RIVET={
        "WORKFLOW_QUEUES": {
            "tenants": {
                "partition_concurrency": 1,
                "partition_rate_limit": (5, 60),
                "worker_concurrency": 3,
            }
        }
    }
)
def test_the_queue_page_shows_partition_and_process_limits(viewer):
    workflows.start("approval", {}, queue="tenants", partition_key="t1")
    page = viewer.get(reverse("admin:django_rivet_workflowqueue_changelist"))
    text = page.content.decode()
    assert "per partition: concurrency 1" in text
    assert "per partition: 5 starts per 60 s" in text
    assert "3 per worker process" in text


@workflow(name="admin_nightly", cron="0 2 * * *", tz="UTC")
async def admin_nightly(ctx, tick):
    return tick


def test_scheduled_workflows_can_be_paused_resumed_and_triggered(root):
    with register_temporarily(admin_nightly), freeze_time(START):
        listing = root.get(reverse("admin:django_rivet_scheduledworkflow_changelist"))
        # A page view writes nothing: the new schedule is named, not stored.
        assert "written at the next worker round or sweep: admin_nightly" in (
            listing.content.decode()
        )
        assert not ScheduledWorkflow.objects.exists()
        scheduled.sync()  # what the next worker round does
        listing = root.get(reverse("admin:django_rivet_scheduledworkflow_changelist"))
        assert "admin_nightly" in listing.content.decode()
        response = act(root, "scheduledworkflow", "pause_schedules", ["admin_nightly"])
        assert "Pause: admin_nightly." in response.content.decode()
        assert ScheduledWorkflow.objects.get().paused is True
        act(root, "scheduledworkflow", "resume_schedules", ["admin_nightly"])
        assert ScheduledWorkflow.objects.get().paused is False
        response = act(
            root, "scheduledworkflow", "trigger_schedules", ["admin_nightly"]
        )
        assert "admin_nightly@2026-06-01T12:00:00Z" in response.content.decode()
    assert Workflow.objects.filter(pk="admin_nightly@2026-06-01T12:00:00Z").exists()


def test_viewers_cannot_pause_or_run_scheduled_workflows(viewer):
    with register_temporarily(admin_nightly), freeze_time(START):
        scheduled.sync()
        viewer.get(reverse("admin:django_rivet_scheduledworkflow_changelist"))
        act(viewer, "scheduledworkflow", "pause_schedules", ["admin_nightly"])
        act(viewer, "scheduledworkflow", "trigger_schedules", ["admin_nightly"])
    assert ScheduledWorkflow.objects.get().paused is False
    assert not Workflow.objects.exists()


@workflow(name="admin_report")
async def admin_report(ctx, tick):
    return tick


def test_run_time_schedules_are_listed_with_the_codes_and_managed_alike(root):
    with register_temporarily(admin_nightly, admin_report), freeze_time(START):
        workflows.schedules.create(
            "report-eu", "admin_report", "0 2 * * *", context={"region": "eu"}
        )
        listing = root.get(
            reverse("admin:django_rivet_scheduledworkflow_changelist")
        ).content.decode()
        assert "report-eu" in listing and "admin_nightly" in listing
        assert "run time" in listing and "the code" in listing
        page = root.get(
            reverse("admin:django_rivet_scheduledworkflow_change", args=["report-eu"])
        ).content.decode()
        assert "region" in page
        act(root, "scheduledworkflow", "pause_schedules", ["report-eu"])
        assert workflows.schedules.get("report-eu").paused is True
        response = act(root, "scheduledworkflow", "trigger_schedules", ["report-eu"])
        assert "report-eu@2026-06-01T12:00:00Z" in response.content.decode()
        # The code's schedule is not deleted: it follows the code.
        response = act(
            root,
            "scheduledworkflow",
            "delete_schedules",
            ["report-eu", "admin_nightly"],
        )
        text = response.content.decode()
        assert "Delete: report-eu." in text
        assert "Could not delete admin_nightly" in text
    assert set(ScheduledWorkflow.objects.values_list("name", flat=True)) == {
        "admin_nightly"
    }
    run = Workflow.objects.get(pk="report-eu@2026-06-01T12:00:00Z")
    assert run.name == "admin_report"


def test_viewers_cannot_add_schedules(viewer):
    url = reverse("admin:django_rivet_scheduledworkflow_add")
    assert viewer.get(url).status_code == 403


def test_a_schedule_is_added_in_the_admin_through_create(root):
    url = reverse("admin:django_rivet_scheduledworkflow_add")
    form = {
        "name": "report-us",
        "workflow_name": "admin_report",
        "expression": "0 2 * * *",
        "timezone": "America/New_York",
        "context": '{"region": "us"}',
        "queue": "",
    }
    with register_temporarily(admin_report), freeze_time(START):
        refused = root.post(url, dict(form, expression="0 25 * * *"))
        assert "hour 25 out of range" in refused.content.decode()
        refused = root.post(url, dict(form, workflow_name="nope"))
        assert refused.status_code == 200
        assert not ScheduledWorkflow.objects.exists()
        response = root.post(url, form)
        assert response.status_code == 302
        made = workflows.schedules.get("report-us")
        assert (made.workflow_name, made.tz, made.context, made.from_code) == (
            "admin_report",
            "America/New_York",
            {"region": "us"},
            False,
        )
        taken = root.post(url, form)
        assert "exists already" in taken.content.decode()
