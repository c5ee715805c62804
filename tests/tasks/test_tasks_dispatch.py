"""The reverse direction: django-rivet's due work as Django tasks ("tasks")."""

from __future__ import annotations

from unittest import mock

import pytest
from django.test import override_settings

from django_rivet import dispatch, workflows
from django_rivet.checks import runtime
from django_rivet.task_backend.dispatch import E903, W903, TasksDispatch
from django_rivet.testing import freeze_time
from tests.tasks.compat import SOURCE

pytestmark = pytest.mark.django_db(transaction=True)

PREFIX = "django.tasks" if SOURCE == "django.tasks" else "django_tasks"
RIVET_TASKS = {"BACKEND": "django_rivet.task_backend.RivetTaskBackend"}


class JobsDispatch(TasksDispatch):
    alias = "jobs"


def settings_with(jobs_backend):
    return override_settings(
        RIVET={"DISPATCH_BACKEND": "tests.tasks.test_tasks_dispatch.JobsDispatch"},
        TASKS={
            "default": RIVET_TASKS,
            "jobs": {"BACKEND": f"{PREFIX}.backends.{jobs_backend}"},
        },
    )


def test_a_workflow_runs_through_another_tasks_backend_without_a_worker():
    with settings_with("immediate.ImmediateBackend"):
        assert isinstance(dispatch.backend(), JobsDispatch)
        # The immediate backend runs the job (rivet.run_workflow) at once.
        handle = workflows.start("greet", {"name": "ann"})
        assert handle.status == "completed"
        assert handle.result(timeout=5) == "hello ann"
        assert [m.id for m in runtime.check_dispatch()] == ["rivet.W903"]
        assert runtime.check_dispatch()[0].msg == W903.format(alias="jobs")


def test_a_later_wake_up_is_a_deferred_task_with_run_after():
    with settings_with("dummy.DummyBackend"), freeze_time() as frozen:
        from tests.tasks.compat import task_backends

        handle = workflows.start("napper", {"seconds": 60}, id="nap-by-task")
        jobs = task_backends["jobs"]
        [started] = jobs.results
        assert started.args == ["run_workflow", ["nap-by-task"]]
        # Due now (a datetime's microseconds may round it a hair later).
        assert started.task.run_after is None or (
            started.task.run_after - frozen.datetime()
        ).total_seconds() == pytest.approx(0, abs=1e-5)
        started.task.call(*started.args)  # what its worker would do
        assert handle.status == "sleeping"
        [_, woken] = jobs.results
        assert woken.args == ["run_workflow", ["nap-by-task"]]
        delay = woken.task.run_after - frozen.datetime()  # the sleep's end
        assert delay.total_seconds() == pytest.approx(60)
        assert runtime.check_dispatch() == []


def test_sending_jobs_to_rivet_s_own_backend_is_e903():
    with override_settings(
        RIVET={"DISPATCH_BACKEND": "tasks"}, TASKS={"default": RIVET_TASKS}
    ):
        [found] = runtime.check_dispatch()
    assert found.id == "rivet.E903"
    assert found.msg == E903.format(
        problem="TASKS['default'] is RivetTaskBackend, whose tasks are workflows "
        "woken through this dispatch: a loop"
    )


def test_celery_chosen_without_a_broker_is_w006():
    with (
        override_settings(RIVET={"DISPATCH_BACKEND": "celery"}),
        mock.patch.object(dispatch, "celery_configured", return_value=False),
    ):
        [found] = runtime.check_dispatch()
    assert (found.id, found.msg) == ("rivet.W006", dispatch.W006)
