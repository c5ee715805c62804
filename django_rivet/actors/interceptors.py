"""Interceptors: code that wraps every invocation, whichever entry point made it.

``RIVET["INTERCEPTORS"]`` lists dotted paths of classes; each is
instantiated once (no arguments) and its ``invoke(call, next)`` wraps every
invocation the spine runs -- HTTP and WebSocket actions (both protocol
flavours, raw WebSockets), connects, schedules, cron runs, queue messages,
``handle.call`` and the runtime's own hooks -- in the order listed::

    class AuditInterceptor:
        def invoke(self, call, next):
            started = time.monotonic()
            try:
                return next(call)
            finally:
                audit.record(call.actor_name, call.kind, call.name,
                             time.monotonic() - started)

``next(call)`` runs the rest of the chain and the invocation itself (its
transaction, lock, ``on_auth`` and handler) and returns its result; an
interceptor may raise instead of calling it (nothing runs), call it with a
changed call (:meth:`Call.replace`), or look at the result or the
exception. ``invoke`` may be ``async def``: then ``await next(call)``.
Interceptors run in the invoking thread, outside the invocation's
savepoint or transaction: database work of their own is not rolled back
with it (though a call that joins an enclosing transaction -- a lane's
round, one actor calling another -- runs its interceptors inside that one).

The built-in observability (spans, metrics, log lines) is the first
interceptor of every chain (:class:`~django_rivet.observability.invocations.
ObservabilityInterceptor`); the project's come after it, so their time is
counted in the invocation's duration and their exceptions in its outcome.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ..conf import rivet_settings
from ..observability import ObservabilityInterceptor
from .calls import Origin
from .invocation import Operation
from .rows import ActorRef

__all__ = ["Call", "Interceptor", "Next", "chain", "load"]


@dataclass(frozen=True, slots=True)
class Call:
    """One invocation as interceptors see it: which actor, what, who calls."""

    ref: ActorRef
    operation: Operation
    origin: Origin

    @property
    def actor_name(self) -> str | None:
        """The actor's registry name, when the call addresses it by name."""
        return self.ref.name

    @property
    def key(self) -> tuple[str, ...]:
        """The actor's key (empty when addressed by id only)."""
        return self.ref.key

    @property
    def actor_id(self) -> uuid.UUID | None:
        """The actor's id, when the call addresses it by id."""
        return self.ref.actor_id

    @property
    def transport(self) -> str:
        """``http``, ``websocket``, ``websocket_raw``, ``schedule``, ``cron``,
        ``queue``, ``admin`` or ``internal`` (server-side code, the runtime's
        hooks)."""
        return self.origin.transport

    @property
    def kind(self) -> str:
        """What runs: ``action``, ``connect``, ``queue`` (a message sent),
        ``request``, ``actor`` (create or describe), ``schedule``, ``cron``
        and ``queue`` (fired work: see :attr:`transport`), ``message`` (a
        raw WebSocket message), ``admin`` (an edit in the admin) or
        ``hook`` (the runtime's own work: disconnects, subscriptions,
        eviction)."""
        auth = self.operation.auth
        if auth is not None:
            return auth.kind
        kind = getattr(self.operation, "kind", None)
        return kind if isinstance(kind, str) and kind else "hook"

    @property
    def name(self) -> str | None:
        """The action or queue called (``None`` for other kinds)."""
        auth = self.operation.auth
        if auth is not None and (auth.action or auth.queue):
            return auth.action or auth.queue
        name = getattr(self.operation, "handler_name", None)
        return name if isinstance(name, str) else None

    @property
    def user(self) -> Any:
        """The Django user of the request or connection (``None`` if none)."""
        return self.origin.user

    def replace(self, **changes: Any) -> Call:
        """Return this call with ``ref``, ``operation`` or ``origin`` replaced."""
        return dataclasses.replace(self, **changes)

    def with_operation(self, operation: Any) -> Call:
        """Return this call running ``operation`` instead (observability's)."""
        return dataclasses.replace(self, operation=operation)


#: What an interceptor calls to run the rest of the chain.
Next = Callable[[Call], Any]


class Interceptor(Protocol):
    """What ``RIVET["INTERCEPTORS"]`` entries are (``invoke`` may be async)."""

    def invoke(self, call: Call, next: Next) -> Any:
        """Run ``next(call)`` (or refuse, or change the call) and return its result."""


def _link(method: Callable[..., Any], is_async: bool, following: Next) -> Next:
    if not is_async:

        def run(call: Call) -> Any:
            return method(call, following)

        return run
    # An async interceptor runs on an event loop of the invoking thread's;
    # the rest of the chain hops back into that thread (the transaction is
    # the thread's), as async handlers' ORM calls do.
    anext = sync_to_async(following, thread_sensitive=True)

    def run_async(call: Call) -> Any:
        return async_to_sync(method)(call, anext)

    return run_async


def load(paths: list[str] | tuple[str, ...]) -> list[Any]:
    """Import and instantiate the interceptor classes ``paths`` name."""
    found = []
    for path in paths:
        try:
            factory = import_string(path)
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"RIVET['INTERCEPTORS'] names {path!r}, which cannot be imported: {exc}"
            ) from exc
        interceptor = factory() if inspect.isclass(factory) else factory
        if not callable(getattr(interceptor, "invoke", None)):
            raise ImproperlyConfigured(
                f"RIVET['INTERCEPTORS'] names {path!r}, which has no "
                "invoke(call, next) method"
            )
        found.append(interceptor)
    return found


# The chain of the current setting, innermost first: (invoke, is it async).
_Links = list[tuple[Callable[..., Any], bool]]
_built: tuple[tuple[str, ...], _Links] | None = None
_lock = threading.Lock()
_observability = ObservabilityInterceptor()


def _links() -> _Links:
    global _built
    paths = tuple(rivet_settings.INTERCEPTORS)
    built = _built
    if built is not None and built[0] == paths:
        return built[1]
    with _lock:
        if _built is None or _built[0] != paths:
            interceptors = [_observability, *load(paths)]
            _built = (
                paths,
                [
                    (i.invoke, inspect.iscoroutinefunction(i.invoke))
                    for i in reversed(interceptors)
                ],
            )
        return _built[1]


def chain(call: Call, run: Next) -> Any:
    """Run ``run(call)`` inside every interceptor, the first one outermost."""
    following = run
    for method, is_async in _links():
        following = _link(method, is_async, following)
    return following(call)
