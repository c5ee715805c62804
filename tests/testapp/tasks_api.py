"""Task functions of the tests of Django's Tasks framework on django-rivet.

Module level, as Django requires (their module path is what a worker
imports). ``CALLS`` records the calls made in this process.
"""

from __future__ import annotations

import time

from django_rivet import clock
from tests.tasks.compat import TaskContext, task
from tests.testapp.models import StepRow

CALLS: list[tuple[str, object]] = []


class TaskBoom(Exception):
    """What the failing tasks raise."""


@task
def add(a, b):
    CALLS.append(("add", (a, b)))
    return a + b


@task()
def noop(*args, **kwargs):
    CALLS.append(("noop", (args, kwargs)))


@task()
async def noop_async(*args, **kwargs):
    CALLS.append(("noop_async", (args, kwargs)))
    return {"args": list(args), "kwargs": kwargs}


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
def failing(label="fail"):
    CALLS.append(("failing", clock.now()))
    raise TaskBoom(f"This task failed: {label}")


@task()
def failing_system_exit():
    raise SystemExit("This task failed due to SystemExit")


@task()
def complex_return_value():
    return {"a": object()}


@task(takes_context=True)
def get_task_id(context):
    return context.task_result.id


@task(takes_context=True)
def flaky(context, failures):
    """Fail the first ``failures`` attempts; return the attempt number."""
    assert isinstance(context, TaskContext)
    CALLS.append(("flaky", context.attempt))
    if context.attempt <= failures:
        raise TaskBoom(f"attempt {context.attempt}")
    return context.attempt


@task(priority=0, queue_name="emails")
def email(label):
    CALLS.append(("email", label))
    return label


@task()
def mark(label):
    CALLS.append(("mark", label))
    StepRow.objects.create(workflow_id=label, step="task")


@task()
def slow_once(key, seconds):
    """Note each start, take ``seconds``, then write its effect (once per key)."""
    StepRow.objects.create(workflow_id=key, step="started")
    time.sleep(seconds)
    StepRow.objects.get_or_create(workflow_id=key, step="done")
    return key


@task()
def fails_until_allowed(key):
    """Fail until a ``StepRow(key, "allowed")`` exists."""
    if not StepRow.objects.filter(workflow_id=key, step="allowed").exists():
        raise TaskBoom(f"{key} is not allowed yet")
    return key
