"""Actors of the test app; discovered by the app registry's autodiscovery."""

import asyncio
import json
import os
import secrets
from decimal import Decimal

from django.http import HttpResponse

from django_rivet import Actor, ActorBusy, UserError, action, queue_handler

from .models import Note
from .shop import TypedShop, typed_checkout  # noqa: F401 (registered here)


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


# -- scheduling: schedules, cron and queues (tests/scheduling/test_schedules.py & co) --
class AlarmClock(Actor):
    """Schedules and cron jobs calling its own actions."""

    initial_state = {"rings": [], "ticks": []}

    @action
    def ring(self, ctx, label: str):
        ctx.state["rings"].append({"label": label, "info": ctx.fire_info})
        return label

    @action
    def tick(self, ctx):
        ctx.state["ticks"].append(ctx.fire_info)

    @action
    def boom(self, ctx):
        ctx.state["rings"].append("boom")
        raise RuntimeError("boom on purpose")

    @action
    def set_alarm(self, ctx, seconds: float, label: str):
        return ctx.schedule.after(seconds, "ring", label)

    @action
    async def aset_alarm(self, ctx, seconds: float, label: str):
        return await ctx.schedule.aafter(seconds, "ring", label)

    @action
    def set_alarm_at(self, ctx, when, label: str):
        return ctx.schedule.at(when, "ring", label)

    @action
    def schedule_call(self, ctx, seconds: float, action_name: str, *args):
        return ctx.schedule.after(seconds, action_name, *args)

    @action
    def cancel_alarm(self, ctx, schedule_id: str):
        return ctx.schedule.cancel(schedule_id)

    @action
    def alarm(self, ctx, schedule_id: str):
        return ctx.schedule.get(schedule_id)

    @action
    def alarms(self, ctx):
        return ctx.schedule.list()

    @action
    def set_cron(self, ctx, name: str, expression: str, tz=None, max_history=100):
        return ctx.cron.set(name, expression, "tick", tz=tz, max_history=max_history)

    @action
    def set_every(self, ctx, name: str, seconds: float, action_name="tick", *args):
        return ctx.cron.every(name, seconds, action_name, *args)

    @action
    def set_every_history(self, ctx, name: str, seconds: float, max_history: int):
        return ctx.cron.every(name, seconds, "tick", max_history=max_history)

    @action
    def cron_job(self, ctx, name: str):
        return ctx.cron.get(name)

    @action
    def cron_jobs(self, ctx):
        return ctx.cron.list()

    @action
    def delete_cron(self, ctx, name: str):
        return ctx.cron.delete(name)

    @action
    def cron_history(self, ctx, name: str, limit: int = 20):
        return ctx.cron.history(name, limit)

    @action
    def tick_then_stop(self, ctx, name: str):
        ctx.state["ticks"].append(ctx.fire_info)
        if len(ctx.state["ticks"]) >= 2:
            ctx.cron.delete(name)

    @action
    def schedule_everything_then_fail(self, ctx):
        ctx.schedule.after(1, "ring", "never")
        ctx.cron.every("never", 10, "tick")
        ctx.queue.send("jobs", "never")
        raise UserError("rolled back on purpose", code="refused")

    @queue_handler("jobs")
    def on_job(self, ctx, message):
        ctx.state["ticks"].append(message)


class Mailbox(Actor):
    """A queue consumer that replies to waiting senders."""

    initial_state = {"seen": []}

    @queue_handler("jobs")
    def on_job(self, ctx, message):
        ctx.state["seen"].append(message)
        if message == "fail":
            raise UserError("bad job", code="bad_job", metadata={"job": message})
        if message == "crash":
            raise RuntimeError("secret detail")
        return {"echo": message, "seen": len(ctx.state["seen"]), "info": ctx.fire_info}

    @queue_handler("notes")
    async def on_note(self, ctx, message):
        ctx.state["seen"].append(["note", message])
        return "noted"

    @action
    def seen(self, ctx):
        return ctx.state["seen"]

    @action
    def send_to_self(self, ctx, body):
        return ctx.queue.send("jobs", body)


# -- the official RivetKit client (issue 15, tests/test_rivetkit_*.py) -------------
class Vault(Actor):
    """Opens only for the token the RivetKit client is configured with.

    The client sends its ``token`` in a header, an ``@token`` path segment,
    ``rvt-token`` or a subprotocol depending on the call; on_auth reads it
    from one header whatever the transport.
    """

    initial_state = {"opened": 0}
    rivetkit_allow_destroy = True

    def on_auth(self, ctx, info):
        # False refuses (actor/forbidden), like raising does.
        return info.headers.get("X-Rivet-Token") == "open-sesame"

    @action
    def open(self, ctx):
        ctx.state["opened"] += 1
        return ctx.state["opened"]


# -- parity with RivetKit's driver tests (issue 16) --------------------------------
class StateWatcher(Actor):
    """Counts its own ``on_state_change`` calls; can destroy itself."""

    initial_state = {"count": 0, "connects": 0, "changes": 0}

    def on_state_change(self, ctx, state):
        state["changes"] += 1

    def on_connect(self, ctx, conn):
        ctx.state["connects"] += 1

    @action
    def increment(self, ctx):
        ctx.state["count"] += 1
        return ctx.state["count"]

    @action
    def changes(self, ctx):
        return ctx.state["changes"]

    @action
    def destroy(self, ctx):
        ctx.destroy()
        return "destroyed"


# -- authorization and the invocation spine (issues 12, 17, 18) ---------------------
def side_effect(line):
    """Record an effect outside the database (a file), which no rollback undoes."""
    path = os.environ.get("RIVET_TEST_SIDE_EFFECTS")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(line + "\n")


class Gate(Actor):
    """``on_auth`` answers what the caller's ``X-Gate`` header asks for.

    ``allow``/``admin`` return None, ``true`` True, ``false`` (or no header)
    False, ``raise`` raises PermissionError, ``user`` raises a UserError; any
    other word is returned as is (a buggy hook). ``wipe`` needs ``admin``.
    Each allowed check is recorded in a Note (rolled back with a refused
    call); lifecycle hooks record side effects outside the database.
    """

    name = "gate"

    def on_auth(self, ctx, info):
        word = info.headers.get("X-Gate")
        if info.action == "wipe" and word != "admin":
            return False
        if word == "raise":
            raise PermissionError("no entry")
        if word == "user":
            raise UserError(
                "The gate is closed", code="gate_closed", metadata={"gate": "closed"}
            )
        if word is None:
            return False
        answers = {"allow": None, "admin": None, "true": True, "false": False}
        verdict = answers.get(word, word)
        if verdict is None or verdict is True:
            seen = [info.transport, info.kind, info.action, info.queue]
            Note.objects.create(text="auth " + json.dumps(seen))
        return verdict

    def create_state(self, ctx, input):
        side_effect(f"create_state {ctx.name} {json.dumps(list(ctx.key))}")
        return {"n": 0}

    def on_create(self, ctx, input):
        side_effect(f"on_create {ctx.name} {json.dumps(list(ctx.key))}")

    def on_wake(self, ctx):
        side_effect(f"on_wake {ctx.name} {json.dumps(list(ctx.key))}")

    def on_request(self, ctx, request):
        return HttpResponse("gate", content_type="text/plain")

    @action
    def bump(self, ctx):
        ctx.state["n"] += 1
        return ctx.state["n"]

    @action
    def wipe(self, ctx):
        ctx.state["n"] = 0
        return 0

    @action
    def count(self, ctx):
        return ctx.state["n"]

    @queue_handler("jobs")
    def on_job(self, ctx, message):
        return message


class BackOffice(Actor):
    """Reachable from server-side code only (``server_only``)."""

    name = "backOffice"
    server_only = True
    initial_state = {"n": 0}

    def on_request(self, ctx, request):
        return HttpResponse("back office", content_type="text/plain")

    @action
    def bump(self, ctx):
        ctx.state["n"] += 1
        return ctx.state["n"]

    @queue_handler("jobs")
    def on_job(self, ctx, message):
        return message


class Hoard(Actor):
    """Grows its state on demand, writing KV and a Note in the same call."""

    initial_state = {"blob": ""}

    @action
    def grow(self, ctx, size: int):
        Note.objects.create(text="hoard")
        ctx.kv.put("grown", size)
        ctx.state["blob"] = "x" * size
        return size

    @action
    def grow_conn(self, ctx, size: int):
        ctx.conn.state = "x" * size
        return size

    @action
    def size(self, ctx):
        return len(ctx.state["blob"])

    @action
    def records(self, ctx, count: int):
        """Hold ``count`` small records (19,000 are ~0.9 MB encoded)."""
        ctx.state["records"] = [
            {"id": n, "name": f"item {n}", "price": n * 0.5, "tags": ["a", "b"]}
            for n in range(count)
        ]
        return count

    @action
    def count_records(self, ctx):
        return len(ctx.state.get("records", []))


# -- the edges (issues 12 and 17): hostile input, close codes ----------------------
class Ledger(Actor):
    """Records what valid calls brought; a connection hook that can fail."""

    initial_state = {"entries": 0, "last": None}

    def create_conn_state(self, ctx, params):
        if isinstance(params, dict) and params.get("explode"):
            raise RuntimeError("conn state failed on purpose")
        return {}

    @action
    def record(self, ctx, value: str):
        ctx.state["entries"] += 1
        ctx.state["last"] = value
        return ctx.state["entries"]

    @action
    def keep(self, ctx, value):
        """Store any value as it came (a nesting bomb would brick the actor)."""
        ctx.state["last"] = value
        return "kept"

    @action
    def nest(self, ctx, depth: int):
        """Build a value nested ``depth`` levels deep in the handler itself."""
        value: list = []
        for _ in range(depth):
            value = [value]
        ctx.state["entries"] += 1
        ctx.state["last"] = value
        return "nested"

    @action
    def entries(self, ctx):
        return ctx.state["entries"]


# -- realtime under load (issue 18): an idempotent counter ----------------------------
class Tally(Actor):
    """Counts each token once, so a load client may retry a call it lost."""

    name = "tally"
    initial_state = {"count": 0}

    @action
    def add(self, ctx, token: str):
        key = "token:" + token
        if ctx.kv.get(key) is None:  # not a retry of a call that ran
            ctx.kv.put(key, 1)
            ctx.state["count"] += 1
            ctx.broadcast("changed", ctx.state["count"])
        return ctx.state["count"]

    @action
    def count(self, ctx):
        return ctx.state["count"]

    @action
    def blast(self, ctx, count: int, size: int, noise: bool = False):
        """Broadcast ``count`` events of ``size`` bytes (a burst for slow sockets).

        ``noise``: random text, which WebSocket compression (uvicorn offers
        permessage-deflate) cannot shrink.
        """
        for index in range(count):
            payload = secrets.token_hex(size // 2) if noise else "x" * size
            ctx.broadcast("blast", index, payload)
        return count


# -- observability (issue 28, tests/test_observability*.py) ------------------------
class Shop(Actor):
    """Starts workflows, schedules, queues and calls other actors: one trace."""

    initial_state = {"handled": []}

    @action
    def place(self, ctx, name: str):
        return ctx.workflows.start("twoSteps", {"name": name}).workflow_id

    @action
    def fail(self, ctx):
        raise RuntimeError("the till is broken")

    @action
    def refuse(self, ctx):
        raise UserError("out of stock", code="out_of_stock")

    @action
    def later(self, ctx):
        return ctx.schedule.after(0, "ping")

    @action
    def ping(self, ctx):
        return "pong"

    @action
    def enqueue(self, ctx, body):
        return ctx.queue.send("orders", body)

    @action
    def tell_counter(self, ctx, key: str):
        return ctx.actors.get_or_create("counter", key).call("increment")

    @queue_handler("orders")
    def on_order(self, ctx, body):
        ctx.state["handled"].append(body)


# -- transport (issue 24, tests/transport/test_transport_matrix.py) --------------------
class Newsroom(Actor):
    """A deny-list ``can_subscribe`` ("secret" is refused by name).

    ``on_auth`` answers the ``X-Newsroom`` handshake header: ``busy`` raises
    ``actor/busy`` (a lock that stayed taken: a 503, not a refusal),
    ``closed`` refuses, ``sse`` admits Server-Sent Events followers only.
    """

    name = "newsroom"

    def on_auth(self, ctx, info):
        word = info.headers.get("X-Newsroom")
        if word == "sse":
            return info.transport == "sse" and info.kind == "connect"
        if word == "busy":
            raise ActorBusy("The newsroom is busy", metadata={"retry_after": 1})
        return word != "closed"

    def can_subscribe(self, ctx, event):
        return event != "secret"

    @action
    def publish(self, ctx, names: list):
        for name in names:
            ctx.broadcast(name, name)
        return len(names)


# -- issue 25: one value domain; nothing committed that a caller cannot read ---------
# Values outside the domain, by name (a client picks one with a string).
OUTSIDE = {
    "decimal": {"price": Decimal("9.99")},
    "set": [{1, 2}],
    "bigint": {"total": 2**64},
    "nan": float("nan"),
    "intkey": {1: "one"},
}


class Till(Actor):
    """Writes everywhere, then returns or stores a value outside the domain."""

    initial_state = {"count": 0}

    @action
    def add(self, ctx, by: int):
        ctx.state["count"] += by
        ctx.broadcast("added", ctx.state["count"])
        return ctx.state["count"]

    @action
    def count(self, ctx):
        return ctx.state["count"]

    def _touch(self, ctx, kind):
        ctx.state["count"] += 1
        ctx.kv.put("touched", kind)
        ctx.schedule.after(3600, "add", 1)
        ctx.broadcast("added", ctx.state["count"])
        Note.objects.create(text=f"till {kind}")

    @action
    def add_and_return(self, ctx, kind: str):
        self._touch(ctx, kind)
        return OUTSIDE[kind]

    @action
    def add_and_store(self, ctx, kind: str, where: str):
        self._touch(ctx, kind)
        value = OUTSIDE[kind]
        if where == "state":
            ctx.state["bad"] = value
        elif where == "kv":
            ctx.kv.put("bad", value)
        elif where == "event":
            ctx.broadcast("bad", value)
        elif where == "queue":
            ctx.queue.send("inbox", value)
        elif where == "schedule":
            ctx.schedule.after(60, "keep", value)
        return "stored"

    @action
    def keep(self, ctx, value):
        ctx.state["kept"] = value

    @queue_handler("inbox")
    def on_inbox(self, ctx, message):
        return message


# -- issue 45: raw WebSockets, read-only actions --------------------------------------
class Doc(Actor):
    """A Yjs-style document: binary updates relayed to the other sockets.

    Raw WebSockets need the token ``doc-secret`` (as ``createClient({token})``
    sends it, or in the conn params).
    """

    name = "doc"
    initial_state = {"updates": 0, "texts": [], "log": []}

    def on_auth(self, ctx, info):
        if info.transport != "websocket_raw":
            return
        token = info.headers.get("X-Rivet-Token") or (info.params or {}).get("token")
        if token != "doc-secret":
            raise UserError("A token is required", code="token_required")

    def on_disconnect(self, ctx, conn):
        ctx.state["log"].append("disconnect")

    async def on_websocket(self, ctx, websocket):
        ctx.state["log"].append("websocket")
        websocket.send("welcome")

        def on_message(ctx, message):
            if isinstance(message, bytes):
                # An update: every other socket of the document gets it.
                ctx.state["updates"] += 1
                for other in ctx.websockets:
                    if other != websocket:
                        other.send(message)
            elif message == "close":
                websocket.close(4001, "asked to")
            else:
                ctx.state["texts"].append(message)
                websocket.send(f"echo:{message}")

        websocket.add_event_listener("message", on_message)

    def create_conn_state(self, ctx, params):
        return {"name": (params or {}).get("name", "anon")}

    @action(readonly=True)
    def stats(self, ctx):
        caller = ctx.conn.state["name"] if ctx.conn is not None else None
        return {"updates": ctx.state["updates"], "caller": caller}

    @action(readonly=True)
    def scribble(self, ctx):
        """A read-only action that writes: refused."""
        ctx.state["texts"].append("scribbled")

    @action
    def note(self, ctx, text: str):
        ctx.state["texts"].append(text)
        return len(ctx.state["texts"])
