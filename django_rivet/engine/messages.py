"""``ctx.messages``: receive messages sent to the workflow, durably.

A receive is one ``message`` entry recording what was received (or that the
wait timed out), so a replay returns the same messages and never takes them
from the inbox again. Messages are taken as *completable*: recorded, then
completed (removed from the inbox) by the flush that writes the record -- the
run's next one, usually the next step's -- in its transaction when the driver
offers ``batch_completing``, else right after it. A crash before that flush
leaves them in the inbox unrecorded (the replay receives them again, and
re-runs what came after, as after a crash before the receive); a crash
between the record and a late removal leaves them in the inbox recorded, and
the recorded ids keep them from being received a second time.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django_rivet import clock

from . import live, schema
from .errors import MessageTimeoutError, MessageWaitError, StorageLimitError
from .execution import RollbackStop, complete
from .scope import Scope
from .storage import driver_call
from .values import Message

__all__ = ["ANY_MESSAGE", "Messages"]

# What ``waiting_for`` reports for a receive that accepts any message name.
ANY_MESSAGE = "*"


class Messages:
    """The ``ctx.messages`` namespace."""

    def __init__(self, scope: Scope) -> None:
        self._scope = scope

    def next(
        self,
        name: str,
        *,
        names: Iterable[str] | None = None,
        timeout: float | timedelta | None = None,
    ) -> Any:
        """Return the next message; raise :class:`MessageTimeoutError` on timeout."""
        wanted = None if names is None else list(names)
        timeout = _seconds(timeout)

        async def receive_one() -> Message:
            found = await _receive(self._scope, name, wanted, 1, timeout)
            if not found:
                raise MessageTimeoutError(
                    f'No message arrived for "{name}" within {timeout:g} seconds'
                )
            return found[0]

        return self._scope.enter(receive_one)

    def next_batch(
        self,
        name: str,
        *,
        names: Iterable[str] | None = None,
        count: int = 1,
        timeout: float | timedelta | None = None,
    ) -> Any:
        """Return up to ``count`` messages; ``[]`` when the timeout passes first."""
        wanted = None if names is None else list(names)
        timeout = _seconds(timeout)
        return self._scope.enter(
            lambda: _receive(self._scope, name, wanted, max(1, count), timeout)
        )


def _seconds(timeout: float | timedelta | None) -> float | None:
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return None if timeout is None else float(timeout)


def _to_message(record: dict[str, Any]) -> Message:
    return Message(
        id=str(record["id"]),
        name=str(record["name"]),
        body=record.get("body"),
        created_at=float(record.get("created_at") or 0.0),
    )


async def _take(scope: Scope, names: list[str] | None, count: int) -> list[Message]:
    """Receive up to ``count`` messages that history has not recorded yet."""
    run = scope.run
    driver = run.driver
    if run.storage.completing:
        # Received messages whose record is not written yet are still in
        # the inbox: the record first, which removes them.
        await run.storage.flush()
    fresh: list[Message] = []
    while True:
        batch = await driver_call(
            driver.receive_messages(names, count - len(fresh), True),
            "receive messages",
        )
        stale = [m for m in batch if m.id in run.consumed_messages]
        fresh += [m for m in batch if m.id not in run.consumed_messages]
        for message in stale:
            # Recorded by an earlier run that crashed before completing it.
            await _complete(scope, message.id)
        if not stale or len(fresh) >= count:
            return fresh


async def _complete(scope: Scope, message_id: str) -> None:
    await driver_call(
        scope.run.driver.complete_message(message_id, None), "complete message"
    )


def _record(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "name": message.name,
        "body": schema.roundtrip(message.body, f'Message "{message.name}"'),
        "created_at": float(message.created_at),
    }


async def _receive(
    scope: Scope,
    name: str,
    names: list[str] | None,
    count: int,
    timeout: float | None,
) -> list[Message]:
    run = scope.run
    storage = run.storage
    location = scope.visit(name)
    entry = scope.existing(location, "message")
    if entry is not None:
        state = entry.data["state"]
        if state == "received":
            recorded = [_to_message(m) for m in entry.data["messages"]]
            if not run.rollback:
                for message in recorded:
                    await _complete(scope, message.id)
            return recorded
        if state == "timed_out":
            return []
        if run.rollback:
            raise RollbackStop()
        deadline = entry.data["deadline"]
    else:
        if run.rollback:
            raise RollbackStop()
        deadline = None if timeout is None else clock.now() + float(timeout)
        data = {
            "names": names,
            "count": count,
            "deadline": deadline,
            "state": "pending",
            "messages": [],
        }
        entry = storage.create_entry(location, "message", data)
    if run.live_for():
        # The live window: wait here for a message, history in memory; past
        # the window (or the deadline) this goes on as without it.
        received = await live.wait_for(
            run, names, deadline, lambda: _take(scope, names, count)
        )
    else:
        received = await _take(scope, names, count)
    if received:
        records = [_record(m) for m in received]
        what = f'Messages received by "{name}"'
        while True:
            try:
                complete(storage, entry, what, state="received", messages=records)
                break
            except StorageLimitError:
                if len(records) == 1:
                    raise
                # A batch too large for one record: take fewer now; the rest
                # stay in the inbox (they were never completed) for later.
                records = records[:-1]
        # The record rides with the run's next flush (the next step's, the
        # next wait's, the pause's), which removes the messages from the
        # inbox in its transaction: a crash before it leaves them there, and
        # the replay receives them again, as a crash before this receive.
        storage.complete_messages(record["id"] for record in records)
        run.consumed_messages.update(record["id"] for record in records)
        return [_to_message(record) for record in records]
    if deadline is not None and clock.now() >= deadline:
        complete(storage, entry, state="timed_out")
        await storage.flush()
        return []
    raise MessageWaitError(deadline, names if names is not None else [ANY_MESSAGE])
