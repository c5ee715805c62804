"""Routes served by daphne in the transport benchmarks, with their baselines.

Besides django-rivet's own routes, the baselines do what a Django developer
would write without django-rivet:

* ``plain_view``: a sync view doing the same database work as the benchmark
  actor's ``increment`` action the way the ORM's documentation shows it
  (``select_for_update().get()``, bump a counter in the CBOR state blob,
  ``save()``, in ``atomic``; on SQLite an ``UPDATE`` first takes the write
  lock, which ``FOR UPDATE`` does not there); ``plain_async_view``:
  ``lock_and_update`` (the raw consumers' work, below) from an async view;
* ``same_commit_view``: the durable commit the action makes and nothing else
  (P2's floor): one raw ``UPDATE`` of a row's state blob in a transaction,
  run from an async view on one long-lived thread that keeps its database
  connection, as django-rivet's invocation threads do;
* ``noop_view``: the server floor, the same request doing no work;
* ``BaselineConsumer``: a raw Channels consumer doing that work per frame
  (``"noop": true`` frames skip it: the WebSocket floor);
* ``GroupConsumer``: a raw consumer in one channel-layer group, forwarding
  each group message as an event frame (the broadcast baseline);
* ``HotConsumer``: what the ``hot`` actor's ``increment`` does, written by
  hand (P12/P13's baseline): every socket of a key joins that key's group;
  a frame locks the key's row, bumps the counter in its state blob and
  commits, then ``group_send`` tells every socket of the key, and the frame
  is answered.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import cbor2
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt

BROADCAST_GROUP = "bench-broadcast"


def lock_and_update(name: str = "baseline") -> int:
    """The baseline's work through the ORM: lock, read, change, write."""
    from bench.benchapp.models import Row

    with transaction.atomic():
        rows = Row.objects.filter(name=name)
        if connection.vendor == "postgresql":
            blob = rows.select_for_update().values_list("state", flat=True).get()
        else:  # SQLite: a write takes the database lock before the read
            rows.update(version=0)
            blob = rows.values_list("state", flat=True).get()
        state = cbor2.loads(blob) if blob else {"n": 0}
        state["n"] += 1
        rows.update(state=cbor2.dumps(state))
        return int(state["n"])


def save_with_orm(name: str = "baseline") -> int:
    """What a Django developer writes: lock the row, change it, ``save()``."""
    from bench.benchapp.models import Row

    with transaction.atomic():
        if connection.vendor == "sqlite":
            # SQLite ignores FOR UPDATE: without a write first, the read's
            # snapshot may be stale by the save ("database is locked").
            Row.objects.filter(name=name).update(version=0)
        row = Row.objects.select_for_update().get(name=name)
        state = cbor2.loads(row.state) if row.state else {"n": 0}
        state["n"] += 1
        row.state = cbor2.dumps(state)
        row.save()
        return int(state["n"])


@csrf_exempt
def plain_view(request: HttpRequest) -> HttpResponse:
    """A sync Django view: decode JSON, do the work with the ORM, answer JSON."""
    json.loads(request.body or b"{}")
    return JsonResponse({"output": save_with_orm()})


# One long-lived thread, so its database connection stays open between
# requests (a sync view's would not: see bench/README.md, P2).
_commit_thread = ThreadPoolExecutor(1, thread_name_prefix="bench-commit")
_same_commit_state = cbor2.dumps({"n": 2**31})  # the size of a counter's state


def same_commit(name: str = "same-commit") -> int:
    """One raw ``UPDATE`` of a row's state in a transaction: one durable commit."""
    from bench.benchapp.models import Row

    quote = connection.ops.quote_name
    table, state, version = (
        quote(Row._meta.db_table),
        quote("state"),
        quote("version"),
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {state} = %s, {version} = {version} + 1 "
            f"WHERE {quote('name')} = %s",
            [_same_commit_state, name],
        )
        return int(cursor.rowcount)


@csrf_exempt
async def same_commit_view(request: HttpRequest) -> HttpResponse:
    """P2's floor: the action's durable commit, the rest of the request alike."""
    json.loads(request.body or b"{}")
    updated = await sync_to_async(
        same_commit, thread_sensitive=False, executor=_commit_thread
    )()
    return JsonResponse({"output": updated})


@csrf_exempt
async def plain_async_view(request: HttpRequest) -> HttpResponse:
    """The same as an async view (the shape of rivet's views)."""
    json.loads(request.body or b"{}")
    return JsonResponse({"output": await sync_to_async(lock_and_update)()})


@csrf_exempt
async def noop_view(request: HttpRequest) -> HttpResponse:
    """The floor: daphne + Django for a request that does no work."""
    json.loads(request.body or b"{}")
    return JsonResponse({"output": None})


class BaselineConsumer(AsyncWebsocketConsumer):
    """A raw consumer: one JSON frame in, the work, one JSON frame out."""

    async def receive(self, text_data=None, bytes_data=None):
        frame = json.loads(text_data or "{}")
        value = None
        if not frame.get("noop"):
            value = await database_sync_to_async(lock_and_update)()
        await self.send(text_data=json.dumps({"id": frame.get("id"), "output": value}))


class GroupConsumer(AsyncWebsocketConsumer):
    """A raw consumer in one group: forwards each group message as an event."""

    groups = [BROADCAST_GROUP]

    async def bench_event(self, message):
        await self.send(
            text_data=json.dumps(
                {"type": "event", "name": message["name"], "args": message["args"]}
            )
        )


def hot_group(key: str) -> str:
    """The channel-layer group of the sockets of one hot key (HotConsumer)."""
    return f"bench-hot-{key}"


def hot_row(key: str) -> str:
    """The baseline row of one hot key (HotConsumer)."""
    return f"hot-{key}"


class HotConsumer(AsyncWebsocketConsumer):
    """A raw consumer doing the ``hot`` actor's work: lock, update, group_send.

    Frames and replies have the shape of django-rivet's own protocol
    (``action`` in; ``action_response`` and ``event`` out), so one client
    drives both sides.
    """

    async def connect(self) -> None:
        self.key = self.scope["url_route"]["kwargs"]["key"]
        await self.channel_layer.group_add(hot_group(self.key), self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(hot_group(self.key), self.channel_name)

    async def receive(self, text_data=None, bytes_data=None):
        frame = json.loads(text_data or "{}")
        value = await database_sync_to_async(lock_and_update)(hot_row(self.key))
        await self.channel_layer.group_send(
            hot_group(self.key), {"type": "hot.changed", "args": [value]}
        )
        await self.send(
            text_data=json.dumps(
                {"type": "action_response", "id": frame.get("id"), "output": value},
                separators=(",", ":"),
            )
        )

    async def hot_changed(self, message):
        await self.send(
            text_data=json.dumps(
                {"type": "event", "name": "changed", "args": message["args"]},
                separators=(",", ":"),
            )
        )


urlpatterns = [
    path("baseline/view", plain_view),
    path("baseline/async-view", plain_async_view),
    path("baseline/noop", noop_view),
    path("baseline/same-commit", same_commit_view),
    path("rivet/", include("django_rivet.urls")),
]
