"""The workflow driver's inbox: ``WorkflowMessage`` rows of one workflow.

Split from :class:`~.driver.DjangoDriver` (which inherits these methods) so
the driver's module holds its KV storage and fencing, this one the inbox.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.db.models import F

from .. import clock
from ..engine import Message, encode_message_body, schema
from ..models import Workflow, WorkflowMessage, db, sql
from . import handoff, live
from .fencing import LeaseFence

__all__ = ["InboxMethods"]


class InboxMethods:
    """The engine's message methods, for a driver of one workflow.

    The driver provides ``workflow_id``, ``_db`` (where database work runs)
    and ``renew_lease``. ``_inbox`` holds the inbox's message ids as this
    driver knows them: read once at the first completion, then every message
    received is added; a completion of an id not in it is a no-op (see
    :meth:`complete_message`).
    """

    workflow_id: str
    _inbox: set[int] | None
    # What the run knows of its inbox and the messages handed to it
    # (:mod:`.handoff`): from its first live wait, on databases that can tell.
    _handoff: handoff.InboxKnowledge | None = None
    _db: Callable[..., Any]
    private_loop: bool
    renew_lease: Callable[[], None]
    _fence: LeaseFence
    _reads_cancel: Callable[[], bool]

    async def add_message(self, name: str, data: Any) -> str:
        """Append a message to the inbox and return its id."""
        body = encode_message_body(data)

        def add() -> str:
            with db.atomic():
                # Every message moves the row's wake signal (see .handoff).
                Workflow.objects.filter(pk=self.workflow_id).update(
                    wake_signal=F("wake_signal") + 1
                )
                row = WorkflowMessage.objects.create(
                    workflow_id=self.workflow_id, name=name, body=body
                )
                live.signal_on_commit(self.workflow_id, name)
            return str(row.pk)

        return await self._db(add)  # type: ignore[no-any-return]

    async def receive_messages(
        self, names: builtins.list[str] | None, count: int, completable: bool
    ) -> builtins.list[Message]:
        """Return up to ``count`` of the oldest matching messages.

        Non-completable messages are removed in the same transaction. A
        live run takes messages handed to it in process without a read,
        when it can tell a read would return them (:mod:`.handoff`).
        """
        knowing = self._handoff
        if knowing is not None and completable:
            # (Waiting on a send under way blocks the loop: a private one only.)
            handed = knowing.take(names, count, settle=self.private_loop)
            if handed:
                return self._take_handed(handed)

        def receive() -> builtins.list[Message]:
            if completable:
                found = self._oldest(names, count)  # one read: no transaction
            else:
                with db.atomic():
                    self.renew_lease()
                    found = self._oldest(names, count)
                    if found:
                        WorkflowMessage.objects.filter(
                            pk__in=[row[0] for row in found]
                        ).delete()
            if completable and self._inbox is not None:
                self._inbox.update(row[0] for row in found)
            return [
                Message(
                    str(pk), name, schema.loads(bytes(body)), clock.to_timestamp(at)
                )
                for pk, name, body, at in found
            ]

        return await self._db(receive)  # type: ignore[no-any-return]

    def _oldest(
        self, names: builtins.list[str] | None, count: int
    ) -> builtins.list[tuple[int, str, Any, datetime]]:
        """Read up to ``count`` of the oldest messages named ``names`` (None: any).

        One hand-written statement: the ORM's queryset cost more to build
        than the read (a live run reads at every wake). When it finds a
        message it also tells whether the run holds the lease with no cancel
        pending: the step that handles the message takes that for its cancel
        check (``check_cancel``), one round trip less per wake.
        """
        if count <= 0:
            return []
        connection = db.connection()
        if self._handoff is not None:
            return self._oldest_knowing(connection, names, count, self._handoff)
        checked = self._reads_cancel()
        sql_text = sql.dialect(connection).inbox_read_sql(
            None if names is None else len(names), checked
        )
        params = [self.workflow_id, *(names or ()), count]
        if checked:
            params[:0] = [self.workflow_id, self._fence.token]
        with connection.cursor() as cursor:
            cursor.execute(sql_text, params)
            rows = cursor.fetchall()
        if checked and rows and rows[0][4]:
            self._fence.note_checked()
        return [(row[0], row[1], row[2], _created(connection, row[3])) for row in rows]

    def _oldest_knowing(
        self,
        connection: Any,
        names: builtins.list[str] | None,
        count: int,
        knowing: handoff.InboxKnowledge,
    ) -> builtins.list[tuple[int, str, Any, datetime]]:
        """:meth:`_oldest`, learning the row's signal and whether it saw all."""
        statement = sql.dialect(connection).inbox_read_knowing_sql(
            None if names is None else len(names)
        )
        params = [self._fence.token, count + 1, *(names or ()), count, self.workflow_id]
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            rows = cursor.fetchall()
        found = [row for row in rows if row[0] is not None]
        if not rows:  # (the workflow is gone)
            knowing.forget()
            return []
        held, signal, counted = rows[0][4:7]
        knowing.learn(signal, complete=counted == len(found))
        if held and found and self._reads_cancel():  # (as _oldest: see there)
            self._fence.note_checked()
        return [(row[0], row[1], row[2], _created(connection, row[3])) for row in found]

    def _take_handed(
        self, handed: builtins.list[handoff.Handed]
    ) -> builtins.list[Message]:
        """Receive messages handed over in process, as if a read returned them."""
        self._fence.checked_at = None
        newest = max(handed, key=lambda h: h.signal)
        if (
            newest.lease_token == self._fence.token
            and not newest.cancel_requested
            and self._reads_cancel()
        ):
            # The send saw the lease held and no cancel pending, as the read
            # would have: the step after takes it for its cancel check.
            self._fence.note_checked(newest.at)
        if self._inbox is not None:
            self._inbox.update(h.pk for h in handed)
        return [h.message() for h in handed]

    def open_handoff(self) -> None:
        """Take messages handed over in process (from a live run's first wait)."""
        if self._handoff is not None or self._fence.token is None:
            return
        if sql.dialect(db.connection()).hands_messages:
            mailbox = handoff.open_mailbox(self.workflow_id)
            self._handoff = handoff.InboxKnowledge(mailbox)

    def close_handoff(self) -> None:
        """Stop taking handed messages (the run ends)."""
        if self._handoff is not None:
            handoff.close(self.workflow_id, self._handoff.mailbox)
            self._handoff = None

    def _received_pks(self, ids: Iterable[str]) -> builtins.list[int]:
        """Return the ids of received messages that may still be in the inbox."""
        pks = [pk for pk in map(_pk, ids) if pk is not None]
        if self._inbox is not None:
            pks = [pk for pk in pks if pk in self._inbox]
        return pks

    def _remove_received(self, pks: builtins.list[int]) -> None:
        """Delete received messages of this inbox (in the caller's transaction)."""
        if not pks:
            return
        # One plain DELETE: the ORM's delete() costs as much again in Python.
        connection = db.connection()
        quote = connection.ops.quote_name
        meta = WorkflowMessage._meta
        column = meta.get_field("workflow").column
        marks = ", ".join(["%s"] * len(pks))
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {quote(meta.db_table)} "
                f"WHERE {quote(str(column))} = %s AND {quote('id')} IN ({marks})",
                [self.workflow_id, *pks],
            )
        self._removed(pks)

    def _removed(self, pks: Iterable[int]) -> None:
        """Forget messages deleted from the inbox (once their delete ran)."""
        if self._inbox is not None:
            self._inbox.difference_update(pks)

    async def complete_message(self, id: str, response: Any = None) -> None:
        """Remove a received message (unknown ids are a no-op).

        The engine recorded the message in history first, so removing it
        needs no fence: a late duplicate removal changes nothing.

        A replay completes every message its history received again (one
        recorded just before a crash may still be in the inbox), so the
        first completion reads the inbox's ids, once: an id that was not
        there and has not been received since is gone for good (the engine
        completes only messages it received, after the run that received
        them committed them), and its completion costs nothing. Without
        this, each wake-up of a workflow paid one transaction for every
        message it ever received.
        """
        pk = _pk(id)
        if pk is None:
            return
        if self._inbox is not None and pk not in self._inbox:
            return

        def complete() -> None:
            rows = WorkflowMessage.objects.filter(workflow_id=self.workflow_id)
            if self._inbox is None:
                self._inbox = set(rows.values_list("pk", flat=True))
            if pk in self._inbox:
                rows.filter(pk=pk).delete()
                self._inbox.discard(pk)

        await self._db(complete)

    async def wait_for_messages(self, names: Iterable[str] | None) -> None:
        """Return when a message (or a child's end) may have come (live window).

        Signalled in process only (``workflows.live``): the engine polls the inbox
        every ``worker_poll_interval`` seconds for what other processes sent.
        """
        self.open_handoff()  # (before the look that follows: see .handoff)
        await live.listen(self.workflow_id, names)


def _created(connection: Any, value: Any) -> datetime:
    """Return a ``created_at`` read by hand as the ORM would (a datetime)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value  # PostgreSQL's driver made it already
    # SQLite's text, as its backend's converter reads it.
    return connection.ops.convert_datetimefield_value(  # type: ignore[no-any-return]
        value, None, connection
    )


def _pk(message_id: str) -> int | None:
    """Return a message id as the inbox's primary key (None: not one of ours)."""
    try:
        return int(message_id)
    except (TypeError, ValueError):
        return None
