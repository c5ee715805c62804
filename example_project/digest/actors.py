"""A digest per org, posted into its #general room by a cron job."""

from django.db.models import Count, Max
from django_rivet import Actor, action

from chat.models import ChatMessage
from orders.models import Order

NICKNAME = "digest"
SCHEDULE = "* * * * *"  # every minute, so that the example shows it soon


class Digest(Actor):
    """Every minute, sum up what happened in the org since the last digest.

    The cron job is set in ``on_create``, and only server code creates a
    digest (``create_from_clients = False``; ``example_setup`` creates the
    one of ``acme``): a page may read and trigger it, but a client naming a
    new org cannot set up one more job that fires every minute forever.
    Nothing is posted when nothing happened.
    """

    name = "digest"
    initial_state = {"last_message_id": 0, "last_order_id": 0, "posted": 0}
    create_from_clients = False

    def on_create(self, ctx, input):
        ctx.cron.set("digest", SCHEDULE, "post_digest", tz="UTC")

    @action
    def post_digest(self, ctx) -> str | None:
        org = ctx.key[0]
        messages = ChatMessage.objects.filter(
            org=org, id__gt=ctx.state["last_message_id"]
        ).exclude(nickname__in=[NICKNAME, "orders"])
        talk = messages.aggregate(
            count=Count("id"), people=Count("nickname", distinct=True), last=Max("id")
        )
        orders = Order.objects.filter(org=org, id__gt=ctx.state["last_order_id"])
        placed = orders.aggregate(count=Count("id"), last=Max("id"))
        if not talk["count"] and not placed["count"]:
            return None
        text = (
            f"Since the last digest: {_plural(talk['count'], 'message')} from "
            f"{_plural(talk['people'], 'person', 'people')}, "
            f"{_plural(placed['count'], 'order')} placed."
        )
        # Another actor, called inside this invocation: the post commits
        # with this digest's state, or neither does.
        ctx.actors.get_or_create("chatRoom", [org, "general"]).call(
            "post", NICKNAME, text
        )
        ctx.state["last_message_id"] = talk["last"] or ctx.state["last_message_id"]
        ctx.state["last_order_id"] = placed["last"] or ctx.state["last_order_id"]
        ctx.state["posted"] += 1
        return text

    @action
    def status(self, ctx) -> dict:
        return {
            "posted": ctx.state["posted"],
            "job": ctx.cron.get("digest"),
            "history": ctx.cron.history("digest", limit=10),
        }


def _plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"
