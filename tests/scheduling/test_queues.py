"""Actor queues: FIFO per actor, each message handled once, replies to senders."""

import pytest
from django.test import override_settings

from django_rivet import ActionNotFound, QueueFull, actors
from django_rivet.encoding import cbor_dumps
from django_rivet.exceptions import QueueMessageTooLarge
from django_rivet.models import QueueMessage, QueueMessageStatus
from django_rivet.scheduling import claims, queue_delivery
from django_rivet.scheduling.queues import MAX_MESSAGE_BYTES, MAX_PENDING_MESSAGES
from django_rivet.testing import freeze_time, run_due

# pg: the PostgreSQL leg runs this module (queue delivery claims and attempt
# counters).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]


def seen(handle):
    from django_rivet.models import Actor as ActorRow

    return ActorRow.objects.get(pk=handle.actor_id).decoded_state()["seen"]


def test_messages_are_handled_once_each_in_fifo_order():
    box = actors.get_or_create("mailbox", "fifo")
    for body in ["a", "b", {"c": [1, 2]}]:
        assert box.send("jobs", body) == {"status": "queued"}
    box.send("notes", "n")  # another queue of the same actor, same order
    assert seen(box) == []
    assert run_due() == 4
    assert seen(box) == ["a", "b", {"c": [1, 2]}, ["note", "n"]]
    assert run_due() == 0
    statuses = QueueMessage.objects.values_list("status", flat=True)
    assert set(statuses) == {QueueMessageStatus.DONE}


def test_a_waiting_sender_gets_the_reply_without_any_worker():
    with freeze_time() as clock:
        box = actors.get_or_create("mailbox", "wait")
        box.send("jobs", "first")  # queued ahead: handled first, in order
        reply = box.send("jobs", "second", wait=True, timeout=5)
    assert reply["status"] == "completed"
    info = reply["response"].pop("info")
    assert reply["response"] == {"echo": "second", "seen": 2}
    assert info["kind"] == "queue"
    assert info["name"] == "jobs"
    assert info["fired_at"] == clock.datetime()
    assert seen(box) == ["first", "second"]


@pytest.mark.django_db(transaction=True)  # ainvoke runs in worker threads
async def test_asend_waits_for_an_async_handler():
    box = await actors.aget_or_create("mailbox", "async")
    reply = await box.asend("notes", "hello", wait=True, timeout=5)
    assert reply == {"status": "completed", "response": "noted"}
    assert await box.asend("notes", "later") == {"status": "queued"}


def test_a_waiting_sender_times_out_while_another_deliverer_holds_the_queue():
    box = actors.get_or_create("mailbox", "busy")
    box.send("jobs", "held")
    # Another process claimed the head of the queue and is still working.
    held = queue_delivery.claim_next_message(box.actor_id)
    assert held is not None
    assert box.send("jobs", "mine", wait=True, timeout=0.2) == {"status": "timed_out"}
    assert run_due() == 0  # the head is claimed: nothing may overtake it
    assert queue_delivery.deliver_claimed_message(held) == claims.Fired.OK
    assert run_due() == 1
    assert seen(box) == ["held", "mine"]


def test_a_failing_handler_tells_the_waiting_sender_failed():
    box = actors.get_or_create("mailbox", "fail")
    # A UserError is the handler's deliberate answer: failed at once.
    assert box.send("jobs", "fail", wait=True, timeout=5) == {
        "status": "failed",
        "error": {
            "group": "user",
            "code": "bad_job",
            "message": "bad job",
            "metadata": {"job": "fail"},
        },
    }
    with override_settings(RIVET={"SCHEDULE_MAX_RETRIES": 0}):
        crashed = box.send("jobs", "crash", wait=True, timeout=5)
    assert crashed["status"] == "failed"
    # The wire form hides an internal error's detail.
    assert crashed["error"] == {
        "group": "rivet",
        "code": "internal_error",
        "message": "An internal error occurred",
        "metadata": None,
    }
    assert run_due() == 0
    assert seen(box) == []  # the handlers' writes rolled back
    crashed = QueueMessage.objects.get(body__isnull=False, error__code="internal_error")
    assert crashed.status == QueueMessageStatus.FAILED
    assert crashed.error["detail"] == "RuntimeError: secret detail"
    assert "RuntimeError: secret detail" in crashed.traceback


@override_settings(RIVET={"SCHEDULE_MAX_RETRIES": 0})
def test_a_failed_message_does_not_block_the_next():
    box = actors.get_or_create("mailbox", "after-failure")
    box.send("jobs", "fail")
    box.send("jobs", "ok")
    assert run_due() == 2
    assert seen(box) == ["ok"]


def test_an_actor_can_send_to_its_own_queue_after_its_action_commits():
    box = actors.get_or_create("mailbox", "self")
    assert box.call("send_to_self", "from inside") == {"status": "queued"}
    assert seen(box) == []
    assert run_due() == 1
    assert seen(box) == ["from inside"]


def test_sending_creates_the_actor_through_a_get_or_create_handle():
    box = actors.get_or_create("mailbox", "recreated")
    box.destroy()
    box.send("jobs", "hello")
    run_due()
    assert seen(actors.get("mailbox", "recreated")) == ["hello"]


def test_unknown_queue_is_refused():
    box = actors.get_or_create("mailbox", "unknown")
    with pytest.raises(ActionNotFound) as refused:
        box.send("nope", 1)
    assert refused.value.metadata == {"queue": "nope"}
    assert not QueueMessage.objects.exists()


def test_message_size_limit():
    box = actors.get_or_create("mailbox", "size")
    box.send("jobs", b"x" * (MAX_MESSAGE_BYTES - 16))
    with pytest.raises(QueueMessageTooLarge):
        box.send("jobs", b"x" * MAX_MESSAGE_BYTES)
    assert QueueMessage.objects.count() == 1


def test_at_most_1000_pending_messages_per_actor():
    box = actors.get_or_create("mailbox", "full")
    box.send("jobs", 0)
    QueueMessage.objects.bulk_create(
        QueueMessage(actor_id=box.actor_id, queue="jobs", body=cbor_dumps(index))
        for index in range(1, MAX_PENDING_MESSAGES)
    )
    with pytest.raises(QueueFull) as refused:
        box.send("jobs", "one too many")
    assert refused.value.qualified_code == "queue/full"
    assert queue_delivery.deliver_queue(box.actor_id, limit=1) == 1
    box.send("jobs", "room again")
    assert QueueMessage.objects.count() == MAX_PENDING_MESSAGES + 1
