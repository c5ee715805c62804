"""Actor behaviours aligned with RivetKit's driver tests (issue 16, items 5-10).

WebSocket cases run through the real consumer (channels' communicator),
HTTP cases through Django's test client and the async views; destroy over
a socket also runs over daphne in test_e2e_daphne.py.
"""

import asyncio
import json
import threading

import pytest
from asgiref.sync import sync_to_async
from django.test import Client, override_settings

from django_rivet import (
    ActionTimeout,
    Actor,
    ActorNotFound,
    QueueFull,
    action,
    actors,
    queue_handler,
)
from django_rivet.actors.registry import register_temporarily
from django_rivet.exceptions import QueueMessageTooLarge
from django_rivet.models import Actor as ActorRow
from django_rivet.models import QueueMessage, QueueMessageStatus
from django_rivet.scheduling.queues import MAX_MESSAGE_BYTES
from django_rivet.testing import ConnectionClosedForTest, RivetCommunicator, run_due
from tests.support.polling import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

PREFIX = "/rivet/actors"


def post_json(path, body=None):
    data = json.dumps(body if body is not None else {})
    return Client().post(path, data, content_type="application/json")


def stored_state(name, key):
    return ActorRow.objects.get(name=name, key=json.dumps([key])).decoded_state()


# -- 5. on_state_change runs on the call that creates the actor ----------------------
def test_on_state_change_runs_for_an_http_action_that_creates_the_actor():
    response = post_json(f"{PREFIX}/stateWatcher/actions/increment?key=http")
    assert response.json() == {"output": 1}
    assert stored_state("stateWatcher", "http")["changes"] == 1


def test_creating_without_changing_the_state_runs_no_on_state_change():
    response = Client().put(
        f"{PREFIX}/stateWatcher?key=quiet", "{}", content_type="application/json"
    )
    assert response.json()["created"] is True
    assert stored_state("stateWatcher", "quiet")["changes"] == 0


async def test_on_state_change_runs_for_a_websocket_connect_that_creates_the_actor():
    comm = RivetCommunicator("stateWatcher", ["ws"])
    assert (await comm.handshake())["type"] == "init"
    assert await comm.call("changes") == 1  # on_connect counted the connection
    await comm.disconnect()


# -- 6. a waiting sender is released at its timeout ------------------------------------
release = threading.Event()


class SlowMailbox(Actor):
    name = "slowMailbox"
    initial_state = {"seen": []}

    @queue_handler("jobs")
    def on_job(self, ctx, message):
        release.wait(5)
        ctx.state["seen"].append(message)
        return message


def handled_once():
    (status,) = QueueMessage.objects.values_list("status", flat=True)
    return status == QueueMessageStatus.DONE


@pytest.fixture
def slow_mailbox():
    release.clear()
    with register_temporarily(SlowMailbox):
        try:
            yield
        finally:
            release.set()
            # The delivery the sender left behind ends before the class goes.
            wait_for(lambda: not QueueMessage.objects.active().exists())


def test_send_wait_times_out_while_the_handler_runs_and_handles_it_once(slow_mailbox):
    box = actors.get_or_create("slowMailbox", "sync")
    reply = box.send("jobs", "m", wait=True, timeout=0.3)
    assert reply == {"status": "timed_out"}
    assert stored_state("slowMailbox", "sync")["seen"] == []  # still queued
    release.set()
    wait_for(handled_once)
    assert run_due() == 0
    assert stored_state("slowMailbox", "sync")["seen"] == ["m"]


def test_http_send_wait_times_out_while_the_handler_runs(slow_mailbox):
    response = post_json(
        f"{PREFIX}/slowMailbox/queue/jobs?key=http",
        {"body": "m", "wait": True, "timeout": 0.3},
    )
    assert response.json() == {"status": "timed_out"}
    release.set()
    wait_for(handled_once)
    assert run_due() == 0
    assert stored_state("slowMailbox", "http")["seen"] == ["m"]


# -- 7. destroy over a WebSocket is answered before the close --------------------------
async def test_destroy_over_a_websocket_answers_then_closes():
    comm = RivetCommunicator("stateWatcher", ["destroy"])
    other = RivetCommunicator("stateWatcher", ["destroy"])
    assert (await comm.handshake())["type"] == "init"
    assert (await other.handshake())["type"] == "init"
    action_id = await comm.send_action("destroy")
    frame = await comm.receive_frame()
    assert frame == {"type": "action_response", "id": action_id, "output": "destroyed"}
    assert await comm.receive_close() == 1000
    assert await other.receive_close() == 1000
    assert not await sync_to_async(ActorRow.objects.exists)()
    await comm.disconnect()
    await other.disconnect()


# -- 8. handles by key follow the key, handles by id stay pinned -----------------------
def test_a_get_handle_follows_its_key_and_an_id_handle_stays_pinned():
    first = actors.get_or_create("counter", "k")
    first.call("increment", 5)
    by_key = actors.get("counter", "k")
    by_id = actors.get_by_id(first.actor_id)
    created = actors.create("counter", "pinned")
    by_key.destroy()
    with pytest.raises(ActorNotFound):
        by_key.call("getCount")  # nothing holds the key now
    second = actors.create("counter", "k")
    second.call("increment", 2)
    assert by_key.call("getCount") == 2
    assert first.call("getCount") == 2  # get_or_create handles follow the key too
    with pytest.raises(ActorNotFound):
        by_id.call("getCount")
    created.destroy()
    actors.create("counter", "pinned")
    with pytest.raises(ActorNotFound):
        created.call("getCount")


async def test_an_async_get_handle_follows_its_key():
    first = await actors.acreate("counter", "async")
    by_key = await actors.aget("counter", "async")
    await first.adestroy()
    await actors.acreate("counter", "async")
    assert await by_key.acall("increment") == 1


# -- 9. per-actor options --------------------------------------------------------------
class Patient(Actor):
    """Longer than ACTION_TIMEOUT by default, shorter for one action; small queues."""

    name = "patient"
    initial_state = {"naps": 0}
    action_timeout = 30
    queue_max_pending = 2
    queue_max_message_bytes = 100

    @action
    async def nap(self, ctx, seconds: float):
        await asyncio.sleep(seconds)
        ctx.state["naps"] += 1
        return ctx.state["naps"]

    @action(timeout=0.2)
    async def hurried_nap(self, ctx, seconds: float):
        await asyncio.sleep(seconds)
        ctx.state["naps"] += 1

    @queue_handler("jobs")
    def on_job(self, ctx, message):
        return message


def test_action_timeout_per_class_and_per_action_override_the_setting():
    with (
        register_temporarily(Patient),
        override_settings(RIVET={"ACTION_TIMEOUT": 0.2}),
    ):
        patient = actors.get_or_create("patient", "t")
        assert patient.call("nap", 0.5) == 1  # the class allows 30 s
        with pytest.raises(ActionTimeout):
            patient.call("hurried_nap", 5)  # the action allows 0.2 s
        assert patient.call("nap", 0) == 2  # the timed-out nap rolled back


def test_action_timeout_options_are_checked():
    with pytest.raises(ValueError, match="timeout"):
        action(timeout=0)
    with pytest.raises(ValueError, match="queue_max_pending"):

        class Broken(Actor):
            queue_max_pending = -1


def test_queue_limits_per_actor_override_the_defaults():
    with register_temporarily(Patient):
        patient = actors.get_or_create("patient", "q")
        patient.send("jobs", "a")
        patient.send("jobs", "b")
        with pytest.raises(QueueFull) as full:
            patient.send("jobs", "c")
        assert full.value.metadata == {"limit": 2}
        run_due()
        with pytest.raises(QueueMessageTooLarge) as large:
            patient.send("jobs", "x" * 200)
        assert large.value.metadata["limit"] == 100
        # Other actors keep the defaults.
        box = actors.get_or_create("mailbox", "defaults")
        assert box.send("jobs", "x" * 200) == {"status": "queued"}
        with pytest.raises(QueueMessageTooLarge):
            box.send("jobs", b"x" * MAX_MESSAGE_BYTES)


def test_http_queue_limits_per_actor():
    with register_temporarily(Patient):
        response = post_json(
            f"{PREFIX}/patient/queue/jobs?key=http", {"body": "x" * 200}
        )
        assert response.status_code == 413
        body = response.json()
        assert (body["group"], body["code"]) == ("queue", "message_too_large")
        assert body["metadata"]["limit"] == 100


# -- 10. can_subscribe -----------------------------------------------------------------
class GatedFeed(Actor):
    """Only admins may subscribe to "secret"; "broken" makes the hook raise."""

    name = "gatedFeed"

    def can_subscribe(self, ctx, event):
        if event == "broken":
            raise RuntimeError("hook failed")
        if event == "secret":
            return (ctx.conn.params or {}).get("role") == "admin"
        return True

    @action
    def publish(self, ctx, event: str, value):
        ctx.broadcast(event, value)


class AsyncGatedFeed(GatedFeed):
    name = "asyncGatedFeed"

    async def can_subscribe(self, ctx, event):
        await asyncio.sleep(0)
        return GatedFeed.can_subscribe(self, ctx, event)


def forbidden(frame, event):
    assert frame["type"] == "error", frame
    assert (frame["group"], frame["code"]) == ("actor", "forbidden")
    assert frame["metadata"] == {"event": event}


@pytest.mark.parametrize("feed", ["gatedFeed", "asyncGatedFeed"])
async def test_can_subscribe_refuses_a_subscription_and_keeps_the_connection(feed):
    with register_temporarily(GatedFeed, AsyncGatedFeed):
        guest = RivetCommunicator(feed, ["f"], params={"role": "guest"})
        admin = RivetCommunicator(feed, ["f"], params={"role": "admin"})
        assert (await guest.handshake())["type"] == "init"
        assert (await admin.handshake())["type"] == "init"
        for event in ("secret", "broken"):
            await guest.subscribe(event)
            forbidden(await guest.receive_frame(), event)
        await guest.subscribe("news")
        await admin.subscribe("secret")
        await admin.call("publish", "secret", 1)
        await guest.call("publish", "news", 2)
        assert (await admin.receive_event())["name"] == "secret"
        event = await guest.receive_event()  # not the secret one
        assert (event["name"], event["args"]) == ("news", [2])
        await guest.disconnect()
        await admin.disconnect()


async def test_can_subscribe_filters_the_subscriptions_of_the_connect_request():
    with register_temporarily(GatedFeed, AsyncGatedFeed):
        comm = RivetCommunicator(
            "gatedFeed", ["c"], params={"role": "guest"}, subscribe=["secret", "news"]
        )
        admin = RivetCommunicator(
            "gatedFeed", ["c"], params={"role": "admin"}, subscribe=["secret"]
        )
        assert (await comm.handshake())["type"] == "init"
        forbidden(await comm.receive_frame(), "secret")
        assert (await admin.handshake())["type"] == "init"
        await comm.call("publish", "secret", 1)
        await comm.call("publish", "news", 2)
        assert (await comm.receive_event())["name"] == "news"
        assert (await admin.receive_event())["name"] == "secret"
        await comm.disconnect()
        await admin.disconnect()


async def test_a_connection_closed_during_destroy_reports_no_late_frames():
    # Guard for item 7: after the close, queued actions are dropped, not run.
    comm = RivetCommunicator("stateWatcher", ["late"])
    assert (await comm.handshake())["type"] == "init"
    await comm.send_action("destroy")
    await comm.send_action("increment")
    assert (await comm.receive_frame())["output"] == "destroyed"
    with pytest.raises(ConnectionClosedForTest):
        while True:
            frame = await comm.receive_frame()
            assert frame.get("type") != "action_response", frame
    await comm.disconnect()
