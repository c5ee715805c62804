"""Django tasks through real Celery workers on Redis (PostgreSQL).

The test process enqueues (the ``rivet.run_workflow`` message goes to Redis
once it commits); workers of the project's Celery app run the tasks against
the test database. Nothing asserts timing: the tests poll with generous
deadlines.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.support.database import SEVERAL_PROCESSES
from tests.support.polling import wait_for
from tests.support.servers import celery_worker, kill9
from tests.tasks.compat import TaskResultStatus
from tests.testapp import tasks_api
from tests.testapp.models import StepRow

pytestmark = [*SEVERAL_PROCESSES, pytest.mark.django_db(transaction=True)]


def finished(result):
    result.refresh()
    return result.is_finished


def test_run_after_holds_a_task_until_its_celery_eta(broker, env):
    with celery_worker(env):  # no beat: only the ETA task starts it
        at = timezone.now() + timedelta(seconds=3)
        result = tasks_api.add.using(run_after=at).enqueue(20, 22)
        wait_for(lambda: finished(result), what="the delayed task")
        # Checked once it ran: it started no earlier than asked.
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.return_value == 42
        assert result.started_at >= at


def test_a_sigkilled_worker_s_task_runs_to_completion_elsewhere_once(broker, env):
    with celery_worker(env, name="doomed") as doomed:
        result = tasks_api.slow_once.enqueue("killed-task", 4)
        wait_for(
            lambda: StepRow.objects.filter(workflow_id="killed-task").exists(),
            what="the task to start",
        )
        kill9(doomed)  # mid-task
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING  # its lease outlives it
    assert len(result.worker_ids) == 1  # the one holding the lease
    with celery_worker(env, beat=True, name="rescuer"):
        # The sweeper sees the lease expire and hands the task to a worker.
        wait_for(lambda: finished(result), timeout=90, what="the rescue")
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "killed-task"
    rows = StepRow.objects.filter(workflow_id="killed-task")
    assert rows.filter(step="started").count() == 2  # ran again elsewhere
    assert rows.filter(step="done").count() == 1  # its effect, once
    assert result.errors == [] and len(result.worker_ids) == 1
