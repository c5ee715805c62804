"""``GET <prefix>/workflows/{id}/streams/{key}``: a stream as Server-Sent Events.

Each committed value is one message, ``id: <offset>`` and ``data: <JSON
value>``; once the stream is closed, or its workflow finished, and every
value was sent, ``event: close`` ends the response. ``Last-Event-ID`` (what
``EventSource`` sends when it reconnects) or ``?since=`` resumes after that
offset, with no gap and no repeat.

Authorization is the workflow's ``can_read_stream(request, workflow_id,
key)`` (sync or async). Without one, or when it returns a falsy value or
raises, and for an id no workflow has, the answer is the same 403
``workflow/forbidden``: a caller cannot tell a refused workflow from a
missing one. Values are read through :mod:`~django_rivet.workflows.stream_feeds`:
each value's message is encoded once per process, and the messages of what
a commit added are joined once for every reader that is caught up
(:func:`messages`), so a commit costs each reader one write of shared bytes.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from django.http.response import HttpResponseBase

from ..conf import rivet_settings
from ..exceptions import (
    InternalError,
    MethodNotAllowed,
    RivetError,
    WorkflowForbidden,
    WorkflowNotFound,
)
from ..models import Workflow
from ..workflows import registry
from ..workflows.stream_feeds import StreamReader, StreamValue, StreamValues
from . import sse
from .http import error_response
from .limits import outgoing_too_large

logger = logging.getLogger("django_rivet.transport")

__all__ = ["workflow_stream_view"]

CLOSE = sse.frame({}, event="close")


async def workflow_stream_view(
    request: HttpRequest, workflow_id: str, key: str
) -> HttpResponseBase:
    """Stream the values of ``key`` after ``since`` until the stream is over."""
    if request.method != "GET":
        return error_response(MethodNotAllowed(f"{request.method} is not allowed"))
    try:
        since = sse.since_of(request)
        if not await _may_read(request, workflow_id, key):
            # No metadata: the answer must not vary with what the id names.
            raise WorkflowForbidden()
    except RivetError as error:
        return error_response(error)
    reader = StreamReader(workflow_id, key, since)
    return await sse.event_stream(_body(reader))


async def _may_read(request: HttpRequest, workflow_id: str, key: str) -> bool:
    """Ask the workflow's ``can_read_stream``; False when it has none or is none."""
    found = await Workflow.objects.filter(pk=workflow_id).values_list("name").afirst()
    if found is None:
        return False
    try:
        hook = registry.get(found[0]).can_read_stream
    except RivetError:  # a workflow of code this process does not have
        return False
    if hook is None:
        return False
    try:
        if inspect.iscoroutinefunction(hook):
            allowed = await hook(request, workflow_id, key)
        else:
            allowed = await sync_to_async(hook)(request, workflow_id, key)
            if inspect.isawaitable(allowed):
                allowed = await allowed
    except Exception:
        logger.info(
            "can_read_stream refused by raising workflow=%s key=%r",
            workflow_id,
            key,
            exc_info=True,
        )
        return False
    return bool(allowed)


def encoded(value: StreamValue) -> bytes:
    """Return the value's SSE message, encoded once per process."""
    data = value.frame
    if data is None:
        try:
            data = sse.frame(value.decoded(), id=value.offset)
        except Exception:  # not representable in JSON
            logger.warning(
                "stream value not encodable offset=%s", value.offset, exc_info=True
            )
            error = InternalError(
                "A stream value could not be encoded",
                metadata={"offset": value.offset},
            )
            data = sse.error_frame(error)
        too_large = outgoing_too_large(data)
        if too_large is not None:
            too_large.metadata = {**(too_large.metadata or {}), "offset": value.offset}
            data = sse.error_frame(too_large)
        value.frame = data
    return data


def messages(found: StreamValues) -> bytes:
    """Return the SSE messages of ``found``, joined once for all its readers."""
    data = found.frame
    if data is None:
        data = found.frame = b"".join(map(encoded, found))
    return data


async def _body(reader: StreamReader) -> AsyncIterator[bytes]:
    # One generator, no layer between the reader and the response: it runs
    # once per commit for every reader of the stream.
    interval = rivet_settings.SSE_KEEPALIVE_INTERVAL
    try:
        yield sse.RETRY
        while True:
            try:
                found = await reader.next(wait=interval, max_bytes=sse.OUTBOX_BYTES)
            except WorkflowNotFound:  # deleted since the request was authorized
                found = None
            if found is None:
                yield CLOSE
                return
            yield messages(found) if found else sse.KEEPALIVE
    finally:
        reader.close()
