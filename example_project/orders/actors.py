"""The order desk of an org: places orders and passes on decisions."""

from django_rivet import Actor, UserError, action

from .models import Order

MAX_ITEM = 100


class OrderDesk(Actor):
    """Start ``order`` workflows and send them the manager's decision.

    ``place`` writes the ``Order`` row and starts its workflow in one
    transaction: if anything in the action fails, there is neither an order
    nor a workflow.
    """

    name = "orderDesk"
    initial_state = {"placed": 0}

    @action
    def place(self, ctx, item: str, amount: int) -> dict:
        item = item.strip()
        if not item or len(item) > MAX_ITEM:
            raise UserError("Name the item (at most 100 characters)", code="item")
        if amount <= 0:
            raise UserError("The amount is a positive number of cents", code="amount")
        order = Order.objects.create(org=ctx.key[0], item=item, amount=amount)
        handle = ctx.workflows.start(
            "order", {"order_id": order.pk}, id=f"order-{order.pk}"
        )
        order.workflow_id = handle.workflow_id
        order.save(update_fields=["workflow_id"])
        ctx.state["placed"] += 1
        ctx.broadcast("orderPlaced", order.pk)
        return {"order_id": order.pk, "workflow_id": handle.workflow_id}

    @action
    def decide(self, ctx, order_id: int, decision: str, by: str = "") -> str:
        if decision not in ("approve", "reject"):
            raise UserError("Approve or reject", code="decision")
        order = Order.objects.filter(pk=order_id, org=ctx.key[0]).first()
        if order is None:
            raise UserError("No such order", code="order")
        # Kept in the workflow's inbox if it does not wait for it yet.
        ctx.workflows.get(order.workflow_id).send(decision, {"by": by.strip()})
        ctx.broadcast("orderDecided", order.pk, decision)
        return decision
