"""The ``order`` workflow: charge, cool off, wait for approval, ship.

It shows the workflow features one after the other:

1. ``rollback_checkpoint``: from here on, a failure rolls back the
   completed steps that have a ``rollback`` handler, newest first;
2. ``charge``, a ``transaction=True`` step: its ``Payment`` row commits
   with the step's history entry (exactly once), and its rollback refunds it;
3. a durable ``sleep`` (the cool-off, when a customer may still cancel);
4. a message wait with a timeout: ``approve`` or ``reject`` from the order
   page; a rejection or no answer in time fails the order, which refunds it;
5. a ``join`` of two branches that run in parallel: a shipping label and a
   confirmation e-mail (printed on the console);
6. a last step that calls an actor: it announces the order in the chat.
"""

from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone
from django_rivet import actors
from django_rivet.workflows import CriticalError, RollbackError, workflow

from .models import Order, Payment

COOL_OFF = 3  # seconds; a real shop would wait longer
APPROVAL_TIMEOUT = 600  # seconds
CARD_LIMIT = 100_000  # cents: bigger orders are declined


@workflow(name="order")
async def order(ctx, input):
    order_id = input["order_id"]
    await ctx.rollback_checkpoint("start")
    payment = await ctx.step(
        "charge",
        lambda: charge(order_id),
        rollback=refund,
        transaction=True,
    )
    await ctx.sleep("cool-off", COOL_OFF)
    decision = await ctx.messages.next(
        "decision", names=["approve", "reject"], timeout=APPROVAL_TIMEOUT
    )
    by = decision.body.get("by") or "someone"
    if decision.name == "reject":
        raise RollbackError(f"Rejected by {by}")

    async def label(branch):
        return await branch.step("print", lambda: f"LABEL-{order_id:06d}")

    async def confirmation(branch):
        return await branch.step("send", lambda: send_confirmation(order_id))

    shipped = await ctx.join("ship", {"label": label, "email": confirmation})
    await ctx.step("announce", lambda: announce(order_id, by))
    return {
        "payment_id": payment["payment_id"],
        "approved_by": by,
        "label": shipped["label"],
        "emailed": shipped["email"],
    }


def charge(order_id: int) -> dict:
    """Charge the order once (the step runs in a transaction)."""
    order = Order.objects.select_for_update().get(pk=order_id)
    if order.amount > CARD_LIMIT:
        raise CriticalError("Card declined: the limit is 1000.00 EUR")
    payment, _ = Payment.objects.get_or_create(
        order=order, defaults={"amount": order.amount}
    )
    return {"payment_id": payment.pk, "amount": payment.amount}


def refund(ctx, payment: dict) -> None:
    """Roll back ``charge``; idempotent, as rollbacks may run again."""
    with transaction.atomic():
        Payment.objects.filter(pk=payment["payment_id"], refunded_at=None).update(
            refunded_at=timezone.now()
        )


def send_confirmation(order_id: int) -> str:
    """E-mail the customer (at least once: a crash may send it again)."""
    order = Order.objects.get(pk=order_id)
    send_mail(
        f"Order #{order.pk} is on its way",
        f"Your {order.item} has shipped.",
        "shop@example.com",
        ["customer@example.com"],
    )
    return "customer@example.com"


def announce(order_id: int, by: str) -> dict:
    order = Order.objects.get(pk=order_id)
    room = actors.get_or_create("chatRoom", [order.org, "general"])
    return room.call(
        "post", "orders", f"Order #{order.pk} ({order.item}) shipped, approved by {by}."
    )
