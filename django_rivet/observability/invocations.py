"""Observing the invocation spine: a span, metrics and a log line per call.

:class:`ObservabilityInterceptor` is the first interceptor of every run of
:func:`django_rivet.actors.spine.invoke` (``django_rivet.actors.interceptors``).
It observes what people ask about -- actions (HTTP, WebSocket, internal
calls), WebSocket connects, schedule and cron firings, queue messages -- and
lets everything else (creating an actor, subscriptions, disconnects, hooks)
through untouched. What it learns inside the spine it learns through the
operation itself: :class:`Observed` forwards to the real operation and notes
the actor class when the spine resolves it (``prepare``) and the actor id once
the row is locked (``run``), so the spine needs no other hook. Without the
extras and with DEBUG logging off, a successful call costs the wrapper about
a microsecond (one object, two clock reads, a level check).

Metric labels come only from the resolved definition (actor class name,
action or queue handler name), never from what the caller sent: a call to an
unknown actor or action is counted with empty labels.

This package sits below the actor runtime, so it reads the spine's objects
through the small Protocols below (what it reads of an operation, a caller,
an actor reference), which the actor runtime's types satisfy.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..exceptions import RivetError
from ..models import QueueMessage, Schedule
from . import logs, metrics, tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = [
    "ActorRefLike",
    "AuthRequestLike",
    "CallLike",
    "ObservabilityInterceptor",
    "Observed",
    "OperationLike",
    "OriginLike",
    "kind_of",
    "outcome_of",
]

T = TypeVar("T")
C = TypeVar("C", bound="CallLike")


class ActorRefLike(Protocol):
    """What is read of the actor an invocation addresses (an ``ActorRef``)."""

    @property
    def name(self) -> str | None:
        """The actor's name, when addressed by name."""
        ...

    @property
    def actor_id(self) -> uuid.UUID | None:
        """The actor's id, when addressed by id."""
        ...


class OriginLike(Protocol):
    """What is read of who calls (an ``Origin``)."""

    @property
    def transport(self) -> str:
        """``http``, ``websocket``, ``schedule``, ``cron``, ``queue``..."""
        ...

    @property
    def headers(self) -> Mapping[str, str]:
        """The caller's headers (a trace context may be among them)."""
        ...

    @property
    def fire_info(self) -> dict[str, Any] | None:
        """What fired a schedule, cron run or queue message."""
        ...


class AuthRequestLike(Protocol):
    """What an operation asks ``on_auth`` (an ``AuthRequest``)."""

    @property
    def kind(self) -> str:
        """``action``, ``connect``, ``queue``..."""
        ...

    @property
    def action(self) -> str | None:
        """The action asked for."""
        ...


class OperationLike(Protocol):
    """An operation of the spine (an ``Operation``), as observed and forwarded."""

    @property
    def label(self) -> str | None:
        """A short description of the operation, for logs."""
        ...

    @property
    def auth(self) -> AuthRequestLike | None:
        """What ``on_auth`` is asked about it."""
        ...

    def prepare(self, definition: Any) -> None:
        """Check the arguments against the actor class."""

    def run(self, invocation: Any) -> Any:
        """Run inside the invocation."""


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


# The kind of each operation class (what its on_auth request asks about is
# the same for every instance of a class), found once per class.
_kinds: dict[type, str | None] = {}


def kind_of(operation: OperationLike, origin: OriginLike) -> str | None:
    """Return the kind of invocation to observe, or None to let it through."""
    if origin.transport in FIRINGS:
        return origin.transport
    cls = type(operation)
    try:
        return _kinds[cls]
    except KeyError:
        pass
    auth = operation.auth
    kind = auth.kind if auth is not None else None
    found = _kinds[cls] = kind if kind in ("action", "connect") else None
    return found


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


class Observed:
    """An operation, forwarded, noting what the spine tells it along the way."""

    __slots__ = ("action", "actor", "actor_id", "kind", "label", "operation")

    def __init__(self, operation: OperationLike, kind: str) -> None:
        self.operation = operation
        self.kind = kind
        self.label: str | None = operation.label
        self.actor = ""  # the resolved class's name: a bounded label
        # The id, not its text: formatted only if a span or log line wants it.
        self.actor_id: uuid.UUID | None = None
        self.action = ""  # the action or queue handler, once known to exist

    @property
    def auth(self) -> AuthRequestLike | None:
        """Forward the operation's ``on_auth`` request."""
        return self.operation.auth

    def __getattr__(self, name: str) -> Any:
        # Whatever else the spine asks of the operation (``readonly``...).
        return getattr(self.operation, name)

    def prepare(self, definition: Any) -> None:
        """Note the actor class, let the operation check its arguments, then
        note the action it found."""
        self.actor = definition.name
        operation = self.operation
        operation.prepare(definition)
        self.label = operation.label
        if self.kind in FIRINGS:
            spec = getattr(operation, "spec", None)
            self.action = getattr(spec, "wire_name", "") or ""
        elif self.kind == "action":
            auth = operation.auth
            self.action = (auth.action if auth is not None else None) or ""

    def run(self, invocation: Any) -> Any:
        """Note the actor id, then run the operation."""
        self.actor_id = invocation.actor_id
        return self.operation.run(invocation)


class CallLike(Protocol):
    """What is read of one invocation (an interceptor's ``Call``)."""

    @property
    def ref(self) -> ActorRefLike:
        """The actor called."""
        ...

    @property
    def operation(self) -> OperationLike:
        """What runs."""
        ...

    @property
    def origin(self) -> OriginLike:
        """Who calls."""
        ...

    def with_operation(self: C, operation: Any) -> C:
        """Return the call running ``operation`` instead."""
        ...


class ObservabilityInterceptor:
    """The first interceptor of every chain: spans, metrics and log lines.

    Observes what is worth observing (:func:`kind_of`) and lets everything
    else through untouched.
    """

    def invoke(self, call: C, next: Callable[[C], T]) -> T:
        """Run ``next(call)``, observed if it is worth observing."""
        operation, origin = call.operation, call.origin
        kind = kind_of(operation, origin)
        if kind is None:
            return next(call)
        observed = Observed(operation, kind)
        call = call.with_operation(observed)
        if not tracing.INSTALLED:
            # No span to open: the lean path (all of it when no extra is in).
            started = time.perf_counter()
            try:
                result = next(call)
            except BaseException as exc:
                _finish(observed, origin, None, time.perf_counter() - started, exc)
                raise
            if metrics.INSTALLED or logs.enabled(False):
                _finish(observed, origin, None, time.perf_counter() - started, None)
            return result
        span = _start_span(observed, call.ref, operation, origin)
        started = time.perf_counter()
        try:
            with tracing.activate(span):
                result = next(call)
        except BaseException as exc:
            _finish(observed, origin, span, time.perf_counter() - started, exc)
            raise
        _finish(observed, origin, span, time.perf_counter() - started, None)
        return result


# -- spans ---------------------------------------------------------------------------
def _stored_traceparent(kind: str, origin: OriginLike) -> str:
    """Return the ``traceparent`` stored with a schedule or queue message."""
    info = origin.fire_info or {}
    pk = info.get("id")
    model = {"schedule": Schedule, "queue": QueueMessage}.get(kind)
    if pk is None or model is None:
        return ""
    return tracing.stored_traceparent(model, pk)


def _start_span(
    observed: Observed, ref: ActorRefLike, operation: OperationLike, origin: OriginLike
) -> Span:
    attributes: dict[str, Any] = {"rivet.transport": origin.transport}
    if ref.name is not None:
        attributes["rivet.actor.name"] = ref.name
    if ref.actor_id is not None:
        attributes["rivet.actor.id"] = str(ref.actor_id)
    kind = observed.kind
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
def _lateness(origin: OriginLike) -> float | None:
    info = origin.fire_info or {}
    scheduled, fired = info.get("scheduled_at"), info.get("fired_at")
    if not isinstance(scheduled, datetime) or not isinstance(fired, datetime):
        return None
    return max(0.0, (fired - scheduled).total_seconds())


def _count(
    observed: Observed, origin: OriginLike, outcome: str, duration: float
) -> None:
    kind = observed.kind
    if kind in ACTION_KINDS:
        metrics.ACTIONS.labels(
            observed.actor, observed.action, origin.transport, outcome
        ).inc()
        duration_of = metrics.ACTION_DURATION.labels(observed.actor, observed.action)
        duration_of.observe(duration)
    elif kind == "queue":
        metrics.QUEUE_MESSAGES.labels(observed.actor, observed.action, outcome).inc()
    if kind in ("schedule", "cron"):
        late = _lateness(origin)
        if late is not None:
            metrics.SCHEDULE_LATENESS.labels(kind).observe(late)


def _finish(
    observed: Observed,
    origin: OriginLike,
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
        if observed.actor:
            attributes["rivet.actor.name"] = observed.actor
        if observed.actor_id is not None:
            attributes["rivet.actor.id"] = str(observed.actor_id)
        if observed.action:
            attributes["rivet.action"] = observed.action
        if error is not None:
            attributes["rivet.error.code"] = code
            attributes["error.type"] = error_type
        tracing.end(span, attributes, error, failed=failed)
    if metrics.INSTALLED:
        _count(observed, origin, outcome, duration)
    if logs.enabled(failed):
        logs.record(
            {
                "kind": observed.kind,
                "actor": observed.actor,
                "actor_id": None
                if observed.actor_id is None
                else str(observed.actor_id),
                "action": observed.action,
                "transport": origin.transport,
                "outcome": outcome,
                "duration": duration,
                "code": code,
                "trace_id": trace_id,
                "span_id": span_id,
            },
            failed=failed,
        )
