"""The engine's seam for tracing and metrics: step attempts and flushes.

The engine stays pure Python: it knows nothing of OpenTelemetry or
Prometheus. A host that wants to observe it registers one
:class:`EngineObserver` with :func:`set_observer` (django-rivet's app does,
when an observability extra is installed); without one, the two hooks below
hand back what they were given, so an unobserved engine pays one ``is None``
test per step attempt and per flush.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

__all__ = ["EngineObserver", "flush", "observer", "set_observer", "step_attempt"]


class EngineObserver(Protocol):
    """What a host implements to observe the engine."""

    def step_attempt(
        self, workflow_id: str, step: str, attempt: int, fn: Callable[[], Any]
    ) -> Callable[[], Any]:
        """Return ``fn`` wrapped to observe one attempt of step ``step``.

        The wrapper must keep ``fn``'s kind: a coroutine function for a
        coroutine function (the engine awaits it in the workflow's task), a
        plain function otherwise (the driver may run it in its thread).
        """
        ...

    def flush(self, send: Awaitable[None], writes: int) -> Awaitable[None]:
        """Return an awaitable that awaits ``send`` (one flush) observed."""
        ...


_observer: EngineObserver | None = None


def set_observer(new: EngineObserver | None) -> None:
    """Observe every engine run of this process with ``new`` (None: stop)."""
    global _observer
    _observer = new


def observer() -> EngineObserver | None:
    """Return the registered observer, if any."""
    return _observer


def step_attempt(
    workflow_id: str, step: str, attempt: int, fn: Callable[[], Any]
) -> Callable[[], Any]:
    """Return ``fn``, observed as attempt ``attempt`` of ``step`` if anyone watches."""
    if _observer is None:
        return fn
    return _observer.step_attempt(workflow_id, step, attempt, fn)


def flush(send: Awaitable[None], writes: int) -> Awaitable[None]:
    """Return the flush ``send``, observed if anyone watches."""
    if _observer is None:
        return send
    return _observer.flush(send, writes)
