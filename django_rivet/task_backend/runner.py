"""The built-in workflow every task runs as: attempts, backoff, signals.

``rivet.task`` takes the task's :class:`~.results.TaskSpec` as its input
and runs the task function once per attempt, each attempt a step of its
own with no retries of the engine's (``attempt N run``), so that every
attempt keeps its own worker, times and error in the history. A failed
attempt is followed by a durable sleep of the backoff django-rivet's other
background work uses (``RETRY_BACKOFF_BASE``, ``RETRY_BACKOFF_MAX``), up to
the backend's ``max_retries``; the last failure fails the workflow, which
the admin lists with the failed work (its "Recover" action retries the
last attempt).

The steps of an attempt are ephemeral: a task that succeeds writes its
history once, with the workflow's result. A worker that dies mid-attempt
left nothing of it, so the next run (after its lease expires) runs the
attempt again: a task runs at least once, and its result is recorded once.

Django's ``task_started`` fires before each attempt, ``task_finished``
once the task succeeded or failed for good, with
:data:`django_rivet.signals.work_failed` (``kind="task"``) on that failure;
an attempt replayed from the history fires nothing again.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from typing import Any

from .. import clock
from ..engine import WorkflowContext, WorkflowDefinition
from ..engine.steps import no_side_effects
from ..scheduling.retries import backoff, traceback_text
from ..signals import work_failed
from . import compat
from .results import TASK_WORKFLOW, Attempts, TaskSpec

logger = logging.getLogger("django_rivet.tasks")

__all__ = ["WORKER_ID", "TaskFailed", "run_task"]

#: This process's worker id (``TaskResult.worker_ids``; at most 64 characters).
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"[-64:]


class TaskFailed(Exception):
    """The task's last attempt failed: the workflow fails with this error."""


def _class_path(error: BaseException) -> str:
    cls = type(error)
    return f"{cls.__module__}.{cls.__qualname__}"


class _Attempt:
    """One attempt in this process: calls the task, keeps what it raised."""

    def __init__(self, spec: TaskSpec, result_id: str, attempts: Attempts) -> None:
        self.spec = spec
        self.result_id = result_id
        self.attempts = attempts
        self.ran = False  # False: the attempt was replayed from the history
        self.retried = False  # its recorded failure was reset (recover)
        self.error: dict[str, Any] | None = None
        self.exception: BaseException | None = None
        self.task: compat.Task[..., Any] | None = None
        self.result: compat.TaskResult[..., Any] | None = None

    @no_side_effects  # the check before the ``run`` step stands for both
    def begin(self) -> dict[str, Any]:
        """Record who runs the attempt, and when (the ``attempt N`` step)."""
        self.ran = True
        return {"worker": WORKER_ID, "at": clock.now()}

    def call(self) -> Any:
        """Call the task function (the ``attempt N run`` step)."""
        if not self.ran:
            # Its start was recorded, its run reset: a failed task recovered
            # from the admin or a handle runs its last attempt again.
            self.ran = self.retried = True
        try:
            task = self.task = self.spec.task()
            result = self.result = self.attempts.result(
                task,
                self.result_id,
                self.spec,
                compat.TaskResultStatus.RUNNING,
                enqueued_at=None,
            )
            compat.task_started.send(
                sender=type(task.get_backend()), task_result=result
            )
            if task.takes_context:
                value = task.call(
                    compat.TaskContext(task_result=result),
                    *self.spec.args,
                    **self.spec.kwargs,
                )
            else:
                value = task.call(*self.spec.args, **self.spec.kwargs)
            return compat.normalize_json(value)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            self.exception = exc
            self.error = {"path": _class_path(exc), "traceback": traceback_text(exc)}
            if not isinstance(exc, Exception):
                # SystemExit and the like fail the attempt (as Django's
                # immediate backend records them), never the worker.
                raise TaskFailed(f"{self.error['path']}: {exc}") from exc
            raise

    def recorded_error(self, failure: Any) -> dict[str, Any]:
        """Return the attempt's error record (the ``attempt N error`` step)."""
        if self.error is not None:
            return self.error
        # Its failure was recorded by an earlier run that stopped before
        # this step: rebuild what the history kept.
        info = getattr(failure.error, "last_error", None) or {}
        name = str(info.get("name") or type(failure.error).__name__)
        return {"path": name, "traceback": str(info.get("traceback") or "")}

    def finished(self, status: str, value: Any = None) -> None:
        """Send ``task_finished`` (and ``work_failed`` after a final failure)."""
        if not self.ran or self.task is None or self.result is None:
            return
        result = self.attempts.result(
            self.task,
            self.result_id,
            self.spec,
            compat.TaskResultStatus[status],
            enqueued_at=self.result.enqueued_at,
            finished_at=clock.now_datetime(),
        )
        object.__setattr__(result, "_return_value", value)
        backend = type(self.task.get_backend())
        compat.task_finished.send_robust(sender=backend, task_result=result)
        if status != "FAILED":
            return
        logger.error(
            "task failed for good id=%s task=%s attempts=%s",
            self.result_id,
            self.spec.path,
            len(self.attempts.worker_ids),
        )
        work_failed.send_robust(
            sender=backend,
            kind="task",
            actor_id=None,
            action=self.spec.path,
            id=self.result_id,
            error=self.exception,
            task_result=result,
        )


async def _run_task(ctx: WorkflowContext, data: dict[str, Any]) -> Any:
    """Run a task's attempts until one succeeds or its retries are spent."""
    spec = TaskSpec.from_input(data)
    attempts = Attempts()
    number = 0
    while True:
        number += 1
        attempt = _Attempt(spec, ctx.workflow_id, attempts)
        name = f"attempt {number}"
        record = await ctx.step(
            name, attempt.begin, ephemeral=True, max_retries=0, timeout=None
        )
        attempts.begin(record)
        outcome = await ctx.try_step(
            f"{name} run", attempt.call, ephemeral=True, max_retries=0, timeout=None
        )
        if outcome.ok:
            if attempt.retried:
                # The recorded error of the attempt it ran again stays in
                # the history (the admin shows it), not in the code's path.
                await ctx.removed(f"{name} error", "step")
            attempt.finished("SUCCESSFUL", outcome.value)
            return outcome.value
        failure = outcome.failure
        error = await ctx.step(
            f"{name} error",
            functools.partial(attempt.recorded_error, failure),
            ephemeral=True,
            max_retries=0,
            timeout=None,
        )
        attempts.fail(error)
        if number > spec.max_retries:
            attempt.finished("FAILED")
            raise TaskFailed(
                f"Task {spec.path} failed after {number} attempt(s): {error['path']}"
            )
        await ctx.sleep(f"{name} backoff", backoff(number))


#: The built-in workflow (registered when the app is ready).
run_task = WorkflowDefinition(name=TASK_WORKFLOW, fn=_run_task)
