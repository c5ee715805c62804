"""Workflow streams on the database: append, read, announce.

``ctx.write_stream`` values (:mod:`django_rivet.engine.streams`) are rows of
``WorkflowStreamValue`` under one ``WorkflowStream`` row per workflow and
key, which holds the stream's length and whether it is closed. The driver
appends a run's grouped writes with :func:`append_rows`, in one fenced
transaction: the stream row is locked, the sources a replay sends again are
dropped (:func:`django_rivet.engine.stream_store.accept`), the new values
get the next offsets. Only after the commit does :func:`announce` tell this
process's readers (:func:`add_listener`) and every other process's (the
workflow's channel-layer group, :func:`django_rivet.events.workflow_group`):
a value is never seen before it is committed, and a rolled-back append is
never announced. Readers read with :func:`read_after`, and the feeds of
:mod:`.stream_feeds` share what they read among a process's readers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .. import events
from ..engine import schema
from ..engine.stream_store import StreamWrite, accept
from ..models import (
    WORKFLOW_FINISHED,
    Workflow,
    WorkflowStream,
    WorkflowStreamValue,
    base,
    db,
)

if TYPE_CHECKING:
    from django.db.models import Field

logger = logging.getLogger("django_rivet.workflows")

__all__ = [
    "INLINE_BYTES",
    "STREAM_MESSAGE",
    "Appended",
    "StreamMethods",
    "Batch",
    "add_listener",
    "announce",
    "announce_on_commit",
    "append_rows",
    "contents",
    "finished",
    "heads",
    "read_after",
    "remove_listener",
]

# The channel-layer message type of stream commits and workflow ends.
STREAM_MESSAGE = "rivet.stream"
# Values ride in the message up to this many bytes per stream; beyond, the
# message carries the new length and readers read the values.
INLINE_BYTES = 256 * 1024
# Values one read returns at most, and bytes (at least one value).
READ_VALUES = 500
READ_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Appended:
    """What one commit added to one stream: values from ``first`` on."""

    key: str
    first: int
    values: list[bytes]
    closed: bool

    @property
    def length(self) -> int:
        """Return the stream's length after the commit."""
        return self.first + len(self.values) - 1


# -- writing ---------------------------------------------------------------------------
def append_rows(workflow_id: str, writes: list[StreamWrite]) -> list[Appended]:
    """Append a batch of writes in the caller's transaction; return what landed."""
    now = base.now()
    appended: list[Appended] = []
    for key in dict.fromkeys(write.key for write in writes):
        mine = [write for write in writes if write.key == key]
        stream = (
            WorkflowStream.objects.select_for_update()
            .filter(workflow_id=workflow_id, key=key)
            .first()
        )
        if stream is None:
            stream = WorkflowStream.objects.create(
                workflow_id=workflow_id, key=key, updated_at=now
            )
        sources = [write.source for write in mine if write.source is not None]
        known: set[str] = set()
        if sources:
            rows = WorkflowStreamValue.objects.filter(stream=stream, source__in=sources)
            known = {str(source) for source in rows.values_list("source", flat=True)}
        taken, closed = accept(mine, known, stream.closed, f"{workflow_id}/{key}")
        if not taken and closed == stream.closed:
            continue
        first = stream.length + 1
        _insert_values(
            (stream.pk, first + index, write.value, write.source or "")
            for index, write in enumerate(taken)
        )
        WorkflowStream.objects.filter(pk=stream.pk).update(
            length=stream.length + len(taken), closed=closed, updated_at=now
        )
        appended.append(Appended(key, first, [w.value for w in taken], closed))
    return appended


def _insert_values(rows: Iterable[tuple[int, int, bytes, str]]) -> None:
    """Insert value rows with one prepared statement (no model instances).

    The same SQL on every supported database; the ORM's ``bulk_create``
    cost more than the database did (about 45 us a row).
    """
    connection = db.connection()
    quote = connection.ops.quote_name
    meta = WorkflowStreamValue._meta
    columns = ", ".join(
        quote(str(cast("Field[Any, Any]", meta.get_field(name)).column))
        for name in ("stream", "offset", "value", "source")
    )
    statement = (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES (%s, %s, %s, %s)"
    )
    with connection.cursor() as cursor:
        cursor.executemany(statement, list(rows))


# -- announcing ------------------------------------------------------------------------
Listener = Callable[[str, list[Appended], bool], None]
_listeners: set[Listener] = set()
_listeners_lock = threading.Lock()


def add_listener(listener: Listener) -> None:
    """Call ``listener(workflow_id, appended, ended)`` after each commit."""
    with _listeners_lock:
        _listeners.add(listener)


def remove_listener(listener: Listener) -> None:
    """Stop calling ``listener``."""
    with _listeners_lock:
        _listeners.discard(listener)


def announce(workflow_id: str, appended: list[Appended], ended: bool = False) -> None:
    """Tell every reader of ``workflow_id`` what was committed (never raises).

    ``ended``: the workflow finished (its readers end once they read all).
    Called after the commit: this process's listeners at once, the other
    processes through the channel layer (a message it drops is made up by
    the readers' periodic check).
    """
    if not appended and not ended:
        return
    with _listeners_lock:
        listeners = list(_listeners)
    for listener in listeners:
        try:
            listener(workflow_id, appended, ended)
        except Exception:  # pragma: no cover - listeners only schedule work
            logger.exception("stream listener failed workflow=%s", workflow_id)
    message: dict[str, Any] = {
        "type": STREAM_MESSAGE,
        "workflow": workflow_id,
        "ended": ended,
        "streams": [
            [
                item.key,
                item.first,
                item.values if sum(map(len, item.values)) <= INLINE_BYTES else None,
                item.length,
                item.closed,
            ]
            for item in appended
        ],
    }
    events.send_to_group(events.workflow_group(workflow_id), message, merged)


def merged(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """Join two announcements of one workflow queued back to back."""
    return {
        **earlier,
        "ended": earlier["ended"] or later["ended"],
        "streams": earlier["streams"] + later["streams"],
    }


def announce_on_commit(workflow_id: str, appended: list[Appended]) -> None:
    """Announce once the current transaction commits (at once outside one)."""
    if appended:
        db.on_commit(lambda: announce(workflow_id, appended))


# -- reading ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Batch:
    """One read of a stream: values after an offset, and where the stream stands.

    ``finished`` is only read when the batch reached the end of the stream
    (None otherwise); ``exists`` is False when the workflow does not.
    """

    values: list[tuple[int, bytes]]
    length: int
    closed: bool
    finished: bool | None
    exists: bool = True


def read_after(
    workflow_id: str, key: str, after: int, limit: int = READ_VALUES
) -> Batch:
    """Read the committed values of a stream after offset ``after``."""
    found = (
        WorkflowStream.objects.filter(workflow_id=workflow_id, key=key)
        .values_list("id", "length", "closed")
        .first()
    )
    values: list[tuple[int, bytes]] = []
    length, closed = 0, False
    if found is not None:
        stream_id, length, closed = found
        if after < length:
            rows = (
                WorkflowStreamValue.objects.filter(
                    stream_id=stream_id, offset__gt=after
                )
                .order_by("offset")
                .values_list("offset", "value")[:limit]
            )
            size = 0
            for offset, value in rows:
                values.append((int(offset), bytes(value)))
                size += len(value)
                if size >= READ_BYTES:
                    break
    last = values[-1][0] if values else after
    if last < length:
        return Batch(values, length, closed, None)
    status = Workflow.objects.filter(pk=workflow_id).values_list("status").first()
    if status is None:
        return Batch(values, length, closed, True, exists=False)
    return Batch(values, length, closed, status[0] in WORKFLOW_FINISHED)


def heads(
    workflow_ids: list[str],
) -> dict[tuple[str, str], tuple[int, bool]]:
    """Return ``(length, closed)`` of every stream of these workflows."""
    rows = WorkflowStream.objects.filter(workflow_id__in=workflow_ids).values_list(
        "workflow_id", "key", "length", "closed"
    )
    return {(w, k): (int(length), bool(c)) for w, k, length, c in rows}


def finished(workflow_ids: list[str]) -> set[str]:
    """Return which of these workflows finished (or no longer exist)."""
    live = set(
        Workflow.objects.filter(pk__in=workflow_ids)
        .exclude(status__in=WORKFLOW_FINISHED)
        .values_list("pk", flat=True)
    )
    return set(workflow_ids) - live


def contents(workflow_id: str) -> dict[str, tuple[list[Any], bool]]:
    """Return every stream of a workflow, decoded: ``key: (values, closed)``."""
    out: dict[str, tuple[list[Any], bool]] = {}
    for stream in WorkflowStream.objects.filter(workflow_id=workflow_id):
        values = stream.values.order_by("offset").values_list("value", flat=True)
        out[stream.key] = ([schema.loads(bytes(v)) for v in values], stream.closed)
    return out


class StreamMethods:
    """The engine's stream method, for a driver of one workflow.

    The driver provides ``workflow_id``, ``_db`` (where database work runs)
    and ``_write`` (a fenced write); ``streamed`` tells the run's release to
    announce the streams' end to readers.
    """

    workflow_id: str
    streamed: bool
    _db: Callable[..., Any]
    _write: Callable[..., Any]

    async def append_streams(self, writes: list[StreamWrite]) -> None:
        """Append stream values (``ctx.write_stream``) in one fenced transaction.

        Readers hear of them once that transaction commits.
        """

        def append() -> None:
            appended = self._write(lambda: append_rows(self.workflow_id, writes))
            announce_on_commit(self.workflow_id, appended)

        await self._db(append)
        self.streamed = True
