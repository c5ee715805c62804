"""Observing the invocation spine: a span, metrics and a log line per call.

:func:`invocation` wraps every run of :func:`django_rivet.actors.spine.invoke`.
It observes what people ask about -- actions (HTTP, WebSocket, internal
calls), WebSocket connects, schedule and cron firings, queue messages -- and
lets everything else (creating an actor, subscriptions, disconnects, hooks)
through untouched. What it learns inside the spine it learns through the
operation itself: :class:`Observed` forwards to the real operation and notes
the actor class when the spine resolves it (``prepare``) and the actor id once
the row is locked (``run``), so the spine needs no other hook.

Metric labels come only from the resolved definition (actor class name,
action or queue handler name), never from what the caller sent: a call to an
unknown actor or action is counted with empty labels.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ..exceptions import RivetError
from ..models import QueueMessage, Schedule
from . import logs, metrics, tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ..actors.definition import Actor
    from ..actors.invocation import AuthRequest, Invocation, Operation, Origin
    from ..actors.rows import ActorRef

__all__ = ["Observed", "Watch", "invocation", "outcome_of"]

T = TypeVar("T")

# Span names by kind of invocation.
SPAN_NAMES = {
    "action": "rivet.action",
    "connect": "rivet.connect",
    "schedule": "rivet.schedule",
    "cron": "rivet.cron",
    "queue": "rivet.queue",
}
# Work fired from the database: origin.transport names the kind.
FIRINGS = frozenset({"schedule", "cron", "queue"})
# Kinds that run an action (counted in rivet_actions_total).
ACTION_KINDS = frozenset({"action", "schedule", "cron"})


def kind_of(operation: Operation, origin: Origin) -> str | None:
    """Return the kind of invocation to observe, or None to let it through."""
    if origin.transport in FIRINGS:
        return origin.transport
    auth = operation.auth
    if auth is None:
        return None
    if auth.kind == "action":
        return "action"
    if auth.kind == "connect":
        return "connect"
    return None


def outcome_of(error: BaseException | None) -> tuple[str, str, str]:
    """Return ``(outcome, wire code, error.type)`` for an invocation's end.

    ``rejected``: an error the caller is told about on purpose (a 4xx
    ``RivetError``: a ``UserError``, an unknown action, a refusal);
    ``error``: the server failed (a 5xx ``RivetError``, any other exception).
    """
    if error is None:
        return "ok", "", ""
    if isinstance(error, RivetError):
        code = error.qualified_code
        return ("rejected" if error.http_status < 500 else "error"), code, code
    cls = type(error)
    return "error", "rivet/internal_error", f"{cls.__module__}.{cls.__qualname__}"


class Watch:
    """What one observed invocation learned about itself."""

    __slots__ = ("action", "actor", "actor_id", "kind")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.actor = ""  # the resolved class's name: a bounded label
        self.actor_id: str | None = None
        self.action = ""  # the action or queue handler, once it is known to exist

    def prepared(self, operation: Operation) -> None:
        """Note the action once the operation found it in the definition."""
        if self.kind in FIRINGS:
            spec = getattr(operation, "spec", None)
            self.action = getattr(spec, "wire_name", "") or ""
        elif self.kind == "action":
            auth: AuthRequest | None = operation.auth
            self.action = (auth.action if auth is not None else None) or ""


class Observed:
    """An operation, forwarded, that tells its :class:`Watch` what it sees."""

    __slots__ = ("label", "operation", "watch")

    def __init__(self, operation: Operation, watch: Watch) -> None:
        self.operation = operation
        self.watch = watch
        self.label: str | None = operation.label

    @property
    def auth(self) -> AuthRequest | None:
        """Forward the operation's ``on_auth`` request."""
        return self.operation.auth

    def prepare(self, definition: type[Actor]) -> None:
        """Note the actor class, then let the operation check its arguments."""
        self.watch.actor = definition.name
        self.operation.prepare(definition)
        self.label = self.operation.label
        self.watch.prepared(self.operation)

    def run(self, invocation: Invocation) -> Any:
        """Note the actor id, then run the operation."""
        self.watch.actor_id = str(invocation.actor_id)
        return self.operation.run(invocation)


def invocation(
    run: Callable[[ActorRef, Operation, Origin], T],
    ref: ActorRef,
    operation: Operation,
    origin: Origin,
) -> T:
    """Run ``run(ref, operation, origin)``, observed if it is worth observing."""
    kind = kind_of(operation, origin)
    if kind is None:
        return run(ref, operation, origin)
    watch = Watch(kind)
    observed = Observed(operation, watch)
    span = _start_span(watch, ref, operation, origin) if tracing.INSTALLED else None
    started = time.perf_counter()
    try:
        if span is None:
            result = run(ref, observed, origin)
        else:
            with tracing.activate(span):
                result = run(ref, observed, origin)
    except BaseException as exc:
        _finish(watch, origin, span, time.perf_counter() - started, exc)
        raise
    _finish(watch, origin, span, time.perf_counter() - started, None)
    return result


# -- spans ---------------------------------------------------------------------------
def _stored_traceparent(kind: str, origin: Origin) -> str:
    """Return the ``traceparent`` stored with a schedule or queue message."""
    info = origin.fire_info or {}
    pk = info.get("id")
    if pk is None:
        return ""
    stored: str | None = None
    if kind == "schedule":
        stored = (
            Schedule.objects.filter(pk=pk).values_list("traceparent", flat=True).first()
        )
    elif kind == "queue":
        stored = (
            QueueMessage.objects.filter(pk=pk)
            .values_list("traceparent", flat=True)
            .first()
        )
    return stored or ""


def _start_span(
    watch: Watch, ref: ActorRef, operation: Operation, origin: Origin
) -> Span:
    attributes: dict[str, Any] = {"rivet.transport": origin.transport}
    if ref.name is not None:
        attributes["rivet.actor.name"] = ref.name
    if ref.actor_id is not None:
        attributes["rivet.actor.id"] = str(ref.actor_id)
    kind = watch.kind
    info = origin.fire_info or {}
    if kind == "action":
        auth = operation.auth
        if auth is not None and auth.action is not None:
            attributes["rivet.action"] = auth.action
    elif kind == "schedule":
        attributes["rivet.schedule.id"] = str(info.get("id"))
    elif kind == "cron":
        attributes["rivet.cron.name"] = str(info.get("name"))
    elif kind == "queue":
        # OpenTelemetry's messaging conventions, for a message processed.
        attributes.update(
            {
                "messaging.system": "rivet",
                "messaging.operation.type": "process",
                "messaging.destination.name": str(info.get("name")),
                "messaging.message.id": str(info.get("id")),
            }
        )
    return tracing.start(
        SPAN_NAMES[kind],
        attributes,
        stored=_stored_traceparent(kind, origin),
        headers=origin.headers,
        link_headers=kind == "action" and origin.transport == "websocket",
        consumer=kind in FIRINGS,
    )


# -- the end ---------------------------------------------------------------------------
def _lateness(origin: Origin) -> float | None:
    info = origin.fire_info or {}
    scheduled, fired = info.get("scheduled_at"), info.get("fired_at")
    if not isinstance(scheduled, datetime) or not isinstance(fired, datetime):
        return None
    return max(0.0, (fired - scheduled).total_seconds())


def _count(watch: Watch, origin: Origin, outcome: str, duration: float) -> None:
    kind = watch.kind
    if kind in ACTION_KINDS:
        metrics.ACTIONS.labels(
            watch.actor, watch.action, origin.transport, outcome
        ).inc()
        metrics.ACTION_DURATION.labels(watch.actor, watch.action).observe(duration)
    elif kind == "queue":
        metrics.QUEUE_MESSAGES.labels(watch.actor, watch.action, outcome).inc()
    if kind in ("schedule", "cron"):
        late = _lateness(origin)
        if late is not None:
            metrics.SCHEDULE_LATENESS.labels(kind).observe(late)


def _finish(
    watch: Watch,
    origin: Origin,
    span: Span | None,
    duration: float,
    error: BaseException | None,
) -> None:
    outcome, code, error_type = outcome_of(error)
    failed = outcome == "error"
    trace_id = span_id = None
    if span is not None:
        context = span.get_span_context()
        if context.is_valid:
            trace_id, span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
        attributes: dict[str, Any] = {"rivet.outcome": outcome}
        if watch.actor:
            attributes["rivet.actor.name"] = watch.actor
        if watch.actor_id is not None:
            attributes["rivet.actor.id"] = watch.actor_id
        if watch.action:
            attributes["rivet.action"] = watch.action
        if error is not None:
            attributes["rivet.error.code"] = code
            attributes["error.type"] = error_type
        tracing.end(span, attributes, error, failed=failed)
    if metrics.INSTALLED:
        _count(watch, origin, outcome, duration)
    if logs.enabled(failed):
        logs.record(
            {
                "kind": watch.kind,
                "actor": watch.actor,
                "actor_id": watch.actor_id,
                "action": watch.action,
                "transport": origin.transport,
                "outcome": outcome,
                "duration": duration,
                "code": code,
                "trace_id": trace_id,
                "span_id": span_id,
            },
            failed=failed,
        )
