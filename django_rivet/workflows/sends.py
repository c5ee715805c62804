"""Messages to workflows: ``handle.send``, ``workflows.send_many``, the inbox.

A message is a ``WorkflowMessage`` row in the workflow's inbox (FIFO by id)
until the workflow receives it. Sending wakes the workflow, in the same
transaction, when its current wait takes that name. An idempotency key
makes a send happen at most once per key and workflow: the key is kept
(``WorkflowMessageKey``) after the message was received, until the
workflow is deleted, and a second send with it returns the first one's
message id and sends nothing. ``send_many`` sends a list in one
transaction: all of them, or none when one cannot be sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import clock
from ..engine import Message, encode_message_body, schema
from ..exceptions import WorkflowFinished, WorkflowInboxFull, WorkflowNotFound
from ..models import (
    WORKFLOW_ACTIVE,
    WORKFLOW_FINISHED,
    Workflow,
    WorkflowMessage,
    WorkflowMessageKey,
    db,
    sql,
)
from . import handoff, live
from .wakeups import schedule_wake, wake_fields

logger = logging.getLogger("django_rivet.workflows")

__all__ = [
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "MAX_INBOX_MESSAGES",
    "Send",
    "inbox",
    "send",
    "send_many",
]


@dataclass(frozen=True, slots=True)
class Send:
    """One message of :func:`send_many`: to ``workflow_id``, named ``name``."""

    workflow_id: str
    name: str
    body: Any = None
    idempotency_key: str | None = None


#: Unreceived messages one workflow's inbox may hold (as an actor's queue).
MAX_INBOX_MESSAGES = 1000
MAX_IDEMPOTENCY_KEY_LENGTH = 255


def _not_found(workflow_id: str) -> WorkflowNotFound:
    return WorkflowNotFound(f"No workflow has id {workflow_id!r}")


def _inbox_full(workflow_id: str) -> WorkflowInboxFull:
    return WorkflowInboxFull(
        f"Workflow {workflow_id!r} holds {MAX_INBOX_MESSAGES} unreceived "
        "messages; it must receive some first",
        metadata={"limit": MAX_INBOX_MESSAGES},
    )


def _check_key(key: str | None) -> None:
    if key is not None and (
        not isinstance(key, str) or not 0 < len(key) <= MAX_IDEMPOTENCY_KEY_LENGTH
    ):
        raise ValueError(
            f"An idempotency key is a string of 1-{MAX_IDEMPOTENCY_KEY_LENGTH} "
            f"characters, not {key!r}"
        )


def _deliver(message: Send, data: bytes, now: datetime) -> str:
    """Store one message and wake its workflow (call in a transaction).

    Two hand-written statements (:meth:`.sql.Dialect.send_sql`; one on
    PostgreSQL): the row's ``UPDATE ... RETURNING`` (its wake signal, and
    its wake when it waits for the name), then the message's insert,
    guarded by the inbox's count. A refused send raises, and the
    transaction (or savepoint) around it rolls the update back.
    """
    workflow_id, name, key = message.workflow_id, message.name, message.idempotency_key
    connection = db.connection()
    dialect = sql.dialect(connection)
    wake = {"wake_at": now, **wake_fields(now)}
    statements = dialect.send_sql(
        WORKFLOW_ACTIVE, WORKFLOW_FINISHED, list(wake), MAX_INBOX_MESSAGES
    )
    at = dialect.now_param(connection, now)
    inserted: tuple[Any, ...] | None = None
    counted = False  # the one statement's count was exact
    with connection.cursor() as cursor:
        # The row's update comes first: it locks the row (the database, on
        # SQLite), so a run releasing concurrently either sees the signal
        # (and runs again) or released before (and its waiting_for is what
        # this reads), and concurrent senders of one key look for it in turn.
        if key is None:
            # The wake rides along; a refused send rolls it back.
            params = _wake_params(dialect, connection, name, wake)
            if statements.one is not None:  # the insert too
                cursor.execute(
                    statements.one,
                    [*params, workflow_id, workflow_id, workflow_id]
                    + [workflow_id, name, data, at, MAX_INBOX_MESSAGES],
                )
                found = cursor.fetchone()
                if found is not None:
                    counted, inserted, found = found[2], (found[3],), found[:2]
            else:
                cursor.execute(statements.signal_and_wake, [*params, workflow_id])
                found = cursor.fetchone()
        else:
            cursor.execute(statements.signal, [workflow_id])
            found = cursor.fetchone()
        if found is None:
            raise _not_found(workflow_id)
        if key is not None:
            sent = WorkflowMessageKey.objects.filter(workflow_id=workflow_id, key=key)
            first = sent.values_list("message_id", flat=True).first()
            if first is not None:
                return str(first)  # sent before: at most once per key
        status, waiting_for = found
        if status in WORKFLOW_FINISHED:
            # Nothing would receive it, and it would be kept until retention.
            raise WorkflowFinished(
                f"Workflow {workflow_id!r} has finished ({status}): it takes no "
                "more messages",
                metadata={"status": status},
            )
        if inserted is None or (inserted[0] is None and not counted):
            # (The one statement's count missed a send that committed while
            # it waited for the row's lock: this one counts again.)
            cursor.execute(
                statements.insert,
                [workflow_id, name, data, at, workflow_id, MAX_INBOX_MESSAGES],
            )
            inserted = cursor.fetchone()
    if inserted is None or inserted[0] is None:
        raise _inbox_full(workflow_id)
    pk = inserted[0]
    if key is not None:
        WorkflowMessageKey.objects.create(
            workflow_id=workflow_id, key=key, message_id=pk
        )
    woke = _after_commit(workflow_id, name, status, waiting_for, now)
    if woke and key is not None:  # (else the update above woke it)
        Workflow.objects.filter(pk=workflow_id).update(**wake)
    return str(pk)


def _wake_params(
    dialect: sql.Dialect, connection: Any, name: str, wake: dict[str, Any]
) -> list[Any]:
    """Return the parameters of a send's wake columns (:class:`.sql.SendSQL`)."""
    tests = [dialect.json_list_contains("", (), n)[1][-1] for n in (name, "*")]
    params: list[Any] = []
    for value in wake.values():
        params += [*tests, dialect.now_param(connection, value)]
    return params


def _after_commit(
    workflow_id: str, name: str, status: str, waiting_for: Any, now: datetime
) -> bool:
    """Signal a live run here, and dispatch a woken workflow, on commit.

    Returns whether the message wakes the workflow (active, and it waits for
    the name or any).
    """
    # A run of it waiting in its live window here hears of it at once (its
    # waiting_for on the row is its last release's, not what it waits for).
    live.signal_on_commit(workflow_id, name)
    return _dispatch(workflow_id, name, status, waiting_for, now)


def _dispatch(
    workflow_id: str, name: str, status: str, waiting_for: Any, now: datetime
) -> bool:
    """Dispatch the workflow if the message wakes it; return whether it does."""
    if isinstance(waiting_for, str):  # JSON text (both backends, via Django)
        waiting_for = json.loads(waiting_for)
    woke = status in WORKFLOW_ACTIVE and (name in waiting_for or "*" in waiting_for)
    if woke:
        schedule_wake(workflow_id, now)
    return woke


def _send_alone(message: Send, data: bytes, now: datetime) -> str | None:
    """Send one message in one autocommitted statement, where the database can.

    PostgreSQL, outside a transaction: one round trip where BEGIN, the
    statement and COMMIT take three, and the row's lock is held for the
    commit only (a live run's next write waits for it). Returns None,
    having written nothing, when the statement cannot tell (a refusal, or
    another send raced it): the transaction's path then answers exactly,
    errors included.
    """
    connection = db.connection()
    dialect = sql.dialect(connection)
    if (
        not dialect.sends_in_one_statement
        or connection.in_atomic_block
        or not connection.get_autocommit()
    ):
        return None
    workflow_id, name = message.workflow_id, message.name
    wake = {"wake_at": now, **wake_fields(now)}
    statements = dialect.send_sql(
        WORKFLOW_ACTIVE, WORKFLOW_FINISHED, list(wake), MAX_INBOX_MESSAGES
    )
    assert statements.alone is not None  # (sends_in_one_statement)
    params = _wake_params(dialect, connection, name, wake)
    at = dialect.now_param(connection, now)
    # A live run of it here waits for this send rather than read the inbox
    # while it is under way, and takes the message as it is (no read).
    with handoff.sending(workflow_id), connection.cursor() as cursor:
        cursor.execute(
            statements.alone,
            [*params, workflow_id, workflow_id, workflow_id, MAX_INBOX_MESSAGES]
            + [workflow_id, name, data, at],
        )
        found = cursor.fetchone()
        if found is None:
            return None
        status, waiting_for, pk, signal, token, cancel_requested = found
        handed = handoff.Handed(
            signal, pk, name, data, clock.to_timestamp(now), token, cancel_requested
        )
        handoff.hand(workflow_id, handed)
        # The signal before the send ends: a run that waited for it then
        # takes the message with this wake, not with a later one's.
        live.signal_on_commit(workflow_id, name)  # (committed: at once)
    # Out of it: a dispatch (a broker call) holds no looking run.
    _dispatch(workflow_id, name, status, waiting_for, now)
    return str(pk)


def send(
    workflow_id: str, name: str, body: Any = None, idempotency_key: str | None = None
) -> str:
    """Store a message in the workflow's inbox and wake it if it waits for it.

    Returns the message id (with an ``idempotency_key`` used before, the
    first message's, and nothing is sent). Raises ``TypeError`` for a body
    that cannot be stored, ``workflow/not_found`` for an unknown workflow,
    ``workflow/finished`` for one that finished (completed, failed or
    cancelled) and ``workflow/inbox_full`` past ``MAX_INBOX_MESSAGES``
    unreceived messages.
    """
    return send_many([Send(workflow_id, name, body, idempotency_key)])[0]


def send_many(messages: Iterable[Send]) -> list[str]:
    """Send every message in one transaction; return their ids, in order.

    All or nothing: an unknown workflow, a full inbox or a body that cannot
    be stored sends none of them. Two messages to one workflow with the
    same idempotency key are a ``ValueError`` (nothing sent); a key used
    before returns the earlier message's id and sends that one again never.
    """
    batch = list(messages)
    seen: set[tuple[str, str]] = set()
    encoded = []
    for message in batch:
        _check_key(message.idempotency_key)
        if message.idempotency_key is not None:
            pair = (message.workflow_id, message.idempotency_key)
            if pair in seen:
                raise ValueError(
                    f"Two messages to workflow {message.workflow_id!r} have the "
                    f"idempotency key {message.idempotency_key!r}"
                )
            seen.add(pair)
        encoded.append(encode_message_body(message.body))
    if not batch:
        return []
    now = clock.now_datetime()
    sent = None
    if len(batch) == 1 and batch[0].idempotency_key is None:
        alone = _send_alone(batch[0], encoded[0], now)
        sent = None if alone is None else [alone]
    if sent is None:
        # On SQLite, in turn with this process's other writers (a live run
        # recording its step, say), not polling SQLite's lock in the busy
        # handler.
        with db.write_turn() as end_turn, db.atomic():
            if end_turn is not None:
                db.on_commit(end_turn)  # the first hook: the others out of turn
            sent = [
                _deliver(m, data, now) for m, data in zip(batch, encoded, strict=True)
            ]
    for message in batch:
        logger.debug(
            "workflow message sent workflow=%s name=%s",
            message.workflow_id,
            message.name,
        )
    return sent


def inbox(workflow_id: str) -> list[Message]:
    """Return the messages in the workflow's inbox, oldest first (not yet received)."""
    if not Workflow.objects.filter(pk=workflow_id).exists():
        raise _not_found(workflow_id)
    rows = WorkflowMessage.objects.filter(workflow_id=workflow_id).order_by("id")
    return [
        Message(str(pk), name, schema.loads(bytes(body)), clock.to_timestamp(at))
        for pk, name, body, at in rows.values_list("id", "name", "body", "created_at")
    ]
