"""The admin for background work: failed work with its traceback and "Retry now",
workflow queues (depth, running, oldest wait), scheduled workflows (pause,
resume, run now). Every action is permission-checked."""

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission, User
from django.test import override_settings
from django.urls import reverse

from django_rivet import actors, workflows
from django_rivet.models import (
    QueueMessage,
    QueueMessageStatus,
    Schedule,
    ScheduledWorkflow,
    ScheduleStatus,
    Workflow,
)
from django_rivet.testing import freeze_time, run_due
from django_rivet.workflows import queues, workflow
from django_rivet.workflows.registry import register_temporarily

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def no_retries(settings):
    settings.RIVET = {"SCHEDULE_MAX_RETRIES": 0}


@pytest.fixture
def root(client):
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


@pytest.fixture
def viewer(client):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="django_rivet", codename__startswith="view_"
        )
    )
    client.force_login(user)
    return client


def failed_work():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "admin-failed")
        schedule_id = alarm.call("schedule_call", 1, "boom")
        box = actors.get_or_create("mailbox", "admin-failed")
        box.send("jobs", "crash")
        clock.advance(1)
        run_due()
    return schedule_id, QueueMessage.objects.get().pk


def act(client, model, action, ids, **extra):
    return client.post(
        reverse(f"admin:django_rivet_{model}_changelist"),
        {"action": action, "_selected_action": [str(i) for i in ids], **extra},
        follow=True,
    )


def test_failed_schedules_show_their_error_and_traceback_and_can_be_retried(root):
    schedule_id, _ = failed_work()
    listing = root.get(
        reverse("admin:django_rivet_schedule_changelist") + "?status__exact=failed"
    ).content.decode()
    assert "RuntimeError: boom on purpose" in listing
    page = root.get(
        reverse("admin:django_rivet_schedule_change", args=[schedule_id])
    ).content.decode()
    assert "<pre>Traceback (most recent call last):" in page
    response = act(root, "schedule", "retry_now", [schedule_id])
    assert "Retrying 1; 0 not failed." in response.content.decode()
    row = Schedule.objects.get(pk=schedule_id)
    assert (row.status, row.attempts, row.traceback) == (ScheduleStatus.PENDING, 0, "")


def test_failed_messages_show_their_traceback_and_can_be_retried(root):
    _, message_id = failed_work()
    page = root.get(
        reverse("admin:django_rivet_queuemessage_change", args=[message_id])
    ).content.decode()
    assert "RuntimeError: secret detail" in page  # the detail, server-side only
    assert "<pre>Traceback" in page
    response = act(root, "queuemessage", "retry_now", [message_id])
    assert "Retrying 1; 0 not failed." in response.content.decode()
    assert QueueMessage.objects.get().status == QueueMessageStatus.PENDING


def test_viewers_see_failed_work_but_cannot_retry_it(viewer):
    schedule_id, message_id = failed_work()
    act(viewer, "schedule", "retry_now", [schedule_id])
    act(viewer, "queuemessage", "retry_now", [message_id])
    assert Schedule.objects.get().status == ScheduleStatus.FAILED
    assert QueueMessage.objects.get().status == QueueMessageStatus.FAILED


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
    assert "idle" in page  # configured, never used: listed too
    stats = {s.name: s for s in queues.queue_stats()}
    assert (stats["pair"].depth, stats["pair"].running) == (1, 2)
    workflows_page = viewer.get(
        reverse("admin:django_rivet_workflow_changelist")
        + "?queue=pair&status__exact=queued"
    )
    assert workflows_page.status_code == 200
    assert Workflow.objects.filter(queue="pair", status="queued").count() == 1


@workflow(name="admin_nightly", cron="0 2 * * *", tz="UTC")
async def admin_nightly(ctx, tick):
    return tick


def test_scheduled_workflows_can_be_paused_resumed_and_run_now(root):
    with register_temporarily(admin_nightly), freeze_time(START):
        listing = root.get(reverse("admin:django_rivet_scheduledworkflow_changelist"))
        assert "admin_nightly" in listing.content.decode()
        response = act(root, "scheduledworkflow", "pause_schedules", ["admin_nightly"])
        assert "Pause: admin_nightly." in response.content.decode()
        assert ScheduledWorkflow.objects.get().paused is True
        act(root, "scheduledworkflow", "resume_schedules", ["admin_nightly"])
        assert ScheduledWorkflow.objects.get().paused is False
        response = act(root, "scheduledworkflow", "run_now", ["admin_nightly"])
        assert "admin_nightly@2026-06-01T12:00:00Z" in response.content.decode()
    assert Workflow.objects.filter(pk="admin_nightly@2026-06-01T12:00:00Z").exists()


def test_viewers_cannot_pause_or_run_scheduled_workflows(viewer):
    with register_temporarily(admin_nightly), freeze_time(START):
        viewer.get(reverse("admin:django_rivet_scheduledworkflow_changelist"))
        act(viewer, "scheduledworkflow", "pause_schedules", ["admin_nightly"])
        act(viewer, "scheduledworkflow", "run_now", ["admin_nightly"])
    assert ScheduledWorkflow.objects.get().paused is False
    assert not Workflow.objects.exists()
