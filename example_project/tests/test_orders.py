import pytest
from django.db import connection
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


def waiting_for_a_decision():
    """An order past its cool-off, its approval sent but not yet run."""
    with freeze_time() as clock:
        desk, order_id, order = place()
        run_until_idle(order)
        clock.advance(COOL_OFF)
        assert run_until_idle(order) == "sleeping"
    desk.call("decide", order_id, "approve", "ann")
    return order_id, order


def status_page(client, order_id, order, finish_after):
    """GET the order's status.json; the workflow finishes after query ``finish_after``.

    Returns the page's data and how many queries the view made.
    """
    view_queries = 0
    finishing = False

    def finish_during_the_request(execute, sql, params, many, context):
        nonlocal view_queries, finishing
        result = execute(sql, params, many, context)
        if not finishing:
            view_queries += 1
            if view_queries == finish_after:
                finishing = True  # the workflow's own queries are not the view's
                run_until_idle(order)
                finishing = False
        return result

    with connection.execute_wrapper(finish_during_the_request):
        data = client.get(f"/orders/{order_id}/status.json").json()
    return data, view_queries


@pytest.mark.parametrize("finish_after", range(1, 9))  # the view makes 8
def test_the_status_page_shows_an_outcome_with_its_status(client, finish_after):
    """Whenever the workflow finishes during the request, a finished status
    comes with its output (the page once showed "completed" and no output)."""
    order_id, order = waiting_for_a_decision()
    data, queries = status_page(client, order_id, order, finish_after)
    assert order.status == "completed"
    assert finish_after <= queries  # the workflow did finish during the request
    if data["status"] == "completed":
        assert data["output"]["approved_by"] == "ann"
        assert data["history"][-1]["location"] == "announce"
    else:
        assert data["status"] == "sleeping"
