"""``GET <prefix>/actors/{name}/events``: an actor's events as Server-Sent Events.

For clients that cannot hold a WebSocket (some proxies, serverless edges,
``curl``): the same events, in the same order, with the same guarantees as
a WebSocket connection's (docs/protocol.md, "Delivery guarantee"), because
the same code delivers them -- a :class:`~.subscriptions.Subscriptions`
with its :class:`~.delivery.Stream` on the process's feed of the actor,
replaying the log after ``since`` -- into an :class:`EventSocket` that
encodes SSE messages instead of frames:

* first ``event: init`` with ``{"actor_id", "seq"}`` (the actor's last seq
  when the follower was admitted; its ``id:`` is ``since``, or that seq, so
  a reconnection resumes from there), then ``id: <seq>``, ``event: <name>``,
  ``data: <JSON array of the args>`` per event;
* ``actor/event_log_truncated``, ``actor/events_missed``, refused
  subscriptions and undeliverable events as ``event: error`` with the
  WebSocket's error frame as data (an object, where events carry arrays);
* admission through the runtime (:class:`~django_rivet.actors.connections.
  FollowEvents`): ``on_auth`` with ``info.transport == "sse"`` and
  ``info.kind == "connect"``, then ``can_subscribe`` per name;
* ``Last-Event-ID`` or ``?since=`` replays what followed that seq.

No connection row, state or actions: the route is for following. The
actor is not created unless ``?create=true``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from django.http import HttpRequest
from django.http.response import HttpResponseBase

from ..actors.connections import FOLLOWER, ConnectResult, FollowEvents
from ..actors.lanes import ainvoke
from ..actors.rows import ActorRef
from ..exceptions import MalformedRequest, RivetError
from . import sse
from .codec import FrameCodec
from .http import actor_ref, http_origin, rivet_api
from .parsing import MAX_SUBSCRIPTIONS, event_name, parse_bool, query_params
from .subscriptions import Subscriptions

__all__ = ["EventSocket", "actor_events_view"]

WILDCARD = "*"


class EventSocket(FrameCodec):
    """The follower's side of a :class:`Subscriptions`: SSE messages, bounded."""

    encoding = "json"

    def __init__(self) -> None:
        self.closed = False
        self.outbox = sse.Outbox()

    def encode_event(self, name: str, seq: int | None, args: list[Any]) -> bytes:
        """Encode an event as an SSE message (names with line breaks cannot go)."""
        if "\n" in name or "\r" in name:
            raise ValueError("an event name with a line break")
        return sse.frame(args, id=seq, event=name)

    def encode_error(self, error: RivetError, action_id: Any) -> bytes:
        """Encode an ``event: error`` message."""
        return sse.error_frame(error)

    async def send_frame(self, data: bytes) -> None:
        """Hand a message to the response (waits while the outbox is full)."""
        if not self.closed:
            await self.outbox.put(data)

    async def send_error_frame(self, error: RivetError, action_id: Any = None) -> None:
        """Send an ``event: error`` message."""
        await self.send_frame(sse.error_frame(error))

    async def event_undeliverable(self, error: RivetError) -> None:
        """Tell the client an event could not be sent to it."""
        await self.send_error_frame(error)


def _follow_request(request: HttpRequest) -> tuple[list[str], bool, int | None]:
    """Read ``subscribe`` and the replay point: (names, wildcard, since)."""
    query = query_params(request.META.get("QUERY_STRING", ""))
    names: list[str] = []
    wildcard = False
    for value in query.get("subscribe", []):
        for name in value.split(","):
            if name == WILDCARD:
                wildcard = True
            elif name:
                names.append(event_name(name))
    if len(names) > MAX_SUBSCRIPTIONS:
        raise MalformedRequest(f"At most {MAX_SUBSCRIPTIONS} subscriptions")
    replay = "since" in query or request.headers.get("Last-Event-ID")
    since = sse.since_of(request) if replay else None
    return sorted(set(names)) + ([WILDCARD] if wildcard else []), wildcard, since


@rivet_api("GET")
async def actor_events_view(
    request: HttpRequest, encoding: str, name: str
) -> HttpResponseBase:
    """Admit the follower, then stream the actor's events until it goes."""
    names, _wildcard, since = _follow_request(request)
    create = parse_bool(request.GET.get("create"), "create", False)
    ref = actor_ref(request, name, "get_or_create" if create else "get")
    origin = dataclasses.replace(await http_origin(request), transport="sse")
    result = await ainvoke(ref, FollowEvents(names, since), origin)
    socket = EventSocket()
    subscriptions = Subscriptions(socket)
    subscriptions.follow(
        ActorRef(name=result.name, actor_id=result.actor_id),
        origin,
        FOLLOWER,
        result.head,
        set(names) - set(result.refused),
        since,
        "sse.json",
    )
    return await sse.event_stream(_body(socket, subscriptions, result, since))


async def _body(
    socket: EventSocket,
    subscriptions: Subscriptions,
    result: ConnectResult,
    since: int | None,
) -> AsyncIterator[bytes]:
    sender: asyncio.Task[None] | None = None
    try:
        # Like the WebSocket's init frame; its id is where a reconnection
        # resumes if no event comes first (EventSource sends it back).
        resume = result.head if since is None else since
        init = {"actor_id": str(result.actor_id), "seq": result.head}
        await socket.send_frame(sse.frame(init, id=resume, event="init"))
        for notice in result.notices(since):
            await socket.send_error_frame(notice)
        # Replays after since, then follows: concurrently with the response.
        sender = asyncio.ensure_future(subscriptions.start())
        async for chunk in sse.with_keepalive(socket.outbox.take):
            yield chunk
    finally:
        socket.closed = True
        if sender is not None and not sender.done():
            sender.cancel()
        await subscriptions.stop()
