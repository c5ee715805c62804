"""What ``ctx`` offers from the layers above the actor runtime, as interfaces.

``ctx.schedule``, ``ctx.cron``, ``ctx.queue`` and ``handle.send`` are built by
:mod:`django_rivet.scheduling`, ``ctx.workflows`` by
:mod:`django_rivet.workflows`, ``ctx.actors`` by the server-side client
(the last two's interfaces are in :mod:`.handles`). The actor runtime must
not import those layers (they import it, or are its independent sibling),
so it knows them only through Protocols; the app config binds the
implementations at start-up (:func:`bind`). Editors and type checkers see
the Protocols, so ``ctx.schedule.after(...)`` completes and is checked.

This module sits below the rest of the actor runtime too: ``ctx`` imports
it, and the invocation and the client import ``ctx``. So it names none of
them: a handle is an :class:`ActorHandleAPI`, and the factories behind
``ctx.schedule``, ``ctx.cron`` and ``ctx.queue`` are handed the running
invocation without this module naming its class.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

from django.core.exceptions import ImproperlyConfigured

from .handles import ActorsAPI, WorkflowsAPI

if TYPE_CHECKING:
    from .calls import Origin
    from .rows import ActorRef

__all__ = [
    "CronAPI",
    "QueueAPI",
    "QueueSender",
    "ScheduleAPI",
    "Services",
    "bind",
    "services",
]

T = TypeVar("T")


class ScheduleAPI(Protocol):
    """``ctx.schedule``: one-shot schedules calling an action of this actor."""

    def after(
        self,
        delay: float | timedelta,
        action: str,
        *args: Any,
        max_retries: int | None = None,
    ) -> str:
        """Call ``action(*args)`` in ``delay`` seconds; return the schedule id."""
        ...

    def at(
        self,
        when: datetime | float,
        action: str,
        *args: Any,
        max_retries: int | None = None,
    ) -> str:
        """Call ``action(*args)`` at ``when``; return the schedule id."""
        ...

    def retry(self, schedule_id: uuid.UUID | str) -> bool:
        """Run a failed schedule again now; return whether it was failed."""
        ...

    def cancel(self, schedule_id: uuid.UUID | str) -> bool:
        """Cancel a pending schedule; return whether one was cancelled."""
        ...

    def get(self, schedule_id: uuid.UUID | str) -> dict[str, Any] | None:
        """Return one schedule of this actor as a dict, or ``None``."""
        ...

    def list(self) -> builtins.list[dict[str, Any]]:
        """Return this actor's pending schedules."""
        ...

    async def aafter(
        self,
        delay: float | timedelta,
        action: str,
        *args: Any,
        max_retries: int | None = None,
    ) -> str:
        """Async :meth:`after`."""
        ...

    async def aat(
        self,
        when: datetime | float,
        action: str,
        *args: Any,
        max_retries: int | None = None,
    ) -> str:
        """Async :meth:`at`."""
        ...

    async def aretry(self, schedule_id: uuid.UUID | str) -> bool:
        """Async :meth:`retry`."""
        ...

    async def acancel(self, schedule_id: uuid.UUID | str) -> bool:
        """Async :meth:`cancel`."""
        ...

    async def aget(self, schedule_id: uuid.UUID | str) -> dict[str, Any] | None:
        """Async :meth:`get`."""
        ...

    async def alist(self) -> builtins.list[dict[str, Any]]:
        """Async :meth:`list`."""
        ...


class CronAPI(Protocol):
    """``ctx.cron``: named recurring jobs (cron expressions and intervals)."""

    def set(
        self,
        name: str,
        expression: str,
        action: str,
        *args: Any,
        tz: str | None = None,
        max_history: int | None = ...,
        max_retries: int | None = ...,
    ) -> dict[str, Any]:
        """Create or update the job ``name``: call ``action`` on ``expression``."""
        ...

    def every(
        self,
        name: str,
        interval: float | timedelta,
        action: str,
        *args: Any,
        max_history: int | None = ...,
        max_retries: int | None = ...,
    ) -> dict[str, Any]:
        """Create or update the job ``name``: call ``action`` every ``interval``."""
        ...

    def get(self, name: str) -> dict[str, Any] | None:
        """Return the job ``name`` as a dict, or ``None``."""
        ...

    def list(self) -> builtins.list[dict[str, Any]]:
        """Return this actor's jobs, by name."""
        ...

    def delete(self, name: str) -> bool:
        """Delete the job ``name`` and its history; return whether it existed."""
        ...

    def history(self, name: str, limit: int = 20) -> builtins.list[dict[str, Any]]:
        """Return the newest ``limit`` runs of the job ``name``, newest first."""
        ...

    async def aset(
        self,
        name: str,
        expression: str,
        action: str,
        *args: Any,
        tz: str | None = None,
        max_history: int | None = ...,
        max_retries: int | None = ...,
    ) -> dict[str, Any]:
        """Async :meth:`set`."""
        ...

    async def aevery(
        self,
        name: str,
        interval: float | timedelta,
        action: str,
        *args: Any,
        max_history: int | None = ...,
        max_retries: int | None = ...,
    ) -> dict[str, Any]:
        """Async :meth:`every`."""
        ...

    async def aget(self, name: str) -> dict[str, Any] | None:
        """Async :meth:`get`."""
        ...

    async def alist(self) -> builtins.list[dict[str, Any]]:
        """Async :meth:`list`."""
        ...

    async def adelete(self, name: str) -> bool:
        """Async :meth:`delete`."""
        ...

    async def ahistory(
        self, name: str, limit: int = 20
    ) -> builtins.list[dict[str, Any]]:
        """Async :meth:`history`."""
        ...


class QueueAPI(Protocol):
    """``ctx.queue``: send to this actor's own queues."""

    def send(self, queue: str, body: Any) -> dict[str, Any]:
        """Enqueue ``body`` for this actor's handler of ``queue``."""
        ...

    async def asend(self, queue: str, body: Any) -> dict[str, Any]:
        """Async :meth:`send`."""
        ...


class QueueSender(Protocol):
    """Send to any actor's queue (``handle.send``, the transport)."""

    def send(
        self,
        ref: ActorRef,
        queue: str,
        body: Any,
        *,
        wait: bool = False,
        timeout: float | None = None,
        origin: Origin | None = None,
    ) -> dict[str, Any]:
        """Store a message for ``ref``; optionally wait for the reply."""
        ...

    async def asend(
        self,
        ref: ActorRef,
        queue: str,
        body: Any,
        *,
        wait: bool = False,
        timeout: float | None = None,
        origin: Origin | None = None,
    ) -> dict[str, Any]:
        """Async :meth:`send`."""
        ...


# A factory of ctx.schedule, ctx.cron or ctx.queue. ctx calls it with its
# running invocation: an invocation.Invocation, a class this module cannot
# name (that module imports this one, through ctx), hence Any here; the
# scheduler's factories type their parameter.
Factory: TypeAlias = Callable[[Any], T]


@dataclass(slots=True)
class Services:
    """The implementations bound at start-up (``None`` until then)."""

    schedule: Factory[ScheduleAPI] | None = None
    cron: Factory[CronAPI] | None = None
    queue: Factory[QueueAPI] | None = None
    queue_sender: QueueSender | None = None
    workflows: WorkflowsAPI | None = None
    actors: ActorsAPI | None = None

    def require(self, name: str) -> Any:
        """Return the bound implementation ``name``, or explain what is missing."""
        value = getattr(self, name)
        if value is None:
            raise ImproperlyConfigured(
                f"ctx.{name} is not available: add 'django_rivet' to "
                "INSTALLED_APPS (its app config binds it when Django starts)."
            )
        return value


services = Services()


def bind(
    *,
    schedule: Factory[ScheduleAPI] | None = None,
    cron: Factory[CronAPI] | None = None,
    queue: Factory[QueueAPI] | None = None,
    queue_sender: QueueSender | None = None,
    workflows: WorkflowsAPI | None = None,
    actors: ActorsAPI | None = None,
) -> None:
    """Bind implementations (the ones given; the others are kept)."""
    given = {
        "schedule": schedule,
        "cron": cron,
        "queue": queue,
        "queue_sender": queue_sender,
        "workflows": workflows,
        "actors": actors,
    }
    for name, value in given.items():
        if value is not None:
            setattr(services, name, value)
