"""Actors of the test app; discovered by the app registry's autodiscovery."""

import asyncio

from django_rivet import Actor, UserError, action, queue_handler

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


# -- transport (issue 4): connections, conn state, on_auth, raw requests ------------
class ChatRoom(Actor):
    """A room with per-connection state; keys starting "private" need a token."""

    name = "chatRoom"
    initial_state = {"messages": [], "log": []}

    def on_auth(self, ctx, info):
        if info.transport == "websocket":
            token = (info.params or {}).get("token")
        else:
            token = info.headers.get("X-Rivet-Token")
        if ctx.key[:1] == ("private",) and token != "secret":
            raise UserError("A token is required", code="token_required")

    def on_before_connect(self, ctx, params):
        if (params or {}).get("name") == "banned":
            raise UserError("You are banned", code="banned")

    def create_conn_state(self, ctx, params):
        return {"name": (params or {}).get("name", "anon"), "sent": 0}

    def on_connect(self, ctx, conn):
        ctx.state["log"].append(["connect", conn.state["name"]])
        ctx.broadcast("joined", conn.state["name"])

    def on_disconnect(self, ctx, conn):
        ctx.state["log"].append(["disconnect", conn.state["name"]])
        ctx.broadcast("left", conn.state["name"])

    @action
    def send_message(self, ctx, text: str):
        author = ctx.conn.state["name"] if ctx.conn else "http"
        if ctx.conn:
            ctx.conn.state["sent"] += 1
        ctx.state["messages"].append([author, text])
        ctx.broadcast("newMessage", author, text)
        return len(ctx.state["messages"])

    @action
    def whoami(self, ctx):
        if ctx.conn is None:
            return None
        return {
            "id": str(ctx.conn.id),
            "params": ctx.conn.params,
            "state": ctx.conn.state,
        }

    @action
    def names(self, ctx):
        return sorted(conn.state["name"] for conn in ctx.conns)

    @action
    def whisper(self, ctx, to: str, text: str):
        sender = ctx.conn.state["name"] if ctx.conn else "http"
        sent = 0
        for conn in ctx.conns:
            if conn.state["name"] == to:
                conn.send("whisper", sender, text)
                sent += 1
        return sent

    @action
    def kick(self, ctx, who: str):
        kicked = 0
        for conn in ctx.conns:
            if conn.state["name"] == who:
                conn.disconnect("kicked")
                kicked += 1
        return kicked

    @action
    def log(self, ctx):
        return ctx.state["log"]

    @action
    def history(self, ctx):
        return ctx.state["messages"]

    @action
    async def slow(self, ctx, delay: float, tag: str):
        await asyncio.sleep(delay)
        ctx.state["log"].append(["slow", tag])
        return tag

    @action
    def big(self, ctx, size: int):
        return "x" * size

    @action
    def shout(self, ctx, size: int):
        ctx.broadcast("big", "x" * size)
        return size

    @action
    def echo(self, ctx, value):
        return value

    @action
    def unencodable(self, ctx):
        return object()

    @queue_handler("inbox")
    def on_inbox(self, ctx, message):
        ctx.state["log"].append(["inbox", message])
        return {"got": message}

    def on_request(self, ctx, request):
        from django.http import JsonResponse

        ctx.state["log"].append(["request", request.method])
        return JsonResponse(
            {
                "method": request.method,
                "path": request.resolver_match.kwargs.get("path"),
                "body": request.body.decode(),
                "user": str(ctx.user),
            }
        )


class Webhook(Actor):
    """A raw-request endpoint that opts out of Django's CSRF check."""

    csrf_exempt = True
    initial_state = {"hits": 0}

    def on_request(self, ctx, request):
        from django.http import HttpResponse

        ctx.state["hits"] += 1
        return HttpResponse(str(ctx.state["hits"]), content_type="text/plain")

    @action
    def hits(self, ctx):
        return ctx.state["hits"]
