"""The event log: each broadcast's row, written in the invoking transaction, and reads.

Every broadcast gets a per-actor increasing ``seq`` and a row in
``ActorEvent``, written by :func:`log_statements` (or :func:`append`) in the
invoking transaction; the log keeps the last ``EVENT_LOG_SIZE`` events per
actor, so a client that reconnects with ``?since=<seq>`` is replayed what it
missed (:func:`read`, :func:`window`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Min
from django.db.models.functions import Length

from .. import clock
from ..conf import rivet_settings
from ..encoding import cbor_dumps
from ..exceptions import EventTooLarge
from ..models import Actor, ActorEvent, db

logger = logging.getLogger("django_rivet.events")

__all__ = [
    "READ_BATCH",
    "LoggedEvent",
    "append",
    "encode_args",
    "heads",
    "log_statements",
    "oldest",
    "read",
    "read_bounded",
    "window",
]

# Events read from the log per query (replays and gap repairs).
READ_BATCH = 500


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """One committed broadcast: its seq, name and CBOR-encoded arguments."""

    seq: int
    name: str
    args: bytes


def encode_args(name: str, args: Iterable[Any]) -> bytes:
    """Encode an event's arguments; refuse them over ``MAX_EVENT_BYTES``.

    Called when the event is broadcast or sent, so the handler that made it
    fails (``actor/event_too_large``, its invocation rolls back) instead of
    every connection failing to deliver it later.
    """
    data = cbor_dumps(list(args), f"event {name[:64]} args")
    limit = rivet_settings.MAX_EVENT_BYTES
    if len(data) > limit:
        raise EventTooLarge(
            f"Event {name[:64]!r} is {len(data)} bytes encoded; the limit is {limit}",
            metadata={"event": name[:64], "size": len(data), "limit": limit},
        )
    return data


# -- writing (inside the invoking transaction) ------------------------------------
def append(
    actor_id: uuid.UUID, after_seq: int, events: list[tuple[str, bytes]]
) -> list[LoggedEvent]:
    """Log ``events`` with seqs ``after_seq + 1 ...`` and trim the log.

    Runs in the invocation's transaction, with the actor row locked: seqs
    are gap-free and commit in order.
    """
    logged, statements = log_statements(actor_id, after_seq, events)
    with db.connection().cursor() as cursor:
        for sql, params in statements:
            cursor.execute(sql, params)
    return logged


def log_statements(
    actor_id: uuid.UUID, after_seq: int, events: list[tuple[str, bytes]]
) -> tuple[list[LoggedEvent], list[tuple[str, list[Any]]]]:
    """Return the logged events and the statements that log them, in order.

    What :func:`append` runs; the runtime runs them in the statement that
    writes the actor row instead, where the database can (one round trip
    per invocation on PostgreSQL). The statements insert the events and
    delete those beyond the newest ``EVENT_LOG_SIZE``; none of them reads
    what another writes, so they may run as parts of one statement.
    """
    logged = [
        LoggedEvent(after_seq + 1 + index, name, args)
        for index, (name, args) in enumerate(events)
    ]
    connection = db.connection()
    ops = connection.ops
    table = ops.quote_name(ActorEvent._meta.db_table)
    pk = Actor._meta.pk
    assert pk is not None
    actor = pk.get_db_prep_value(actor_id, connection)
    last = logged[-1].seq
    keep = max(rivet_settings.EVENT_LOG_SIZE, 0)
    statements: list[tuple[str, list[Any]]] = []
    if keep:
        # Only the newest `keep` of these can outlive the trim below.
        kept = logged[-keep:]
        now = ops.adapt_datetimefield_value(clock.now_datetime())
        columns = ", ".join(
            ops.quote_name(c) for c in ("actor_id", "seq", "name", "args", "created_at")
        )
        values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(kept))
        params: list[Any] = []
        for event in kept:
            params += [actor, event.seq, event.name, event.args, now]
        statements.append((f"INSERT INTO {table} ({columns}) VALUES {values}", params))
    if last > keep:
        statements.append(
            (
                f"DELETE FROM {table} WHERE {ops.quote_name('actor_id')} = %s "
                f"AND {ops.quote_name('seq')} <= %s",
                [actor, last - keep],
            )
        )
    return logged, statements


# -- reading ---------------------------------------------------------------------------
def read(
    actor_id: uuid.UUID,
    after: int,
    before: int | None = None,
    names: list[str] | None = None,
    limit: int = READ_BATCH,
) -> list[LoggedEvent]:
    """Read logged events with ``after < seq < before``, in seq order."""
    rows = ActorEvent.objects.filter(actor_id=actor_id, seq__gt=after)
    if before is not None:
        rows = rows.filter(seq__lt=before)
    if names is not None:
        rows = rows.filter(name__in=names)
    found = rows.order_by("seq").values_list("seq", "name", "args")[:limit]
    return [LoggedEvent(seq, name, bytes(args)) for seq, name, args in found]


def read_bounded(
    actor_id: uuid.UUID,
    after: int,
    before: int | None,
    names: list[str] | None,
    limit: int,
    max_bytes: int,
) -> tuple[list[LoggedEvent], bool]:
    """:func:`read` holding at most ``max_bytes`` of arguments (at least one event).

    Returns the events and whether the log may hold more in the range (the
    batch was cut by ``limit`` or ``max_bytes``). The sizes are read first,
    without the arguments, so a reader far behind never holds a whole batch
    of large events at once.
    """
    rows = ActorEvent.objects.filter(actor_id=actor_id, seq__gt=after)
    if before is not None:
        rows = rows.filter(seq__lt=before)
    if names is not None:
        rows = rows.filter(name__in=names)
    sizes = list(
        rows.order_by("seq")
        .annotate(size=Length("args"))
        .values_list("seq", "size")[:limit]
    )
    if not sizes:
        return [], False
    total, last = 0, sizes[0][0]
    for seq, size in sizes:
        total += int(size or 0)
        if total > max_bytes and seq != sizes[0][0]:
            break
        last = seq
    cut = last != sizes[-1][0]
    found = (
        rows.filter(seq__lte=last).order_by("seq").values_list("seq", "name", "args")
    )
    events = [LoggedEvent(seq, name, bytes(args)) for seq, name, args in found]
    return events, cut or len(sizes) >= limit


def oldest(actor_id: uuid.UUID) -> int | None:
    """Return the oldest seq the log still holds for the actor (None: empty)."""
    found: int | None = ActorEvent.objects.filter(actor_id=actor_id).aggregate(
        m=Min("seq")
    )["m"]
    return found


def window(actor_id: uuid.UUID, since: int, head: int) -> tuple[int | None, bool]:
    """Return ``(oldest seq kept, truncated)`` for a replay after ``since``.

    ``head`` is the actor's last committed seq. Truncated means events
    after ``since`` were already dropped from the log (or ``since`` is from
    an earlier life of the actor: it saw seqs this one never issued).
    """
    first = oldest(actor_id)
    if since > head:
        return first, True
    if since == head:
        return first, False
    return first, first is None or first > since + 1


def heads(actor_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, int]:
    """Return the last committed seq of each existing actor (one query per 500)."""
    ids = list(actor_ids)
    found: dict[uuid.UUID, int] = {}
    for start in range(0, len(ids), 500):
        found.update(
            Actor.objects.filter(pk__in=ids[start : start + 500]).values_list(
                "pk", "event_seq"
            )
        )
    return found
