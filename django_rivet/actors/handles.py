"""``ctx.actors`` and ``ctx.workflows``: the handles ``ctx`` gives, as interfaces.

The server-side actor client (:mod:`.client`) and the workflow runtime
(:mod:`django_rivet.workflows`) implement these Protocols; the actor runtime
names only them. The workflow runtime is the actor runtime's independent
sibling (neither imports the other, import-linter checks it), so
``ctx.workflows.start(...)`` returns a :class:`WorkflowHandleAPI`, which
``django_rivet.workflows.WorkflowHandle`` satisfies; both meet at start-up
(:func:`.services.bind`, called by the app config).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack

if TYPE_CHECKING:
    from ..engine import WorkflowDefinition

__all__ = [
    "ActorHandleAPI",
    "ActorsAPI",
    "Criteria",
    "WorkflowHandleAPI",
    "WorkflowsAPI",
]


class Criteria(TypedDict, total=False):
    """What ``actors.filter`` and ``actors.count`` match besides the name."""

    #: Keys starting with these whole parts (a str is one part).
    key_prefix: str | Sequence[str] | None
    #: Created after this time (exclusive).
    created_after: datetime | None
    #: Created before this time (exclusive).
    created_before: datetime | None


class WorkflowHandleAPI(Protocol):
    """What ``ctx.workflows`` returns: a handle to one workflow instance.

    ``django_rivet.workflows.WorkflowHandle`` implements it; the actor
    runtime names only this interface, so it never imports the workflow
    runtime (the two meet at start-up, through :func:`bind`).
    """

    workflow_id: str
    name: str

    @property
    def status(self) -> str:
        """The current status (read from the database)."""
        ...

    async def astatus(self) -> str:
        """Async :attr:`status`."""
        ...

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the workflow to finish; return its output or raise."""
        ...

    async def aresult(self, timeout: float | None = None) -> Any:
        """Async :meth:`result`."""
        ...

    def send(
        self, name: str, body: Any = None, idempotency_key: str | None = None
    ) -> str:
        """Send a message to the workflow (at most once per key); return its id."""
        ...

    async def asend(
        self, name: str, body: Any = None, idempotency_key: str | None = None
    ) -> str:
        """Async :meth:`send`."""
        ...

    def request(self, name: str, body: Any = None, timeout: float | None = None) -> Any:
        """Send message ``name`` and return the value the workflow replies."""
        ...

    async def arequest(
        self, name: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        """Async :meth:`request`."""
        ...

    def get_event(self, key: str, timeout: float | None = None) -> Any:
        """Return the latest value the workflow published under ``key``."""
        ...

    async def aget_event(self, key: str, timeout: float | None = None) -> Any:
        """Async :meth:`get_event`."""
        ...

    def cancel(self) -> bool:
        """Cancel the workflow for good; return False if it had finished."""
        ...

    async def acancel(self) -> bool:
        """Async :meth:`cancel`."""
        ...


class WorkflowsAPI(Protocol):
    """``ctx.workflows``: start and get durable workflows."""

    def start(
        self,
        workflow: str | WorkflowDefinition,
        input: Any = None,
        id: str | None = None,
        *,
        queue: str | None = None,
        priority: int = 0,
        dedup_key: str | None = None,
        timeout: float | timedelta | None = None,
        attributes: Mapping[str, str | int] | None = None,
        partition_key: str | None = None,
        run_after: datetime | float | timedelta | None = None,
        version: str | None = None,
        debounce: float | timedelta | None = None,
        debounce_max: float | timedelta | None = None,
    ) -> WorkflowHandleAPI:
        """Start a workflow (idempotent per ``id``); runs after commit.

        With ``queue``, it waits in that workflow queue (``priority``,
        ``dedup_key``, ``debounce``: see ``django_rivet.workflows.start``).
        """
        ...

    async def astart(
        self,
        workflow: str | WorkflowDefinition,
        input: Any = None,
        id: str | None = None,
        *,
        queue: str | None = None,
        priority: int = 0,
        dedup_key: str | None = None,
        timeout: float | timedelta | None = None,
        attributes: Mapping[str, str | int] | None = None,
        partition_key: str | None = None,
        run_after: datetime | float | timedelta | None = None,
        version: str | None = None,
        debounce: float | timedelta | None = None,
        debounce_max: float | timedelta | None = None,
    ) -> WorkflowHandleAPI:
        """Async :meth:`start`."""
        ...

    def get(self, workflow_id: str) -> WorkflowHandleAPI:
        """Return the handle of an existing workflow."""
        ...

    async def aget(self, workflow_id: str) -> WorkflowHandleAPI:
        """Async :meth:`get`."""
        ...


class ActorHandleAPI(Protocol):
    """What ``ctx.actors`` returns: a handle to an actor (``client.ActorHandle``)."""

    @property
    def name(self) -> str:
        """The actor's registered name."""
        ...

    @property
    def key(self) -> tuple[str, ...]:
        """The actor's key."""
        ...

    @property
    def actor_id(self) -> uuid.UUID:
        """The id the handle resolved when it was made."""
        ...

    def call(self, action: str, *args: Any) -> Any:
        """Run an action and return its result."""
        ...

    async def acall(self, action: str, *args: Any) -> Any:
        """Async :meth:`call`."""
        ...

    def send(
        self, queue: str, body: Any, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Enqueue a message to the actor's queue ``queue``."""
        ...

    async def asend(
        self, queue: str, body: Any, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Async :meth:`send`."""
        ...

    def destroy(self) -> None:
        """Destroy the actor."""
        ...

    async def adestroy(self) -> None:
        """Async :meth:`destroy`."""
        ...


class ActorsAPI(Protocol):
    """``ctx.actors``: the server-side client, for actor-to-actor calls."""

    def get(self, name: str, key: Any = None) -> ActorHandleAPI:
        """Return a handle to an existing actor."""
        ...

    def get_or_create(
        self, name: str, key: Any = None, input: Any = None
    ) -> ActorHandleAPI:
        """Return a handle, creating the actor if needed."""
        ...

    def create(self, name: str, key: Any = None, input: Any = None) -> ActorHandleAPI:
        """Create a new actor."""
        ...

    def get_by_id(self, actor_id: uuid.UUID | str) -> ActorHandleAPI:
        """Return a handle to the actor with this id."""
        ...

    async def aget(self, name: str, key: Any = None) -> ActorHandleAPI:
        """Async :meth:`get`."""
        ...

    async def aget_or_create(
        self, name: str, key: Any = None, input: Any = None
    ) -> ActorHandleAPI:
        """Async :meth:`get_or_create`."""
        ...

    async def acreate(
        self, name: str, key: Any = None, input: Any = None
    ) -> ActorHandleAPI:
        """Async :meth:`create`."""
        ...

    async def aget_by_id(self, actor_id: uuid.UUID | str) -> ActorHandleAPI:
        """Async :meth:`get_by_id`."""
        ...

    def filter(
        self, name: str | None = None, *, limit: int = 100, **criteria: Unpack[Criteria]
    ) -> Sequence[ActorHandleAPI]:
        """Return handles to existing actors, newest first."""
        ...

    def count(self, name: str | None = None, **criteria: Unpack[Criteria]) -> int:
        """Return how many actors :meth:`filter` would find without its limit."""
        ...
