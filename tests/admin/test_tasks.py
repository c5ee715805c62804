"""Django's tasks in the admin: attempts with tracebacks, and "Retry now"."""

import pytest
from django.urls import reverse

from django_rivet.testing import run_until_idle
from tests.support.admin import act, log_in_staff
from tests.tasks.compat import TaskResultStatus
from tests.testapp import tasks_api
from tests.testapp.models import StepRow

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_failed_task_shows_its_error_and_traceback(viewer):
    result = tasks_api.failing.enqueue("shown")
    run_until_idle(result.id)
    tasks_api.add.enqueue(1, 2)  # another task, listed too
    listed = viewer.get(reverse("admin:django_rivet_djangotask_changelist"))
    assert listed.status_code == 200
    assert "FAILED (failed)" in listed.content.decode()
    assert "READY (pending)" in listed.content.decode()
    page = viewer.get(reverse("admin:django_rivet_djangotask_change", args=[result.id]))
    html = page.content.decode()
    assert "tests.testapp.tasks_api.failing" in html
    assert "tests.testapp.tasks_api.TaskBoom" in html
    assert "TaskBoom: This task failed: shown" in html  # the traceback
    assert "Retry selected failed tasks now" not in html  # a viewer: no action


def test_retry_now_runs_a_failed_task_again(client):
    operator = log_in_staff(client, "view_djangotask", "change_djangotask")
    result = tasks_api.fails_until_allowed.enqueue("admin-retry")
    run_until_idle(result.id)
    StepRow.objects.create(workflow_id="admin-retry", step="allowed")
    response = act(operator, "djangotask", "retry_tasks", [result.id])
    assert "Retrying 1 task(s)." in response.content.decode()
    run_until_idle(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    response = act(operator, "djangotask", "retry_tasks", [result.id])
    assert f"Did not retry {result.id}" in response.content.decode()
