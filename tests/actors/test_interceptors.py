"""RIVET["INTERCEPTORS"]: code around every invocation of every entry point."""

import json

import pytest
from channels.testing import WebsocketCommunicator
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings

from django_rivet import Actor, UserError, action, actors, queue_handler
from django_rivet.actors import interceptors
from django_rivet.models import Actor as ActorRow
from django_rivet.observability import ObservabilityInterceptor
from django_rivet.testing import (
    RivetCommunicator,
    conn_params_protocol,
    freeze_time,
    register_temporarily,
    run_due,
    websocket_application,
)

pytestmark = pytest.mark.django_db(transaction=True)

SEEN: list[tuple] = []
HERE = "tests.actors.test_interceptors"


class Recording:
    """Notes every call it wraps: where from, what, on which actor."""

    def invoke(self, call, next):
        SEEN.append(("enter", call.transport, call.kind, call.name, call.actor_name))
        try:
            return next(call)
        finally:
            SEEN.append(("exit", call.kind, call.name))


class Second:
    def invoke(self, call, next):
        SEEN.append(("second", call.kind, call.name))
        return next(call)


class AsyncRefusing:
    """An async interceptor refusing one action, doubling another's answer."""

    async def invoke(self, call, next):
        if call.name == "forbidden":
            raise UserError("not today", code="intercepted")
        result = await next(call)
        return result * 2 if call.name == "double" else result


class Probe(Actor):
    name = "probe"
    initial_state = {"runs": 0}

    def on_websocket(self, ctx, websocket):
        websocket.add_event_listener("message", lambda ctx, message: None)

    @action
    def ping(self, ctx):
        ctx.state["runs"] += 1
        return ctx.state["runs"]

    @action(readonly=True)
    def peek(self, ctx):
        return ctx.state["runs"]

    @action
    def later(self, ctx):
        ctx.schedule.after(10, "ping")
        ctx.cron.every("tick", 60, "ping")

    @action
    def double(self, ctx):
        return 21

    @action
    def forbidden(self, ctx):
        ctx.state["runs"] += 100

    @queue_handler("jobs")
    def on_job(self, ctx, message):
        return message


@pytest.fixture
def recording():
    SEEN.clear()
    with register_temporarily(Probe):
        with override_settings(RIVET={"INTERCEPTORS": [f"{HERE}.Recording"]}):
            yield SEEN


def entered(seen):
    return [entry[1:] for entry in seen if entry[0] == "enter"]


def test_every_entry_point_goes_through_the_interceptors(recording):
    # handle.call, a read-only action, HTTP.
    handle = actors.get_or_create("probe", "p")
    handle.call("ping")
    handle.call("peek")
    Client().post(
        "/rivet/actors/probe/actions/ping?key=p",
        {"args": []},
        content_type="application/json",
    )
    # Schedules, cron runs and queue messages.
    with freeze_time() as clock:
        handle.call("later")
        handle.send("jobs", {"n": 1})
        clock.advance(61)
        run_due()

    # Both WebSocket flavours and a raw WebSocket.
    async def sockets():
        own = RivetCommunicator("probe", ["p"])
        await own.handshake()
        await own.call("ping")
        await own.disconnect()
        kit = WebsocketCommunicator(
            websocket_application(),
            "/rivet/gateway/probe/connect?rvt-method=get&rvt-key=p",
            subprotocols=["rivet", "rivet_encoding.json"],
        )
        await kit.connect(10)
        await kit.receive_from(10)
        request = {"id": ["$BigInt", "1"], "name": "ping", "args": []}
        await kit.send_to(
            text_data=json.dumps({"body": {"tag": "ActionRequest", "val": request}})
        )
        await kit.receive_from(10)
        await kit.disconnect()
        raw = WebsocketCommunicator(
            websocket_application(),
            "/rivet/actors/probe/websocket?key=p",
            subprotocols=["rivet", conn_params_protocol({})],
        )
        await raw.connect(10)
        await raw.send_to(bytes_data=b"\x01")
        await handle.acall("ping")  # after the message: the lane keeps order
        await raw.disconnect()
        await handle.acall("peek")

    import asyncio

    asyncio.run(sockets())
    seen = set(entered(recording))
    for expected in [
        ("internal", "action", "ping", "probe"),
        ("internal", "action", "peek", "probe"),
        ("http", "action", "ping", "probe"),
        ("schedule", "schedule", "ping", None),
        ("cron", "cron", "ping", None),
        ("queue", "queue", "jobs", None),
        ("internal", "queue", "jobs", "probe"),  # handle.send
        ("websocket", "connect", None, "probe"),
        ("websocket", "action", "ping", "probe"),
        ("websocket_raw", "connect", None, "probe"),
        ("websocket_raw", "message", None, "probe"),
    ]:
        transport, kind, name, actor = expected
        assert any(
            s[0] == transport and s[1] == kind and (name is None or s[2] == name)
            for s in seen
        ), (expected, sorted(map(str, seen)))
    # The server-side client's creation and the runtime's own work too.
    assert ("internal", "actor", None, "probe") in seen
    assert any(s[1] == "hook" and s[0] == "internal" for s in seen)  # disconnects
    # Every call that entered also left.
    assert sum(e[0] == "enter" for e in recording) == sum(
        e[0] == "exit" for e in recording
    )


def test_interceptors_run_in_order_the_first_outermost():
    SEEN.clear()
    paths = [f"{HERE}.Recording", f"{HERE}.Second"]
    with register_temporarily(Probe), override_settings(RIVET={"INTERCEPTORS": paths}):
        actors.get_or_create("probe", "o").call("ping")
    calls = [entry for entry in SEEN if "ping" in entry]
    assert [entry[0] for entry in calls] == ["enter", "second", "exit"]


def test_an_async_interceptor_can_refuse_or_change_a_call():
    with (
        register_temporarily(Probe),
        override_settings(RIVET={"INTERCEPTORS": [f"{HERE}.AsyncRefusing"]}),
    ):
        handle = actors.get_or_create("probe", "a")
        assert handle.call("double") == 42
        with pytest.raises(UserError) as refused:
            handle.call("forbidden")
        assert refused.value.code == "intercepted"
    assert ActorRow.objects.get(name="probe").decoded_state() == {"runs": 0}


def test_observability_is_the_first_interceptor():
    with override_settings(RIVET={"INTERCEPTORS": [f"{HERE}.Second"]}):
        links = interceptors._links()
    # Innermost first: the project's, then observability around it.
    assert isinstance(links[-1][0].__self__, ObservabilityInterceptor)
    assert isinstance(links[0][0].__self__, Second)


def test_a_path_that_is_not_an_interceptor_is_refused():
    with override_settings(RIVET={"INTERCEPTORS": ["json.dumps"]}):
        with pytest.raises(ImproperlyConfigured):
            interceptors._links()
    with override_settings(RIVET={"INTERCEPTORS": ["no.such.Thing"]}):
        with pytest.raises(ImproperlyConfigured):
            interceptors._links()
