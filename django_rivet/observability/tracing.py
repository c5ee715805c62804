"""OpenTelemetry spans (the ``otel`` extra: ``pip install django-rivet[otel]``).

The import below is tried once, when this module is first imported; without
the OpenTelemetry API :data:`INSTALLED` is False and the callers in this
package never reach the span code. With it, spans go to whatever tracer
provider the project configured (none: the API's no-op tracer).

Where a span's parent comes from (docs/observability.md, "Traces"):

- a span already current in this thread (the OpenTelemetry Django or ASGI
  instrumentation's request span, the calling action of an actor-to-actor
  call, a workflow step calling an actor): the new span is its child;
- otherwise an HTTP request's ``traceparent`` header (and a WebSocket
  handshake's, for the connect); a WebSocket *action* starts a trace of its
  own that links to the handshake's context, since one socket carries many
  unrelated calls. ``RIVET["INCOMING_TRACE"]`` decides what the header
  does: ``"continue"`` (the default, as the OpenTelemetry Django and ASGI
  instrumentations do) makes it the parent, ``"link"`` starts a trace of the
  server's own linking to it, ``"new"`` ignores it: a client then chooses no
  trace id the server stores, and its sampled flag decides nothing;
- scheduled work, queue messages and workflow runs continue the trace of the
  span that created them, stored with the row as a W3C ``traceparent``; a
  span current when they run (a Celery task's span, say) becomes a link.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from django.db.models import Model

from ..conf import rivet_settings

try:
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator,
    )
except ImportError:  # pragma: no cover - exercised by the no-extras test
    INSTALLED = False
else:
    INSTALLED = True

__all__ = [
    "INSTALLED",
    "activate",
    "current_traceparent",
    "current_trace_ids",
    "end",
    "parent_from_headers",
    "parent_from_traceparent",
    "start",
    "stored_traceparent",
]

TRACER_NAME = "django_rivet"

if INSTALLED:
    # A proxy until the project sets a tracer provider, then that provider's.
    _tracer = trace.get_tracer(TRACER_NAME)
    _w3c = TraceContextTextMapPropagator()


def current_traceparent() -> str:
    """Return the W3C ``traceparent`` of the current span ("" if none)."""
    if not INSTALLED:
        return ""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return ""
    carrier: dict[str, str] = {}
    _w3c.inject(carrier)
    return carrier.get("traceparent", "")


def stored_traceparent(model: type[Model], pk: Any) -> str:
    """Return the ``traceparent`` stored with a schedule, message or workflow."""
    stored = (
        model._default_manager.filter(pk=pk)
        .values_list("traceparent", flat=True)
        .first()
    )
    return stored or ""


def current_trace_ids() -> tuple[str | None, str | None]:
    """Return the current span's trace and span ids in hex, for log lines."""
    if not INSTALLED:
        return None, None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None, None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def _valid(context: Context) -> bool:
    return bool(trace.get_current_span(context).get_span_context().is_valid)


def parent_from_traceparent(value: str) -> Context | None:
    """Return the context a stored ``traceparent`` names, or None."""
    if not value:
        return None
    context = _w3c.extract({"traceparent": value})
    return context if _valid(context) else None


def parent_from_headers(headers: Mapping[str, str] | None) -> Context | None:
    """Return the context an incoming request's headers carry, or None.

    Uses the project's configured propagators (W3C trace context and
    baggage by default).
    """
    if not headers:
        return None
    context = propagate.extract(headers)
    return context if _valid(context) else None


def _current_link() -> list[Link]:
    current = trace.get_current_span().get_span_context()
    return [Link(current)] if current.is_valid else []


def start(
    name: str,
    attributes: dict[str, Any],
    *,
    stored: str = "",
    headers: Mapping[str, str] | None = None,
    link_headers: bool = False,
    consumer: bool = False,
) -> Span:
    """Start span ``name`` with its parent chosen as the module docstring says.

    ``stored``: the ``traceparent`` recorded with the work being run;
    ``headers``: the request's, used when no span is current (as a link
    instead of the parent with ``link_headers``); ``consumer``: the span
    processes work created earlier (schedule, queue message, workflow run).
    """
    kind = SpanKind.CONSUMER if consumer else SpanKind.INTERNAL
    parent = parent_from_traceparent(stored)
    links: list[Link] = []
    if parent is not None:
        links = _current_link()
    elif not trace.get_current_span().get_span_context().is_valid:
        incoming = rivet_settings.INCOMING_TRACE
        remote = None if incoming == "new" else parent_from_headers(headers)
        if remote is not None:
            kind = SpanKind.SERVER
            if link_headers or incoming == "link":
                links = [Link(trace.get_current_span(remote).get_span_context())]
            else:
                parent = remote
    return _tracer.start_span(
        name, context=parent, kind=kind, attributes=attributes, links=links
    )


def child(name: str, attributes: dict[str, Any]) -> Span:
    """Start span ``name`` as a child of the current span."""
    return _tracer.start_span(name, attributes=attributes)


@contextlib.contextmanager
def activate(span: Span | None) -> Iterator[None]:
    """Make ``span`` the current span for the block (nothing for None)."""
    if span is None:
        yield
        return
    with trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    ):
        yield


def end(
    span: Span,
    attributes: dict[str, Any],
    error: BaseException | None = None,
    *,
    failed: bool = False,
) -> None:
    """Set the final attributes and status, record a failure, end the span.

    ``failed`` marks the span's status as an error: server-side failures
    only, as OpenTelemetry's conventions ask (a refusal meant for the
    caller, like a 4xx, keeps an unset status but names its error).
    """
    if attributes:
        span.set_attributes(attributes)
    if error is not None and failed:
        span.record_exception(error)
    if failed:
        span.set_status(Status(StatusCode.ERROR, attributes.get("error.type")))
    span.end()
