import pytest
from django_rivet import UserError, actors, workflows
from django_rivet.testing import freeze_time, run_until_idle
from django_rivet.workflows import RollbackError

from chat.models import ChatMessage
from orders.models import Order, Payment
from orders.workflows import APPROVAL_TIMEOUT, COOL_OFF

pytestmark = pytest.mark.django_db(transaction=True)


def place(item="Teapot", amount=2490):
    desk = actors.get_or_create("orderDesk", ["acme"])
    placed = desk.call("place", item, amount)
    return desk, placed["order_id"], workflows.get(placed["workflow_id"])


def test_an_approved_order_is_charged_once_shipped_and_announced(mailoutbox):
    with freeze_time() as clock:
        desk, order_id, order = place()
        assert run_until_idle(order) == "sleeping"  # the cool-off
        assert Payment.objects.get().order_id == order_id
        clock.advance(COOL_OFF)
        assert run_until_idle(order) == "sleeping"  # waiting for a decision
        desk.call("decide", order_id, "approve", "ann")
        assert run_until_idle(order) == "completed"

    assert order.result() == {
        "payment_id": Payment.objects.get().pk,
        "approved_by": "ann",
        "label": f"LABEL-{order_id:06d}",
        "emailed": "customer@example.com",
    }
    assert Payment.objects.get().refunded_at is None
    assert [entry.location for entry in order.history()] == [
        "start",
        "charge",
        "cool-off",
        "decision",
        "ship",
        "ship/label/print",
        "ship/email/send",
        "announce",
    ]
    assert [message.subject for message in mailoutbox] == [
        f"Order #{order_id} is on its way"
    ]
    announced = ChatMessage.objects.get(nickname="orders")
    assert announced.text == f"Order #{order_id} (Teapot) shipped, approved by ann."


def test_a_decision_sent_during_the_cool_off_waits_in_the_inbox():
    with freeze_time() as clock:
        desk, order_id, order = place()
        assert run_until_idle(order) == "sleeping"
        desk.call("decide", order_id, "approve", "early")
        clock.advance(COOL_OFF)
        assert run_until_idle(order) == "completed"
    assert order.result()["approved_by"] == "early"


def test_a_rejected_order_is_refunded_by_the_rollback():
    with freeze_time() as clock:
        desk, order_id, order = place()
        assert run_until_idle(order) == "sleeping"
        clock.advance(COOL_OFF)
        assert run_until_idle(order) == "sleeping"
        desk.call("decide", order_id, "reject", "bob")
        assert run_until_idle(order) == "failed"
    with pytest.raises(RollbackError, match="Rejected by bob"):
        order.result()
    assert Payment.objects.get().refunded_at is not None
    assert order.snapshot().error["message"] == "Rejected by bob"


def test_an_order_nobody_decides_on_is_refunded_after_the_timeout():
    with freeze_time() as clock:
        _, _, order = place()
        assert run_until_idle(order) == "sleeping"
        clock.advance(COOL_OFF)
        assert run_until_idle(order) == "sleeping"
        clock.advance(APPROVAL_TIMEOUT)
        assert run_until_idle(order) == "failed"
    assert Payment.objects.get().refunded_at is not None


def test_an_order_over_the_card_limit_is_declined_without_a_payment():
    _, _, order = place("Piano", 250_000)
    assert run_until_idle(order) == "failed"
    assert "Card declined" in order.snapshot().error["message"]
    assert not Payment.objects.exists()


def test_a_refused_order_leaves_no_order_behind():
    desk = actors.get_or_create("orderDesk", ["acme"])
    with pytest.raises(UserError):
        desk.call("place", "Teapot", 0)
    assert not Order.objects.exists()
