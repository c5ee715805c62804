"""Actors of the test app; discovered by the app registry's autodiscovery."""

import asyncio

from django_rivet import Actor, UserError, action

from .models import Note


class Base(Actor):
    """An abstract base: autodiscovery must not register it."""

    abstract = True

    @action
    def ping(self, ctx):
        return "pong"


class Counter(Base):
    initial_state = {"count": 0}

    @action
    def increment(self, ctx, by: int = 1):
        ctx.state["count"] += by
        ctx.broadcast("changed", ctx.state["count"])
        return ctx.state["count"]

    @action(name="getCount")
    def get_count(self, ctx):
        return ctx.state["count"]

    @action
    async def slow_increment(self, ctx, delay: float):
        await asyncio.sleep(delay)
        ctx.state["count"] += 1
        return ctx.state["count"]

    @action
    def add_note_then_fail(self, ctx, text: str):
        Note.objects.create(text=text)
        ctx.kv.put("note", text)
        ctx.state["count"] += 100
        raise UserError("refused on purpose", code="refused", metadata={"text": text})

    @action
    def crash(self, ctx):
        ctx.state["count"] += 1000
        raise RuntimeError("secret detail")
