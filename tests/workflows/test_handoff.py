"""Messages handed to a live run in process (``workflows.handoff``).

A message sent in this process to a run waiting in its live window is
handed over with its send's commit, and the run takes it without reading
its inbox, when it can tell the read would return exactly that message:
its last read saw the whole inbox at the row's wake signal, and every
send since was handed to it (the signals follow each other). Anything
else makes it read: the order of the inbox is never changed.

``InboxKnowledge`` alone first (no database), then live runs on the
database (PostgreSQL: its lone send returns what a hand-off needs).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection
from django.db.models import F

from django_rivet import workflows
from django_rivet.models import Workflow, WorkflowMessage
from django_rivet.workflows import handoff
from django_rivet.workflows.handoff import Handed, InboxKnowledge, Mailbox

from .test_live_window import Worker, blocked, chat, clock, listening, seen, until

__all__ = ["chat", "clock"]  # (fixtures: liveChat registered, the frozen clock)


def handed(signal: int, pk: int, name: str = "add") -> Handed:
    return Handed(signal, pk, name, b"\x01", 1.0, "token", False)


def knowing(signal: int | None = 10, complete: bool = True) -> InboxKnowledge:
    found = InboxKnowledge(Mailbox())
    found.learn(signal, complete)
    return found


# -- InboxKnowledge ------------------------------------------------------------------


def test_handed_messages_following_the_read_are_taken_oldest_first():
    inbox = knowing(10)
    inbox.mailbox.put(handed(12, 102))  # (handed out of order: two senders)
    inbox.mailbox.put(handed(11, 101))
    assert [m.pk for m in inbox.take(["add"], 1)] == [101]
    assert [m.pk for m in inbox.take(None, 5)] == [102]
    assert inbox.take(None, 5) == []  # nothing known: a read answers


def test_only_messages_of_the_names_waited_for_are_taken():
    inbox = knowing(10)
    inbox.mailbox.put(handed(11, 101, "other"))
    inbox.mailbox.put(handed(12, 102, "add"))
    assert [m.pk for m in inbox.take(["add"], 5)] == [102]
    assert [m.pk for m in inbox.take(["other"], 5)] == [101]


def test_a_gap_in_the_signals_makes_the_run_read():
    inbox = knowing(10)
    inbox.mailbox.put(handed(12, 102))  # 11: a send not handed here
    assert inbox.take(None, 5) == []
    # The read saw up to 12 (11 and 12 among what it returned): nothing
    # handed so far is news; what follows chains on.
    inbox.learn(12, complete=True)
    inbox.mailbox.put(handed(13, 103))
    assert [m.pk for m in inbox.take(None, 5)] == [103]


def test_a_read_that_did_not_see_the_whole_inbox_teaches_nothing():
    inbox = knowing(10, complete=False)
    inbox.mailbox.put(handed(11, 101))
    assert inbox.take(None, 5) == []
    inbox.learn(None, complete=True)  # (a read that could not tell the signal)
    assert inbox.take(None, 5) == []


def test_a_full_mailbox_drops_its_messages_and_the_run_reads():
    inbox = knowing(10)
    for index in range(Mailbox.LIMIT + 1):
        inbox.mailbox.put(handed(11 + index, 101 + index))
    assert inbox.take(None, 5) == []


def test_a_mailbox_gets_messages_while_open_only():
    mailbox = handoff.open_mailbox("wf")
    handoff.hand("wf", handed(1, 1))
    handoff.hand("other", handed(1, 2))
    handoff.close("wf", mailbox)
    handoff.hand("wf", handed(2, 3))
    assert [m.pk for m in mailbox.drain()[0]] == [1]
    assert "wf" not in handoff._boxes


def test_a_run_waits_for_a_send_under_way_here_rather_than_read():
    mailbox = handoff.open_mailbox("wf")
    sends = handoff.sending("wf")
    sends.__enter__()  # a send to the workflow is under way here

    def commit() -> None:
        time.sleep(0.01)  # its round trip, then its thread's turn
        handoff.hand("wf", handed(1, 1))
        sends.__exit__(None, None, None)

    sender = threading.Thread(target=commit)
    try:
        sender.start()
        started = time.monotonic()
        items, _ = mailbox.drain(settle=5.0)
        sender.join()
    finally:
        handoff.close("wf", mailbox)
    assert [m.pk for m in items] == [1]
    assert time.monotonic() - started < 5.0  # the send's end woke it


def test_nothing_under_way_nothing_waited_for():
    mailbox = Mailbox()
    started = time.monotonic()
    assert mailbox.drain(settle=5.0) == ([], False)
    assert time.monotonic() - started < 1.0


# -- live runs on the database ---------------------------------------------------------


class ReadCountingWorker(Worker):
    """A worker whose run counts its reads of the inbox."""

    def __init__(self, workflow_id: str) -> None:
        self.reads = 0
        super().__init__(workflow_id)

    def _run(self) -> None:
        def note(execute: Any, sql: str, params: Any, many: bool, context: Any):
            if sql.lstrip().upper().startswith("SELECT") and "workflowmessage" in sql:
                self.reads += 1
            return execute(sql, params, many, context)

        with connection.execute_wrapper(note):
            super()._run()


def handing() -> bool:
    return connection.vendor == "postgresql"


@pytest.mark.usefixtures("clock")
@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_message_sent_here_is_taken_without_a_read():
    handle = workflows.start("liveChat", {"messages": 3}, id="handed")
    worker = ReadCountingWorker("handed")
    reads_a_wait = 1 if handing() else 2
    sent = []
    for index, value in enumerate((1, 2, 3)):
        # Sent once the wait looked in the inbox (and found nothing).
        before = reads_a_wait * index
        until(lambda r=before: worker.reads > r, f"wait {index} read the inbox")
        sent.append(handle.send("add", value))
        until(lambda i=index: len(seen) > i, f"message {index} was received")
    assert worker.join() == "completed"
    assert handle.result() == 6
    # A handed message needs no read after the wake; without the hand-off
    # the wake reads again: two reads a wait.
    assert worker.reads == 3 * reads_a_wait
    received = [entry.output for entry in handle.history() if entry.kind == "message"]
    assert [[m["id"] for m in batch] for batch in received] == [[i] for i in sent]
    # As a read returns it: the send's time, to the microsecond.
    assert {m["created_at"] for batch in received for m in batch} == {1_700_000_000.0}
    assert not WorkflowMessage.objects.filter(workflow_id="handed").exists()
    assert "handed" not in handoff._boxes  # closed with the run


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_message_not_handed_over_keeps_its_place_in_the_inbox(clock):
    handle = workflows.start("liveChat", {"messages": 2}, id="ordered")
    worker = Worker("ordered")
    listening("ordered")
    blocked(clock)  # it read the inbox (empty) and waits
    # Another process's send: the row's signal moves, the message lands,
    # and nothing is handed here.
    Workflow.objects.filter(pk="ordered").update(wake_signal=F("wake_signal") + 1)
    WorkflowMessage.objects.create(workflow_id="ordered", name="add", body=b"\x01")
    handle.send("add", 2)  # handed here (PostgreSQL), and wakes the run
    assert worker.join() == "completed"
    assert seen == [1, 2]  # the older first: the gap made the run read
