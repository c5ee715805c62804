"""Observability: OpenTelemetry traces, Prometheus metrics, structured logs.

Both instruments are optional extras (``django-rivet[otel]``,
``django-rivet[prometheus]``). Each is imported once, when this package is
first imported; without it its hooks below do nothing (a module-level flag
decides, never a ``try`` per call). The log lines of :mod:`.logs` need
neither.

The rest of django-rivet calls the one-line hooks of this module:

- :class:`ObservabilityInterceptor` is the first interceptor of the
  invocation spine (``actors/interceptors.py``): spans,
  ``rivet_actions_total``, durations, lateness, log lines;
- :func:`workflow_run` wraps one run of a workflow
  (``workflows/execution.py``); :func:`install` registers the
  engine observer for step attempts and flushes;
- :func:`traceparent` is stored with a schedule, a queue message or a
  workflow when it is created, so the span that runs it continues the trace;
- :func:`events_published`, :func:`events_missed`, :func:`work_failed`
  count what their names say.

This package sits below the actor runtime (it never imports ``actors``,
``scheduling``, ``workflows`` or ``transport``) and above the models,
which the database gauges and the stored trace contexts read. The metrics
view is :mod:`.views` (URLs in :mod:`django_rivet.metrics`); the admin
overview page is ``django_rivet.admin.overview``.
"""

from __future__ import annotations

from ..engine import observe
from . import metrics, tracing
from .invocations import ObservabilityInterceptor
from .workflows import EngineObserver, workflow_run

__all__ = [
    "ObservabilityInterceptor",
    "events_missed",
    "events_published",
    "install",
    "traceparent",
    "work_failed",
    "workflow_run",
]

traceparent = tracing.current_traceparent

# rivet_work_failed_total's kind for a firing's origin (queue: "message").
# A firing's origin (schedule, cron, queue) or a failed work's kind (schedule,
# cron, message) -> the label of rivet_work_failed_total.
WORK_KINDS = {
    "schedule": "schedule",
    "cron": "cron",
    "queue": "message",
    "message": "message",
}

if metrics.INSTALLED:

    def events_published(count: int) -> None:
        """Count ``count`` events committed and announced."""
        metrics.EVENTS_PUBLISHED.inc(count)

    def events_missed() -> None:
        """Count one ``actor/events_missed`` told to a connection."""
        metrics.EVENTS_MISSED.inc()

    def work_failed(origin: str) -> None:
        """Count background work that failed for good (after its retries)."""
        metrics.WORK_FAILED.labels(WORK_KINDS.get(origin, origin)).inc()

else:

    def events_published(count: int) -> None:
        """Count ``count`` events committed and announced (no-op: no extra)."""

    def events_missed() -> None:
        """Count one ``actor/events_missed`` (no-op: no extra)."""

    def work_failed(origin: str) -> None:
        """Count a firing whose handler failed (no-op: no extra)."""


def install() -> None:
    """Observe the workflow engine's steps and flushes when an extra is installed.

    Called by the app's ``ready()``; safe to call twice.
    """
    if tracing.INSTALLED or metrics.INSTALLED:
        observe.set_observer(EngineObserver())
