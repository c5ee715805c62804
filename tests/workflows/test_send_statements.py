"""A send's two hand-written statements behave as the ORM's five did.

``handle.send`` / ``send_many`` write through ``Dialect.send_sql`` (the
row's ``UPDATE ... RETURNING`` with the wake, then the insert guarded by
the inbox's count): every refusal keeps its error and code and leaves the
row and the inbox as they were, the wake signal and the wake land as
before, and a run waiting live in this process hears of a message once
its transaction commits, not before.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.db import transaction

from django_rivet import clock, workflows
from django_rivet.exceptions import (
    WorkflowFinished,
    WorkflowInboxFull,
    WorkflowNotFound,
)
from django_rivet.models import Workflow, WorkflowMessage, db
from django_rivet.testing import freeze_time, register_temporarily, run_until_idle
from django_rivet.workflows import Send, live, sends, workflow
from tests.support.clock import START

# pg: the row lock and jsonb containment of PostgreSQL's statements.
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


@workflow(name="waitsFor")
async def waits_for(ctx, name):
    """Waits for one message named ``name`` (``None``: any), then ends."""
    names = None if name is None else [name]
    message = await ctx.messages.next("m", names=names)
    return message.body


@pytest.fixture(autouse=True)
def registered():
    with register_temporarily(waits_for), freeze_time(START) as frozen:
        yield frozen


def row(workflow_id):
    return Workflow.objects.get(pk=workflow_id)


def sleeping(name, workflow_id="wf"):
    """Start ``waitsFor`` and run it until it waits for its message."""
    handle = workflows.start("waitsFor", name, id=workflow_id)
    run_until_idle(handle)
    found = row(workflow_id)
    assert found.status == "sleeping" and found.wake_at is None
    return handle


def test_a_message_to_a_workflow_that_waits_for_its_name_wakes_it(registered):
    handle = sleeping("go")
    before = row("wf").wake_signal
    registered.advance(5)
    message_id = handle.send("go", {"n": 1})
    found = row("wf")
    assert found.wake_at == clock.now_datetime()
    assert found.wake_signal == before + 1
    assert found.status == "sleeping"
    assert [(m.id, m.name, m.body) for m in handle.messages()] == [
        (message_id, "go", {"n": 1})
    ]
    run_until_idle(handle)
    assert handle.result() == {"n": 1}
    assert not WorkflowMessage.objects.exists()


def test_a_wait_for_any_name_is_woken_by_every_name(registered):
    handle = sleeping(None)
    registered.advance(5)
    handle.send("whatever", 7)
    assert row("wf").wake_at == clock.now_datetime()
    run_until_idle(handle)
    assert handle.result() == 7


def test_a_message_it_does_not_wait_for_is_kept_without_a_wake(registered):
    handle = sleeping("go")
    before = row("wf").wake_signal
    handle.send("other", 1)
    found = row("wf")
    # The signal moves (a run releasing now runs again), the wake does not.
    assert found.wake_at is None and found.wake_signal == before + 1
    assert [m.name for m in handle.messages()] == ["other"]


def test_a_keyed_send_wakes_once_and_sends_once(registered):
    handle = sleeping("go")
    first = handle.send("go", 1, idempotency_key="k")
    assert row("wf").wake_at == clock.now_datetime()
    assert handle.send("go", 2, idempotency_key="k") == first
    assert [m.body for m in handle.messages()] == [1]


def test_an_unknown_workflow_is_not_found_and_nothing_is_stored():
    with pytest.raises(WorkflowNotFound) as caught:
        sends.send("nobody", "go")
    assert caught.value.qualified_code == "workflow/not_found"
    assert not WorkflowMessage.objects.exists()


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_an_ended_workflow_refuses_and_its_row_is_unchanged(status):
    handle = sleeping("go")
    Workflow.objects.filter(pk="wf").update(status=status)
    before = row("wf")
    with pytest.raises(WorkflowFinished) as caught:
        handle.send("go", 1)
    assert caught.value.qualified_code == "workflow/finished"
    assert caught.value.metadata == {"status": status}
    after = row("wf")
    assert (after.wake_signal, after.wake_at) == (before.wake_signal, before.wake_at)
    assert not WorkflowMessage.objects.exists()


def test_a_full_inbox_refuses_at_its_limit_and_rolls_the_wake_back(monkeypatch):
    monkeypatch.setattr(sends, "MAX_INBOX_MESSAGES", 2)
    handle = sleeping("go")
    handle.send("other", 1)
    handle.send("other", 2)  # the limit: two unreceived messages
    before = row("wf")
    with pytest.raises(WorkflowInboxFull) as caught:
        handle.send("go", 3)  # one it waits for: no wake either
    assert caught.value.qualified_code == "workflow/inbox_full"
    assert caught.value.metadata == {"limit": 2}
    after = row("wf")
    assert (after.wake_signal, after.wake_at) == (before.wake_signal, None)
    assert [m.body for m in handle.messages()] == [1, 2]


def test_a_batch_counts_its_own_messages_against_the_limit(monkeypatch):
    monkeypatch.setattr(sends, "MAX_INBOX_MESSAGES", 2)
    sleeping("go")
    with pytest.raises(WorkflowInboxFull):
        workflows.send_many([Send("wf", "go", n) for n in range(3)])
    assert not WorkflowMessage.objects.exists()
    assert len(workflows.send_many([Send("wf", "go", n) for n in range(2)])) == 2


def test_a_refused_send_in_a_transaction_leaves_the_transaction_usable():
    handle = sleeping("go")
    with transaction.atomic(using=db.alias()):
        handle.send("other", 1)
        with pytest.raises(WorkflowNotFound):
            sends.send("nobody", "go")
        handle.send("go", 2)
    assert [m.body for m in handle.messages()] == [1, 2]
    assert row("wf").wake_at is not None


def test_a_live_listener_hears_of_a_message_once_the_send_commits():
    sleeping("go")
    loop = asyncio.new_event_loop()
    heard = threading.Event()
    listening = threading.Event()

    async def listen():
        task = asyncio.ensure_future(live.listen("wf", ["go"]))
        await asyncio.sleep(0)
        listening.set()
        await task
        heard.set()

    thread = threading.Thread(target=lambda: loop.run_until_complete(listen()))
    thread.start()
    try:
        assert listening.wait(10)
        with transaction.atomic(using=db.alias()):
            sends.send("wf", "go", 1)
            assert not heard.wait(0.05)  # not before the commit
        assert heard.wait(10)
    finally:
        live.signal("wf")
        thread.join(10)
        loop.close()


@workflow(name="receivesInOrder")
async def receives_in_order(ctx, names):
    """Takes three messages of ``names``; returns what each one carried."""
    got = []
    for index in range(3):
        message = await ctx.messages.next(f"m{index}", names=names)
        got.append([message.id, message.name, message.body, message.created_at])
    return got


@pytest.mark.parametrize("names", [None, ["a", "c"]])
def test_a_run_receives_oldest_first_with_what_the_send_stored(registered, names):
    with register_temporarily(receives_in_order):
        handle = workflows.start("receivesInOrder", names, id="wf")
        sent = []
        for at, (name, body) in enumerate(
            [("a", 1), ("b", b"2"), ("c", [3]), ("a", 4)]
        ):
            registered.advance(1)
            sent.append(
                [handle.send(name, body), name, body, START.timestamp() + at + 1]
            )
        run_until_idle(handle)
        wanted = [s for s in sent if names is None or s[1] in names][:3]
        assert handle.result() == wanted
        left = [m.body for m in handle.messages()]
        assert left == ([4] if names is None else [b"2"])


@pytest.mark.parametrize("in_transaction", [False, True])
def test_senders_that_wait_for_each_other_count_each_others_messages(
    monkeypatch, in_transaction
):
    """PostgreSQL: a send that waited for the row's lock counts again.

    Its one statement counted the inbox as it stood when it began; another
    send committed meanwhile, so it counts again before inserting (the
    inbox never holds more than the limit). Alone (autocommit) it writes
    nothing and sends in a transaction; in one, it inserts on its own.
    """
    if db.connection().vendor != "postgresql":
        pytest.skip("row locks: SQLite's senders never overlap")
    monkeypatch.setattr(sends, "MAX_INBOX_MESSAGES", 2)
    handle = sleeping("go")
    handle.send("other", 1)
    holding, waiting, outcome = threading.Event(), threading.Event(), []

    def first_sender():
        try:
            with transaction.atomic(using=db.alias()):
                sends.send("wf", "other", 2)  # the second: the inbox is full
                holding.set()
                assert waiting.wait(10)
        finally:
            db.connection().close()

    def second_sender():
        try:
            if in_transaction:
                with transaction.atomic(using=db.alias()):
                    sends.send("wf", "go", 3)
            else:
                sends.send("wf", "go", 3)
        except WorkflowInboxFull as error:
            outcome.append(error)
        finally:
            db.connection().close()

    first = threading.Thread(target=first_sender)
    first.start()
    assert holding.wait(10)
    second = threading.Thread(target=second_sender)
    second.start()
    try:
        with db.connection().cursor() as cursor:  # the second waits for the lock
            for _ in range(1000):
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                if cursor.fetchone()[0]:
                    break
                threading.Event().wait(0.01)
    finally:
        waiting.set()
        first.join(10)
        second.join(10)
    assert [type(error) for error in outcome] == [WorkflowInboxFull]
    assert [m.body for m in handle.messages()] == [1, 2]


def test_a_lone_send_that_is_refused_changes_nothing(monkeypatch):
    """Refused alone (PostgreSQL's one autocommitted statement) or not: no trace."""
    monkeypatch.setattr(sends, "MAX_INBOX_MESSAGES", 1)
    handle = sleeping("go")
    handle.send("other", 1)
    before = row("wf")
    with pytest.raises(WorkflowInboxFull):
        handle.send("go", 2)
    Workflow.objects.filter(pk="wf").update(status="completed")
    with pytest.raises(WorkflowFinished):
        handle.send("go", 3)
    after = row("wf")
    assert (after.wake_signal, after.wake_at) == (before.wake_signal, None)
    assert [m.body for m in handle.messages()] == [1]
