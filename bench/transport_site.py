"""Routes served by daphne in the transport benchmark.

Besides django-rivet's own routes, two baselines do the same ORM work as the
benchmark's actor action (one transaction that locks a row and updates a
field): a plain Django view (sync and async) and a raw Channels consumer.
"""

from __future__ import annotations

import json

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.db import connection, transaction
from django.db.models import F
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt


def lock_and_update() -> int:
    """The baseline's work: lock the row, bump its value, return it."""
    from bench.benchapp.models import Row

    # Two statements, as an invocation needs: lock+read, then write.
    with transaction.atomic():
        rows = Row.objects.filter(name="baseline")
        if connection.vendor == "postgresql":
            value = rows.select_for_update().values_list("value", flat=True).get()
            rows.update(value=F("value") + 1)
            return value + 1
        rows.update(value=F("value") + 1)  # SQLite: the write takes the lock
        return rows.values_list("value", flat=True).get()


@csrf_exempt
def plain_view(request: HttpRequest) -> HttpResponse:
    """A sync Django view: decode JSON, do the work, answer JSON."""
    json.loads(request.body or b"{}")
    return JsonResponse({"output": lock_and_update()})


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
    """A raw consumer: one JSON frame in, the work, one JSON frame out.

    Frames with ``"noop": true`` skip the work (the WebSocket floor).
    """

    async def receive(self, text_data=None, bytes_data=None):
        frame = json.loads(text_data or "{}")
        value = None
        if not frame.get("noop"):
            value = await database_sync_to_async(lock_and_update)()
        await self.send(text_data=json.dumps({"id": frame.get("id"), "output": value}))


urlpatterns = [
    path("baseline/view", plain_view),
    path("baseline/async-view", plain_async_view),
    path("baseline/noop", noop_view),
    path("rivet/", include("django_rivet.urls")),
]
