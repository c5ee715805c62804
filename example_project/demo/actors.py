"""Actors of the example project."""

from django_rivet import Actor, UserError, action


class Counter(Actor):
    """A shared counter: every connected browser sees each change."""

    initial_state = {"count": 0}

    @action
    def increment(self, ctx, by: int = 1) -> int:
        if by > 1000:
            raise UserError("That is too much at once", code="too_much")
        ctx.state["count"] += by
        ctx.broadcast("changed", ctx.state["count"])
        return ctx.state["count"]

    @action
    def count(self, ctx) -> int:
        return ctx.state["count"]
