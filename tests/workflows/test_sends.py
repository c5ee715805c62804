"""Messages with idempotency keys, and many in one transaction (issue 44).

The tests named after DBOS Transact's (tests/test_dbos.py) are translations
of them; DBOS's ``recv(topic)`` is ``ctx.messages.next(..., names=[topic])``
here and ``send_bulk([SendMessage(...)])`` is ``send_many([Send(...)])``.
"""

from __future__ import annotations

import pytest

from django_rivet import WorkflowInboxFull, WorkflowNotFound, workflows
from django_rivet.models import WorkflowMessage, WorkflowMessageKey
from django_rivet.testing import freeze_time, register_temporarily, run_until_idle
from django_rivet.workflows import MessageTimeoutError, Send, sends, workflow
from tests.support.clock import START

# pg: the PostgreSQL leg runs this module (the keys' unique constraint, the
# row lock that orders senders).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]


@workflow(name="receivesTwo")
async def receives_two(ctx, input):
    """Takes two messages (of ``names``), each waited for up to 60 s."""
    names = input.get("names")
    got = []
    for index in range(input.get("count", 2)):
        try:
            message = await ctx.messages.next(f"m{index}", names=names, timeout=60)
        except MessageTimeoutError:
            got.append(None)
        else:
            got.append(message.body)
    return got


@pytest.fixture(autouse=True)
def registered():
    with register_temporarily(receives_two), freeze_time(START) as clock:
        yield clock


def finish(handle, clock):
    """Run it, let its waits time out, and return its result."""
    run_until_idle(handle)
    for _ in range(3):
        clock.advance(61)
        run_until_idle(handle)
    return handle.result()


def test_send_idempotency_key(registered):
    """DBOS test_send_idempotency_key: one message per key, received or not."""
    handle = workflows.start("receivesTwo", {}, id="dest")
    first = handle.send("m", "hello", idempotency_key="k1")
    run_until_idle(handle)  # received: the inbox is empty again
    assert handle.messages() == []
    # The same key again, after it was received: nothing is sent.
    assert handle.send("m", "hello_duplicate", idempotency_key="k1") == first
    assert finish(handle, registered) == ["hello", None]
    # Different keys deliver separate messages.
    other = workflows.start("receivesTwo", {"names": ["t"]}, id="dest2")
    other.send("t", "a", idempotency_key="ka")
    other.send("t", "b", idempotency_key="kb")
    assert finish(other, registered) == ["a", "b"]


def test_a_send_with_a_key_in_a_step_is_sent_once_when_the_step_runs_again(
    registered,
):
    """DBOS test_send_idempotency_key (from a step): a retried step's send."""
    target = workflows.start("receivesTwo", {}, id="target")
    attempts = []

    @workflow(name="sendsInAStep")
    async def sends_in_a_step(ctx, input):
        def send():
            attempts.append(1)
            workflows.get("target").send("m", "hello_step", idempotency_key="s1")
            if len(attempts) == 1:
                raise RuntimeError("the step fails after its send")

        await ctx.step("send", send, retry_backoff_base=0)

    with register_temporarily(sends_in_a_step):
        sender = workflows.start("sendsInAStep", {})
        run_until_idle(sender)
        registered.advance(1)
        assert run_until_idle(sender) == "completed"
    assert len(attempts) == 2
    assert finish(target, registered) == ["hello_step", None]


def test_send_bulk(registered):
    """DBOS test_send_bulk: one workflow, several, and an unknown one."""
    one = workflows.start("receivesTwo", {"count": 3}, id="one")
    ids = workflows.send_many(
        [Send("one", "t", "a"), Send("one", "t", "b"), Send("one", "u", "c")]
    )
    assert len(set(ids)) == 3
    assert finish(one, registered) == ["a", "b", "c"]
    a = workflows.start("receivesTwo", {"count": 1}, id="dest-a")
    b = workflows.start("receivesTwo", {"count": 1}, id="dest-b")
    workflows.send_many([Send("dest-a", "m", "to_a"), Send("dest-b", "m", "to_b")])
    assert finish(a, registered) == ["to_a"] and finish(b, registered) == ["to_b"]
    real = workflows.start("receivesTwo", {"count": 1}, id="real")
    with pytest.raises(WorkflowNotFound):
        workflows.send_many(
            [Send("real", "m", "should_not_arrive"), Send("fake", "m", "to_nowhere")]
        )
    assert finish(real, registered) == [None]  # nothing was delivered


def test_send_bulk_from_workflow(registered):
    """DBOS test_send_bulk_from_workflow: in a step, a replay sends nothing again."""
    target = workflows.start("receivesTwo", {}, id="bulk-target")
    runs = []

    @workflow(name="bulkSender")
    async def bulk_sender(ctx, input):
        def send():
            runs.append(1)
            return workflows.send_many(
                [Send("bulk-target", "m", "one"), Send("bulk-target", "m", "two")]
            )

        await ctx.step("send", send)
        await ctx.sleep("then", 10)

    with register_temporarily(bulk_sender):
        sender = workflows.start("bulkSender", {})
        run_until_idle(sender)
        registered.advance(10)
        assert run_until_idle(sender) == "completed"  # replayed the step
    assert runs == [1]
    assert finish(target, registered) == ["one", "two"]


def test_send_bulk_idempotency_key(registered):
    """DBOS test_send_bulk_idempotency_key."""
    handle = workflows.start("receivesTwo", {}, id="bulk-key")
    workflows.send_many([Send("bulk-key", "m", "hello", idempotency_key="k")])
    run_until_idle(handle)
    workflows.send_many([Send("bulk-key", "m", "duplicate", idempotency_key="k")])
    assert finish(handle, registered) == ["hello", None]


def test_send_bulk_duplicate_key_within_batch(registered):
    """DBOS test_send_bulk_duplicate_key_within_batch: refused, nothing sent."""
    handle = workflows.start("receivesTwo", {"count": 1}, id="dup")
    with pytest.raises(ValueError, match="idempotency key 'k'"):
        workflows.send_many(
            [
                Send("dup", "m", "first", idempotency_key="k"),
                Send("dup", "m", "second", idempotency_key="k"),
            ]
        )
    assert finish(handle, registered) == [None]
    # One key for two different workflows is two keys.
    workflows.start("receivesTwo", {}, id="x")
    workflows.start("receivesTwo", {}, id="y")
    workflows.send_many([Send("x", "m", 1, "k"), Send("y", "m", 2, "k")])
    assert WorkflowMessageKey.objects.filter(key="k").count() == 2


def test_send_bulk_empty():
    """DBOS test_send_bulk_empty: nothing to do, no error."""
    assert workflows.send_many([]) == []


def test_a_batch_that_overfills_an_inbox_sends_nothing(monkeypatch):
    monkeypatch.setattr(sends, "MAX_INBOX_MESSAGES", 3)
    workflows.start("receivesTwo", {}, id="small")
    workflows.start("receivesTwo", {}, id="other")
    with pytest.raises(WorkflowInboxFull):
        workflows.send_many(
            [Send("other", "m", 0)] + [Send("small", "m", n) for n in range(4)]
        )
    assert not WorkflowMessage.objects.exists()
    with pytest.raises(ValueError, match="idempotency key"):
        workflows.get("small").send("m", 1, idempotency_key="")
