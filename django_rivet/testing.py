"""Testing tools for projects using django-rivet (docs/testing.md).

Also a pytest plugin: ``-p django_rivet.testing`` (or ``pytest_plugins``)
provides the ``rivet_clock`` fixture.

pytest loads a ``-p`` plugin before pytest-django sets Django up, so the
helpers import the runtime (which needs the app registry) when called, not
at module level.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from .actors import registry as actor_registry
from .actors.definition import Actor
from .clock import VirtualClock, freeze_time
from .engine import WorkflowDefinition

__all__ = [
    "VirtualClock",
    "close_db_connections",
    "freeze_time",
    "register_temporarily",
    "reset_actor_cache",
]


@contextlib.contextmanager
def register_temporarily(*items: Any) -> Iterator[None]:
    """Register actor classes and ``@workflow`` definitions for a ``with`` block.

    For definitions that autodiscovery does not find (those of a test
    module)::

        with register_temporarily(Counter, summarize):
            ...

    Whatever was registered under the same names before is restored after.
    """
    from .workflows import registry as workflow_registry

    actors = [item for item in items if isinstance(item, type)]
    definitions = [item for item in items if isinstance(item, WorkflowDefinition)]
    wrong = [
        item
        for item in items
        if not (isinstance(item, WorkflowDefinition) or _is_actor_class(item))
    ]
    if wrong:
        raise TypeError(
            f"register_temporarily takes Actor subclasses and @workflow "
            f"definitions, not {wrong[0]!r}"
        )
    with (
        actor_registry.register_temporarily(*actors),
        workflow_registry.register_temporarily(*definitions),
    ):
        yield


def _is_actor_class(item: Any) -> bool:
    return isinstance(item, type) and issubclass(item, Actor)


def close_db_connections() -> None:
    """Close database connections held by background threads.

    Async invocations run in worker threads, WebSocket connections read the
    event log in threads of their own, and the async ORM runs in asgiref's
    shared thread; all keep their connection open. PostgreSQL refuses to
    drop a test database while they do, so call this before teardown (the
    project's own test suite does it in a session fixture).
    """
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connections

    from .models import db

    db.close_worker_connections()
    # With no event loop running here, thread-sensitive code runs in
    # asgiref's single shared thread: close that thread's connection too.
    asyncio.run(sync_to_async(connections.close_all)())
    connections.close_all()


def reset_actor_cache() -> None:
    """Forget every actor instance loaded in this process (no hooks run).

    The next call loads the actor as a fresh process would: ``on_wake`` runs
    and the state is decoded from the database.
    """
    from .actors import cache

    cache.clear()


try:  # the pytest plugin part, only when pytest is importable
    import pytest
except ImportError:  # pragma: no cover
    pass
else:

    @pytest.fixture
    def rivet_clock() -> Iterator[VirtualClock]:
        """A frozen virtual clock for the test (``.advance(seconds)``)."""
        with freeze_time() as clock:
            yield clock

    __all__ += ["rivet_clock"]


# -- communicator helpers for the WebSocket protocol (docs/protocol.md) -------------
from typing import Any as _Any  # noqa: E402

from channels.testing.websocket import WebsocketCommunicator  # noqa: E402


def websocket_application(prefix: str = "rivet/") -> _Any:
    """Return an ASGI app routing ``websocket_urlpatterns`` under ``prefix``."""
    from channels.routing import URLRouter
    from django.urls import path

    from .routing import websocket_urlpatterns

    return URLRouter([path(prefix, URLRouter(websocket_urlpatterns))])


def conn_params_protocol(params: _Any) -> str:
    """Return the ``rivet_conn_params.<base64url JSON>`` subprotocol."""
    import base64

    from .encoding import json_dumps

    encoded = base64.urlsafe_b64encode(json_dumps(params).encode("utf-8"))
    return "rivet_conn_params." + encoded.decode("ascii").rstrip("=")


class RivetCommunicator(WebsocketCommunicator):
    """A ``WebsocketCommunicator`` speaking the rivet protocol to one actor.

    ::

        comm = RivetCommunicator("chatRoom", ["lobby"], params={"name": "ann"})
        init = await comm.handshake()          # the init (or error) frame
        await comm.subscribe("newMessage")
        assert await comm.call("send_message", "hi") == 1
        event = await comm.receive_event("newMessage")
        await comm.disconnect()

    Tests using it need ``pytest.mark.django_db(transaction=True)``.
    """

    def __init__(
        self,
        name: str,
        key: _Any = None,
        *,
        params: _Any = None,
        encoding: str = "json",
        since: int | None = None,
        subscribe: str | list[str] | None = None,
        actor_id: str | None = None,
        query: dict[str, str] | None = None,
        origin: str | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
        subprotocols: list[str] | None = None,
        application: _Any = None,
        prefix: str = "rivet/",
    ) -> None:
        from urllib.parse import urlencode

        pairs: list[tuple[str, str]] = []
        keys = [key] if isinstance(key, str) else list(key or [])
        pairs += [("key", part) for part in keys]
        pairs.append(("encoding", encoding))
        if actor_id is not None:
            pairs.append(("actor_id", actor_id))
        if since is not None:
            pairs.append(("since", str(since)))
        if subscribe is not None:
            names = [subscribe] if isinstance(subscribe, str) else subscribe
            pairs.append(("subscribe", ",".join(names)))
        pairs += list((query or {}).items())
        if subprotocols is None:
            subprotocols = ["rivet"]
            if params is not None:
                subprotocols.append(conn_params_protocol(params))
        all_headers = list(headers or [])
        if not any(name.lower() == b"host" for name, _ in all_headers):
            # Like Django's test client: the server is "testserver", so a page
            # from http://testserver is same-origin.
            all_headers.append((b"host", b"testserver"))
        if origin is not None:
            all_headers.append((b"origin", origin.encode("latin-1")))
        super().__init__(
            application or websocket_application(prefix),
            f"/{prefix}actors/{name}/connect?{urlencode(pairs)}",
            headers=all_headers,
            subprotocols=subprotocols,
        )
        self.encoding = encoding
        self._next_id = 0
        self._frames: list[dict[str, _Any]] = []

    async def handshake(self, timeout: float = 10) -> dict[str, _Any]:
        """Connect and return the first frame: ``init``, or ``error`` if refused."""
        accepted, _ = await self.connect(timeout)
        if not accepted:
            raise AssertionError("the server rejected the WebSocket handshake")
        return await self.receive_frame(timeout)

    async def disconnect(self, code: int = 1000, timeout: float = 10) -> None:
        """Close the socket and wait for the consumer (``on_disconnect``) to end."""
        await super().disconnect(code, timeout)

    async def send_frame(self, frame: dict[str, _Any]) -> None:
        """Encode and send one client frame."""
        from .encoding import encode

        data = encode(frame, self.encoding)  # type: ignore[arg-type]
        if self.encoding == "cbor":
            await self.send_to(bytes_data=data)
        else:
            await self.send_to(text_data=data.decode("utf-8"))

    async def _next_frame(self, timeout: float) -> dict[str, _Any]:
        from .encoding import decode_trusted as decode

        message = await self.receive_output(timeout)
        if message["type"] == "websocket.close":
            raise ConnectionClosedForTest(message.get("code", 1000))
        data = message.get("bytes")
        if data is None:
            data = message["text"]
        return decode(data, self.encoding)  # type: ignore[arg-type, no-any-return]

    async def receive_frame(self, timeout: float = 10) -> dict[str, _Any]:
        """Return the next server frame (frames put aside by ``call`` first)."""
        if self._frames:
            return self._frames.pop(0)
        return await self._next_frame(timeout)

    async def receive_close(self, timeout: float = 10) -> int:
        """Wait for the server to close; return the close code."""
        while True:
            try:
                await self.receive_frame(timeout)
            except ConnectionClosedForTest as closed:
                return closed.code

    async def send_action(self, action: str, *args: _Any) -> int:
        """Send an action frame without waiting; return its id."""
        self._next_id += 1
        await self.send_frame(
            {"type": "action", "id": self._next_id, "name": action, "args": list(args)}
        )
        return self._next_id

    async def wait_response(self, action_id: int, timeout: float = 10) -> _Any:
        """Return the output of action ``action_id``; raise its error."""
        from .exceptions import error_from_dict

        def answers(frame: dict[str, _Any]) -> bool:
            if frame.get("type") == "action_response":
                return bool(frame["id"] == action_id)
            return frame.get("type") == "error" and frame.get("action_id") == action_id

        frame = await self._first(answers, timeout)
        if frame.get("type") == "error":
            raise error_from_dict(frame)
        return frame.get("output")

    async def call(self, action: str, *args: _Any, timeout: float = 10) -> _Any:
        """Run an action over the socket and return its output."""
        return await self.wait_response(await self.send_action(action, *args), timeout)

    async def subscribe(self, event: str) -> None:
        """Subscribe to ``event``."""
        await self.send_frame({"type": "subscribe", "event": event})

    async def unsubscribe(self, event: str) -> None:
        """Unsubscribe from ``event``."""
        await self.send_frame({"type": "unsubscribe", "event": event})

    async def receive_event(
        self, name: str | None = None, timeout: float = 10
    ) -> dict[str, _Any]:
        """Return the next ``event`` frame (named ``name``), skipping others."""

        def wanted(frame: dict[str, _Any]) -> bool:
            return frame.get("type") == "event" and name in (None, frame["name"])

        return await self._first(wanted, timeout)

    async def _first(
        self, wanted: Callable[[dict[str, _Any]], bool], timeout: float
    ) -> dict[str, _Any]:
        """Return the first frame ``wanted`` accepts; keep the others for later."""
        aside: list[dict[str, _Any]] = []
        try:
            while True:
                frame = await self.receive_frame(timeout)
                if wanted(frame):
                    return frame
                aside.append(frame)
        finally:
            self._frames[:0] = aside


class ConnectionClosedForTest(Exception):
    """The server closed the socket (``code`` is the close code)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"closed with code {code}")
        self.code = code


__all__ += [
    "ConnectionClosedForTest",
    "RivetCommunicator",
    "conn_params_protocol",
    "websocket_application",
]


# -- due work without a broker (the worker's round, in this process) -----------------
def run_due(*, max_rounds: int = 100) -> int:
    """Run everything due now, in this process; return how many items ran.

    Fires due schedules and cron runs, delivers queue messages and runs the
    other due work of the in-process worker (scheduled workflows, workflow
    queues, workflows: ``django_rivet.upkeep.worker.DUE_WORK``), round after
    round until nothing is left, using the current clock -- the virtual
    one under :func:`freeze_time`. No broker, no worker::

        with freeze_time() as clock:
            handle.call("remind_me_in", 30)
            clock.advance(30)
            assert run_due() == 1
    """
    from .upkeep.worker import run_due_work

    total = 0
    for _ in range(max_rounds):
        ran = run_due_work()
        if not ran:
            break
        total += ran
    return total


__all__ += ["run_due"]


# -- workflows without a broker (the workflow runtime) ---------------------------------
def run_until_idle(handle: _Any, *, max_runs: int = 1000) -> str:
    """Drive a workflow in this process until it completes, fails or waits.

    Runs it while it is due -- now by the current clock, the virtual one
    under :func:`freeze_time` -- and returns its status: ``completed``,
    ``failed``, ``cancelled``, or ``sleeping`` when it waits for a later time
    or a message (``rolling_back`` when a rollback handler keeps failing;
    ``queued`` when its workflow queue's limits do not let it start yet).
    ``handle`` is a :class:`~django_rivet.workflows.WorkflowHandle` or an id::

        with freeze_time() as clock:
            h = workflows.start("order", {"sku": "A1"})
            assert run_until_idle(h) == "sleeping"   # ctx.sleep("cool-off", 300)
            clock.advance(300)
            assert run_until_idle(h) == "completed"
    """
    from .models import Workflow, WorkflowStatus
    from .workflows import execution, queues

    workflow_id = getattr(handle, "workflow_id", handle)
    queued = Workflow.objects.filter(pk=workflow_id, status=WorkflowStatus.QUEUED)
    queue = queued.values_list("queue", flat=True).first()
    if queue is not None:
        # What happens after the start commits: its queue may start it now.
        queues.admit(queue)
    for _ in range(max_runs):
        # No live window: nothing else runs in this thread meanwhile.
        if execution.run(workflow_id, max_passes=1, live_wait=0) is None:
            break
    status = Workflow.objects.filter(pk=workflow_id).values_list("status", flat=True)
    found = status.first()
    if found is None:
        from .exceptions import WorkflowNotFound

        raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")
    return str(found)


async def arun_until_idle(handle: _Any, *, max_runs: int = 1000) -> str:
    """Async :func:`run_until_idle` (runs it in a worker thread)."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(run_until_idle, thread_sensitive=True)(
        handle, max_runs=max_runs
    )


__all__ += ["arun_until_idle", "run_until_idle"]
