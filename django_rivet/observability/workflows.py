"""Observing workflows: a span per run, per step attempt and per flush.

:func:`workflow_run` wraps one run of a claimed workflow (what a Celery task,
the in-process worker or ``run_until_idle`` does); its span continues the
trace of the span that started the workflow (the ``traceparent`` stored with
the row). :class:`EngineObserver` is registered with the pure engine's seam
(:mod:`django_rivet.engine.observe`) and makes a child span of the run for
each step attempt and each flush; the engine itself never imports
OpenTelemetry or Django.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..models import Workflow
from . import metrics, tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["EngineObserver", "workflow_run"]

L = TypeVar("L", bound="RunLease")

# (workflow id, workflow name) of the run going on in this context, for the
# engine's callbacks (the engine only knows the id).
_running: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "rivet_observed_workflow", default=None
)


class RunLease(Protocol):
    """What a run's lease tells about the workflow."""

    @property
    def workflow_id(self) -> str: ...

    @property
    def name(self) -> str: ...


def workflow_run(
    run: Callable[[L], tuple[str, datetime | None]], lease: L
) -> tuple[str, datetime | None]:
    """Run ``run(lease)`` (one run of a claimed workflow), observed."""
    if not (tracing.INSTALLED or metrics.INSTALLED):
        return run(lease)
    token = _running.set((lease.workflow_id, lease.name))
    span: Span | None = None
    if tracing.INSTALLED:
        span = tracing.start(
            "rivet.workflow.run",
            {"rivet.workflow.id": lease.workflow_id, "rivet.workflow.name": lease.name},
            stored=tracing.stored_traceparent(Workflow, lease.workflow_id),
            consumer=True,
        )
    try:
        with tracing.activate(span):
            status, wake_at = run(lease)
    except BaseException as exc:
        if span is not None:
            tracing.end(span, {"error.type": type(exc).__name__}, exc, failed=True)
        raise
    finally:
        _running.reset(token)
    if span is not None:
        attributes = {"rivet.workflow.status": status}
        if status == "failed":
            attributes["error.type"] = "workflow/failed"
        tracing.end(span, attributes, failed=status == "failed")
    if metrics.INSTALLED:
        metrics.WORKFLOW_RUNS.labels(lease.name, status).inc()
        if status == "failed":
            metrics.WORK_FAILED.labels("workflow").inc()
    return status, wake_at


class _Attempt:
    """One step attempt being observed: its span, then its count."""

    __slots__ = ("name", "span")

    def __init__(self, workflow_id: str, step: str, attempt: int) -> None:
        running = _running.get()
        self.name = running[1] if running and running[0] == workflow_id else ""
        self.span: Span | None = None
        if tracing.INSTALLED:
            attributes: dict[str, Any] = {
                "rivet.workflow.id": workflow_id,
                "rivet.step.name": step,
                "rivet.step.attempt": attempt,
            }
            if self.name:
                attributes["rivet.workflow.name"] = self.name
            self.span = tracing.child("rivet.workflow.step", attributes)

    def finish(self, error: BaseException | None) -> None:
        """End the span and count the attempt by outcome."""
        if error is None:
            outcome = "ok"
        elif isinstance(error, Exception):
            outcome = "error"
        else:  # a timeout or an eviction cancelled it
            outcome = "cancelled"
        if self.span is not None:
            attributes: dict[str, Any] = {"rivet.outcome": outcome}
            if error is not None:
                cls = type(error)
                attributes["error.type"] = f"{cls.__module__}.{cls.__qualname__}"
            tracing.end(self.span, attributes, error, failed=error is not None)
        if metrics.INSTALLED:
            metrics.WORKFLOW_STEPS.labels(self.name, outcome).inc()

    async def awaiting(self, awaitable: Awaitable[Any]) -> Any:
        """Await what the step function returned, within the attempt."""
        try:
            with tracing.activate(self.span):
                value = await awaitable
        except BaseException as exc:
            self.finish(exc)
            raise
        self.finish(None)
        return value


class EngineObserver:
    """Spans and counts for the engine's step attempts and flushes."""

    def step_attempt(
        self, workflow_id: str, step: str, attempt: int, fn: Callable[[], Any]
    ) -> Callable[[], Any]:
        """Return ``fn`` observed as one attempt (same kind: sync or async)."""
        if inspect.iscoroutinefunction(fn):

            async def observed_async() -> Any:
                # Calling fn only creates the coroutine; it runs when awaited.
                return await _Attempt(workflow_id, step, attempt).awaiting(fn())

            return observed_async

        def observed() -> Any:
            watch = _Attempt(workflow_id, step, attempt)
            try:
                with tracing.activate(watch.span):
                    result = fn()
            except BaseException as exc:
                watch.finish(exc)
                raise
            if inspect.isawaitable(result):
                # A plain function handing back a coroutine: the attempt
                # lasts until the engine has awaited it.
                return watch.awaiting(result)
            watch.finish(None)
            return result

        return observed

    def flush(self, send: Awaitable[None], writes: int) -> Awaitable[None]:
        """Return ``send`` awaited in a ``rivet.workflow.flush`` span."""
        if not tracing.INSTALLED:
            return send
        return self._flush(send, writes)

    async def _flush(self, send: Awaitable[None], writes: int) -> None:
        running = _running.get()
        attributes: dict[str, Any] = {"rivet.flush.writes": writes}
        if running is not None:
            attributes["rivet.workflow.id"] = running[0]
        span = tracing.child("rivet.workflow.flush", attributes)
        try:
            with tracing.activate(span):
                await send
        except BaseException as exc:
            tracing.end(span, {"error.type": type(exc).__name__}, exc, failed=True)
            raise
        tracing.end(span, {})
