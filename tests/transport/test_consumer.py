"""django-rivet's WebSocket protocol through channels' WebsocketCommunicator.

The consumer, the runtime and the database are real; only the socket is the
in-memory communicator. End-to-end runs over daphne live in test_e2e_*.py.
"""

import asyncio
import base64
import json

import cbor2
import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.test import override_settings

from django_rivet import events
from django_rivet.actors.lanes import ainvoke
from django_rivet.actors.operations import CallAction
from django_rivet.actors.rows import ActorRef
from django_rivet.models import Actor as ActorRow
from django_rivet.models import ActorEvent, Connection
from django_rivet.testing import RivetCommunicator
from django_rivet.transport.delivery import Stream
from tests.support.polling import await_for

pytestmark = pytest.mark.django_db(transaction=True)

NOT_JSON = base64.urlsafe_b64encode(b"{x").decode()
MISSING_ID = "6f1c2d7e-0000-4000-8000-000000000000"


@sync_to_async
def db_counts():
    return (
        ActorRow.objects.count(),
        Connection.objects.count(),
        ActorEvent.objects.count(),
    )


@sync_to_async
def actor_state(name, key):
    return ActorRow.objects.get(name=name, key=json.dumps(key)).decoded_state()


@sync_to_async
def connection_rows():
    return list(Connection.objects.values("id", "subscriptions", "encoding"))


async def increment(key, by=1):
    """Increment Counter ``key`` from outside any socket (an HTTP-like call)."""
    return await ainvoke(
        ActorRef.of("counter", key, mode="get_or_create"), CallAction("increment", [by])
    )


async def open_room(key="lobby", name="ann", **kwargs):
    comm = RivetCommunicator("chatRoom", [key], params={"name": name}, **kwargs)
    init = await comm.handshake()
    assert init["type"] == "init", init
    return comm, init


async def refused(comm):
    """Return (error frame, close code) of a refused connection."""
    frame = await comm.handshake()
    code = await comm.receive_close()
    await comm.disconnect()
    return frame, code


# -- connect ------------------------------------------------------------------------
async def test_connect_sends_init_and_persists_the_connection():
    comm = RivetCommunicator("chatRoom", ["lobby"], params={"name": "ann"})
    accepted, subprotocol = await comm.connect()
    assert (accepted, subprotocol) == (True, "rivet")
    init = await comm.receive_frame()
    assert init["type"] == "init"
    assert {"actor_id", "connection_id"} <= set(init)
    (row,) = await connection_rows()
    assert str(row["id"]) == init["connection_id"]
    assert await comm.call("whoami") == {
        "id": init["connection_id"],
        "params": {"name": "ann"},
        "state": {"name": "ann", "sent": 0},
    }
    assert (await actor_state("chatRoom", ["lobby"]))["log"] == [["connect", "ann"]]
    await comm.disconnect()


async def test_disconnect_runs_on_disconnect_and_deletes_the_row():
    ann, _ = await open_room(name="ann")
    bob, _ = await open_room(name="bob")
    await ann.subscribe("left")
    assert await ann.call("names") == ["ann", "bob"]
    await bob.disconnect()
    event = await ann.receive_event("left")
    assert event["args"] == ["bob"]
    assert await ann.call("names") == ["ann"]
    assert (await actor_state("chatRoom", ["lobby"]))["log"][-1] == [
        "disconnect",
        "bob",
    ]
    await ann.disconnect()
    assert await connection_rows() == []


async def test_connect_without_rivet_subprotocol_still_works():
    comm = RivetCommunicator("counter", ["plain"], subprotocols=[])
    accepted, subprotocol = await comm.connect()
    assert (accepted, subprotocol) == (True, None)
    assert (await comm.receive_frame())["type"] == "init"
    await comm.disconnect()


# -- actions ------------------------------------------------------------------------
async def test_action_response_matches_the_action_id():
    comm, _ = await open_room()
    first = await comm.send_action("send_message", "one")
    second = await comm.send_action("send_message", "two")
    assert await comm.wait_response(second) == 2
    assert await comm.wait_response(first) == 1
    await comm.disconnect()


async def test_actions_of_one_connection_run_in_the_order_sent():
    comm, _ = await open_room()
    slow = await comm.send_action("slow", 0.3, "first")
    fast = await comm.send_action("slow", 0, "second")
    frames = [await comm.receive_frame(), await comm.receive_frame()]
    assert [f["id"] for f in frames] == [slow, fast]
    log = (await actor_state("chatRoom", ["lobby"]))["log"]
    assert [entry for entry in log if entry[0] == "slow"] == [
        ["slow", "first"],
        ["slow", "second"],
    ]
    await comm.disconnect()


async def test_conn_state_changes_persist():
    comm, _ = await open_room()
    await comm.call("send_message", "a")
    await comm.call("send_message", "b")
    who = await comm.call("whoami")
    assert who["state"] == {"name": "ann", "sent": 2}
    await comm.disconnect()


async def test_action_errors_carry_the_action_id():
    comm, _ = await open_room()
    cases = [
        (("nope",), "actor", "action_not_found"),
        (("send_message",), "request", "invalid_args"),
        (("send_message", 5), "request", "invalid_args"),
    ]
    for args, group, code in cases:
        action_id = await comm.send_action(*args)
        frame = await comm.receive_frame()
        assert frame["type"] == "error"
        assert (frame["group"], frame["code"]) == (group, code)
        assert frame["action_id"] == action_id
    await comm.send_frame({"type": "action", "id": 9, "name": "echo", "args": "x"})
    frame = await comm.receive_frame()
    assert (frame["code"], frame["action_id"]) == ("invalid_args", 9)
    await comm.disconnect()


async def test_user_error_reaches_the_client_and_internal_errors_are_hidden():
    comm = RivetCommunicator("counter", ["errors"])
    await comm.handshake()
    action_id = await comm.send_action("add_note_then_fail", "x")
    frame = await comm.receive_frame()
    assert frame == {
        "type": "error",
        "group": "user",
        "code": "refused",
        "message": "refused on purpose",
        "metadata": {"text": "x"},
        "action_id": action_id,
    }
    action_id = await comm.send_action("crash")
    frame = await comm.receive_frame()
    assert (frame["group"], frame["code"]) == ("rivet", "internal_error")
    assert "secret" not in frame["message"]
    assert await comm.call("getCount") == 0
    await comm.disconnect()


async def test_unencodable_output_is_a_coded_error_for_that_action():
    comm, _ = await open_room()
    action_id = await comm.send_action("unencodable")
    frame = await comm.receive_frame()
    assert (frame["code"], frame["action_id"]) == ("invalid_output", action_id)
    assert frame["metadata"]["action"] == "unencodable"
    assert await comm.call("echo", 1) == 1
    await comm.disconnect()


# -- events -------------------------------------------------------------------------
async def test_subscribed_events_carry_seq_and_unsubscribe_stops_them():
    comm = RivetCommunicator("counter", ["events"])
    await comm.handshake()
    await comm.subscribe("changed")
    assert await comm.call("increment") == 1
    event = await comm.receive_event("changed")
    assert event == {"type": "event", "name": "changed", "args": [1], "seq": 1}
    await comm.unsubscribe("changed")
    await comm.call("increment")
    await comm.subscribe("changed")
    await comm.call("increment")
    assert (await comm.receive_event("changed"))["seq"] == 3
    assert await comm.receive_nothing(0.1)
    await comm.disconnect()


async def test_events_reach_only_subscribers():
    ann, _ = await open_room(name="ann")
    bob, _ = await open_room(name="bob")
    await ann.subscribe("newMessage")
    await bob.call("send_message", "hi")
    event = await ann.receive_event("newMessage")
    assert event["args"] == ["bob", "hi"]
    assert await bob.receive_nothing(0.1)
    await ann.disconnect()
    await bob.disconnect()


async def test_broadcast_from_outside_a_socket_reaches_subscribers():
    comm = RivetCommunicator("counter", ["outside"], subscribe="changed")
    await comm.handshake()
    await increment(["outside"], 5)
    assert (await comm.receive_event("changed"))["args"] == [5]
    await comm.disconnect()


async def test_subscriptions_are_saved_on_the_connection_row():
    comm = RivetCommunicator("counter", ["subs"], subscribe="a")
    await comm.handshake()
    await comm.subscribe("b")
    await comm.call("getCount")  # the save runs in the background

    async def saved():
        (row,) = await connection_rows()
        return row["subscriptions"] == ["a", "b"]

    await await_for(saved, what="the subscriptions saved on the row")
    await comm.disconnect()


async def test_conn_send_reaches_one_connection_without_subscription():
    ann, _ = await open_room(name="ann")
    bob, _ = await open_room(name="bob")
    assert await ann.call("whisper", "bob", "psst") == 1
    frame = await bob.receive_event("whisper")
    assert frame == {"type": "event", "name": "whisper", "args": ["ann", "psst"]}
    assert await ann.receive_nothing(0.1)
    await ann.disconnect()
    await bob.disconnect()


async def test_conn_disconnect_closes_the_socket_normally():
    ann, _ = await open_room(name="ann")
    bob, _ = await open_room(name="bob")
    assert await ann.call("kick", "bob") == 1
    assert await bob.receive_close() == 1000
    await bob.disconnect()
    assert await ann.call("names") == ["ann"]
    await ann.disconnect()


async def test_lost_live_event_is_filled_from_the_log(monkeypatch):
    comm = RivetCommunicator("counter", ["gap"], subscribe="changed")
    await comm.handshake()
    real_publish = events.publish
    monkeypatch.setattr(events, "publish", lambda actor_id, messages: None)
    await increment(["gap"])  # seq 1: committed, never published
    monkeypatch.setattr(events, "publish", real_publish)
    await increment(["gap"])  # seq 2 arrives live: the gap is read from the log
    assert (await comm.receive_event())["seq"] == 1
    assert (await comm.receive_event())["seq"] == 2
    await comm.disconnect()


async def test_duplicate_and_late_live_events_are_dropped():
    comm = RivetCommunicator("counter", ["dups"], subscribe="changed")
    init = await comm.handshake()
    await increment(["dups"])
    first = await comm.receive_event()
    layer = get_channel_layer()
    group = events.actor_group(init["actor_id"])
    await layer.group_send(
        group,
        {
            "type": "rivet.events",
            "actor": group.rsplit(".", 1)[1],
            "last": 1,
            "events": [[1, "changed", cbor2.dumps([1])]],
        },
    )
    await increment(["dups"])
    assert first["seq"] == 1
    assert (await comm.receive_event())["seq"] == 2
    assert await comm.receive_nothing(0.1)
    await comm.disconnect()


async def test_events_committed_while_joining_the_group_are_not_lost(monkeypatch):
    layer = get_channel_layer()
    real_group_add = layer.group_add

    async def racing_group_add(group, channel):
        # An event commits after the connect but before this socket joins.
        await increment(["race"])
        await real_group_add(group, channel)

    await increment(["race"])
    monkeypatch.setattr(layer, "group_add", racing_group_add)
    comm = RivetCommunicator("counter", ["race"], subscribe="changed")
    init = await comm.handshake()
    assert init["seq"] == 1
    event = await comm.receive_event()
    monkeypatch.setattr(layer, "group_add", real_group_add)
    assert (event["seq"], event["args"]) == (2, [2])
    await increment(["race"])
    assert (await comm.receive_event())["seq"] == 3
    assert await comm.receive_nothing(0.1)
    await comm.disconnect()


# -- replay -------------------------------------------------------------------------
async def test_since_replays_missed_events_after_subscribe_then_live_ones():
    for _ in range(4):
        await increment(["replay"])
    comm = RivetCommunicator("counter", ["replay"], since=2)
    init = await comm.handshake()
    assert init["seq"] == 4
    await increment(["replay"])  # seq 5: live, before the subscription
    await comm.subscribe("changed")
    await increment(["replay"])  # seq 6
    seqs = [(await comm.receive_event())["seq"] for _ in range(4)]
    assert seqs == [3, 4, 5, 6]
    assert await comm.receive_nothing(0.1)
    await comm.disconnect()


async def test_since_replay_only_covers_the_subscribed_names():
    comm, init = await open_room(key="names-replay")
    await comm.call("send_message", "one")
    await comm.disconnect()  # broadcasts "left" too
    again = RivetCommunicator(
        "chatRoom", ["names-replay"], params={"name": "ann"}, since=0
    )
    await again.handshake()
    await again.subscribe("newMessage")
    event = await again.receive_event()
    assert (event["name"], event["args"]) == ("newMessage", ["ann", "one"])
    assert await again.receive_nothing(0.1)
    await again.disconnect()


async def test_subscribe_star_replays_everything_right_after_init():
    await increment(["star"])
    await increment(["star"])
    comm = RivetCommunicator("counter", ["star"], since=0, subscribe="*")
    await comm.handshake()
    assert [(await comm.receive_event())["seq"] for _ in range(2)] == [1, 2]
    await increment(["star"])
    assert (await comm.receive_event())["seq"] == 3
    await comm.disconnect()


async def test_truncated_log_sends_an_error_first_then_what_remains():
    with override_settings(RIVET={"EVENT_LOG_SIZE": 3}):
        for _ in range(6):
            await increment(["trunc"])
        comm = RivetCommunicator("counter", ["trunc"], since=1, subscribe="*")
        await comm.handshake()
        error = await comm.receive_frame()
        assert error["type"] == "error"
        assert (error["group"], error["code"]) == ("actor", "event_log_truncated")
        assert "action_id" not in error
        assert error["metadata"] == {"since": 1, "oldest": 4, "latest": 6}
        assert [(await comm.receive_event())["seq"] for _ in range(3)] == [4, 5, 6]
        await comm.disconnect()


async def test_since_beyond_the_head_is_reported_as_truncated():
    await increment(["ahead"])
    comm = RivetCommunicator("counter", ["ahead"], since=50)
    await comm.handshake()
    error = await comm.receive_frame()
    assert error["code"] == "event_log_truncated"
    await comm.disconnect()


# -- CBOR -----------------------------------------------------------------------------
async def test_cbor_encoding_uses_binary_frames_and_keeps_bytes():
    comm = RivetCommunicator("chatRoom", ["cbor"], encoding="cbor")
    await comm.handshake()
    assert await comm.call("echo", b"\x00\xff") == b"\x00\xff"
    await comm.send_to(bytes_data=cbor2.dumps({"type": "action", "id": 1}))
    frame = await comm.receive_frame()
    assert (frame["code"], frame["action_id"]) == ("malformed", 1)
    await comm.send_to(bytes_data=b"\xff\xff")
    assert (await comm.receive_frame())["code"] == "malformed"
    await comm.disconnect()


# -- bad input: each gets its coded error and changes nothing --------------------
async def test_malformed_and_unknown_frames_get_connection_level_errors():
    comm, _ = await open_room()
    before = await db_counts()
    bad_frames = [
        ("{not json", "malformed"),
        ("[1, 2]", "malformed"),
        ('{"type": "launch"}', "malformed"),
        ('{"type": "action", "name": "send_message", "args": ["x"]}', "malformed"),
        ('{"type": "action", "id": true, "name": "send_message"}', "malformed"),
        ('{"type": "subscribe"}', "malformed"),
        ('{"type": "subscribe", "event": ""}', "malformed"),
        ("NaN", "malformed"),
    ]
    for text, code in bad_frames:
        await comm.send_to(text_data=text)
        frame = await comm.receive_frame()
        assert frame["type"] == "error", text
        assert (frame["group"], frame["code"]) == ("request", code), text
        assert "action_id" not in frame
    assert await db_counts() == before
    assert await comm.call("names") == ["ann"]  # still usable
    await comm.disconnect()


async def test_oversized_frame_is_refused_before_decoding():
    with override_settings(RIVET={"MAX_INCOMING_MESSAGE_BYTES": 100}):
        comm, _ = await open_room()
        before = await db_counts()
        await comm.send_frame(
            {"type": "action", "id": 1, "name": "send_message", "args": ["x" * 200]}
        )
        frame = await comm.receive_frame()
        assert (frame["group"], frame["code"]) == ("request", "too_large")
        assert "action_id" not in frame
        assert await db_counts() == before
        await comm.disconnect()


async def test_oversized_response_and_event_become_errors():
    with override_settings(RIVET={"MAX_OUTGOING_MESSAGE_BYTES": 1000}):
        comm, _ = await open_room(subscribe="*")
        await comm.receive_event("joined")
        action_id = await comm.send_action("big", 5000)
        frame = await comm.receive_frame()
        assert (frame["code"], frame["action_id"]) == ("too_large", action_id)
        assert await comm.call("shout", 5000) == 5000
        frame = await comm.receive_frame()
        assert frame["code"] == "too_large"
        assert frame["metadata"]["event"] == "big"
        await comm.disconnect()


@pytest.mark.parametrize(
    ("subprotocols", "code"),
    [
        (["rivet", "rivet_conn_params.***"], "malformed"),
        (
            ["rivet", "rivet_conn_params." + base64.urlsafe_b64encode(b"{x").decode()],
            "malformed",
        ),  # fmt: skip
        (["rivet", "rivet_conn_params." + "A" * 6000], "too_large"),
        (["rivet", "rivet_conn_params.e30", "rivet_conn_params.e30"], "malformed"),
    ],
)
async def test_bad_conn_params_are_refused_with_4400(subprotocols, code):
    before = await db_counts()
    comm = RivetCommunicator("chatRoom", ["params"], subprotocols=subprotocols)
    frame, close = await refused(comm)
    assert (frame["type"], frame["group"], frame["code"]) == ("error", "request", code)
    assert close == 4400
    assert await db_counts() == before


async def test_conn_params_over_4_kib_are_refused():
    comm = RivetCommunicator("chatRoom", ["params"], params={"name": "x" * 5000})
    frame, close = await refused(comm)
    assert (frame["code"], close) == ("too_large", 4400)


async def test_on_auth_refusal_closes_4403_and_creates_nothing():
    before = await db_counts()
    comm = RivetCommunicator("chatRoom", ["private"], params={"name": "eve"})
    frame, close = await refused(comm)
    assert (frame["group"], frame["code"], close) == ("user", "token_required", 4403)
    assert await db_counts() == before
    ok = RivetCommunicator(
        "chatRoom", ["private"], params={"name": "ann", "token": "secret"}
    )
    assert (await ok.handshake())["type"] == "init"
    await ok.disconnect()


async def test_on_before_connect_refusal_keeps_the_user_error():
    before = await db_counts()
    comm = RivetCommunicator("chatRoom", ["lobby"], params={"name": "banned"})
    frame, close = await refused(comm)
    assert (frame["group"], frame["code"], frame["message"]) == (
        "user",
        "banned",
        "You are banned",
    )
    assert close == 4403
    assert await db_counts() == before


@pytest.mark.parametrize(
    ("name", "kwargs", "group", "code"),
    [
        ("noSuchActor", {}, "actor", "not_found"),
        ("counter", {"encoding": "xml"}, "request", "invalid_encoding"),
        ("counter", {"query": {"create": "false"}}, "actor", "not_found"),
        ("counter", {"query": {"create": "maybe"}}, "request", "malformed"),
        ("counter", {"query": {"since": "-1"}}, "request", "malformed"),
        ("counter", {"actor_id": "not-a-uuid"}, "actor", "not_found"),
        (
            "counter",
            {"actor_id": "6f1c2d7e-0000-4000-8000-000000000000"},
            "actor",
            "not_found",
        ),  # fmt: skip
        ("counter", {"key": ["k" * 200]}, "actor", "invalid_key"),
    ],
)
async def test_bad_connect_requests_are_refused_with_4400(name, kwargs, group, code):
    before = await db_counts()
    kwargs.setdefault("key", ["bad"])
    frame, close = await refused(RivetCommunicator(name, **kwargs))
    assert (frame["group"], frame["code"]) == (group, code)
    assert close == 4400
    assert await db_counts() == before


async def test_actor_id_of_another_class_is_not_found():
    comm = RivetCommunicator("counter", ["by-id"])
    init = await comm.handshake()
    await comm.disconnect()
    by_id = RivetCommunicator("counter", actor_id=init["actor_id"])
    assert (await by_id.handshake())["actor_id"] == init["actor_id"]
    await by_id.disconnect()
    wrong = RivetCommunicator("chatRoom", actor_id=init["actor_id"])
    frame, close = await refused(wrong)
    assert (frame["code"], close) == ("not_found", 4400)


# -- origin ---------------------------------------------------------------------------
# The communicator's handshake says Host: testserver over ws:// (issue 17,
# finding 6: same-origin like Django's CSRF check, not "any ALLOWED_HOSTS").
@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True),
        ("http://testserver", True),
        ("HTTP://TestServer:80", True),
        ("https://testserver", False),  # another scheme
        ("http://testserver:8000", False),  # another port
        ("http://localhost", False),  # in ALLOWED_HOSTS, but another site
        ("http://127.0.0.1:9000", False),
        ("https://evil.example", False),
        ("null", False),
    ],
)
async def test_origin_must_be_the_servers_own_by_default(origin, allowed):
    before = await db_counts()
    comm = RivetCommunicator("counter", ["origin"], origin=origin)
    frame = await comm.handshake()
    if allowed:
        assert frame["type"] == "init"
        await comm.disconnect()
        return
    assert (frame["group"], frame["code"]) == ("actor", "forbidden")
    assert await comm.receive_close() == 4403
    await comm.disconnect()
    assert await db_counts() == before


async def test_same_origin_needs_a_host_in_allowed_hosts():
    # DNS rebinding: evil.example resolving to this server is same-origin
    # with itself, but Django refuses its Host.
    headers = [(b"host", b"evil.example")]
    comm = RivetCommunicator(
        "counter", ["origin"], origin="http://evil.example", headers=headers
    )
    assert (await comm.handshake())["code"] == "forbidden"
    await comm.disconnect()


async def test_same_origin_follows_djangos_proxy_settings():
    headers = [
        (b"host", b"internal:8000"),
        (b"x-forwarded-host", b"app.example.com"),
        (b"x-forwarded-proto", b"https"),
    ]
    with override_settings(
        ALLOWED_HOSTS=["app.example.com"],
        USE_X_FORWARDED_HOST=True,
        SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"),
    ):
        comm = RivetCommunicator(
            "counter", ["proxy"], origin="https://app.example.com", headers=headers
        )
        assert (await comm.handshake())["type"] == "init"
        await comm.disconnect()
        plain = RivetCommunicator(
            "counter", ["proxy"], origin="http://app.example.com", headers=headers
        )
        assert (await plain.handshake())["code"] == "forbidden"
        await plain.disconnect()


async def test_csrf_trusted_origins_are_admitted_like_django_does():
    trusted = ["https://app.example.com", "https://*.partner.example"]
    with override_settings(CSRF_TRUSTED_ORIGINS=trusted):
        for origin, ok in [
            ("https://app.example.com", True),
            ("https://a.partner.example", True),
            ("https://partner.example", True),
            ("http://a.partner.example", False),
            ("https://other.example", False),
        ]:
            comm = RivetCommunicator("counter", ["csrf"], origin=origin)
            frame = await comm.handshake()
            assert (frame["type"] == "init") is ok, origin
            await comm.disconnect()


async def test_allowed_origins_setting_lists_more_exact_origins():
    settings = {"ALLOWED_ORIGINS": ["https://app.example.com", "http://localhost:3000"]}
    with override_settings(RIVET=settings):
        for origin, ok in [
            ("https://app.example.com", True),
            ("https://APP.example.com:443", True),
            ("http://localhost:3000", True),
            ("http://testserver", True),  # same origin stays allowed
            ("http://app.example.com", False),
            ("https://sub.app.example.com", False),
        ]:
            comm = RivetCommunicator("counter", ["origins"], origin=origin)
            frame = await comm.handshake()
            assert (frame["type"] == "init") is ok, origin
            await comm.disconnect()
    with override_settings(RIVET={"ALLOWED_ORIGINS": ["*"]}):
        comm = RivetCommunicator("counter", ["origins"], origin="https://any.example")
        assert (await comm.handshake())["type"] == "init"
        await comm.disconnect()


# -- robustness -------------------------------------------------------------------
async def test_frames_after_a_refusal_are_ignored():
    comm = RivetCommunicator("chatRoom", ["private"])
    assert (await comm.handshake())["code"] == "token_required"
    await comm.send_to(text_data='{"type": "action", "id": 1, "name": "names"}')
    assert await comm.receive_close() == 4403
    await comm.disconnect()


async def test_closing_with_actions_queued_runs_on_disconnect_once():
    comm, _ = await open_room(key="queued")
    await comm.send_action("slow", 0.2, "running")
    for i in range(5):
        await comm.send_action("slow", 0, f"queued-{i}")
    await asyncio.sleep(0.05)
    await comm.disconnect()
    log = (await actor_state("chatRoom", ["queued"]))["log"]
    assert ["slow", "running"] in log
    assert log.count(["disconnect", "ann"]) == 1
    assert log[-1] == ["disconnect", "ann"]
    assert await connection_rows() == []


async def test_destroying_the_actor_closes_its_sockets():
    from django_rivet import actors

    comm = RivetCommunicator("counter", ["doomed"])
    init = await comm.handshake()
    await sync_to_async(lambda: actors.get_by_id(init["actor_id"]).destroy())()
    assert await comm.receive_close() == 1000
    await comm.disconnect()
    assert await connection_rows() == []


# -- the edges (issues 12 and 17) ----------------------------------------------------
@pytest.mark.parametrize("since", ["²", "٣", "1" * 5000, "-1", "1e3", "9" * 19])
async def test_a_bad_since_is_a_coded_refusal_not_an_internal_error(since, caplog):
    comm = RivetCommunicator("counter", ["since"], query={"since": since})
    frame = await comm.handshake()
    assert (frame["group"], frame["code"]) == ("request", "malformed")
    assert await comm.receive_close() == 4400
    await comm.disconnect()
    assert "internal error" not in caplog.text


async def test_refusals_log_the_path_as_a_repr(caplog):
    caplog.set_level("INFO", logger="django_rivet")
    comm = RivetCommunicator("placeholder", [])
    # What daphne puts in the scope for /rivet/actors/no%0asuch.../connect.
    comm.scope["path"] = "/rivet/actors/no\nsuch actor=forged/connect"
    assert (await comm.handshake())["code"] == "not_found"
    await comm.disconnect()
    refusals = [r for r in caplog.records if "refused" in r.getMessage()]
    assert refusals
    assert all("\n" not in r.getMessage() for r in refusals)
    assert "no\\nsuch" in refusals[0].getMessage()


async def test_frame_errors_answer_the_action_when_its_id_can_be_read():
    comm = RivetCommunicator("ledger", ["frames"])
    assert (await comm.handshake())["type"] == "init"
    await comm.send_to(
        text_data='{"type": "action", "id": 7, "name": "record", "args": [NaN]}'
    )
    error = await comm.receive_frame()
    assert (error["code"], error["action_id"]) == ("malformed", 7)
    deep = "[" * 200 + "]" * 200
    await comm.send_to(
        text_data=f'{{"type": "action", "id": 8, "name": "keep", "args": [{deep}]}}'
    )
    error = await comm.receive_frame()
    assert (error["code"], error["action_id"]) == ("malformed", 8)
    await comm.send_to(text_data="{not json")
    error = await comm.receive_frame()
    assert error["code"] == "malformed" and "action_id" not in error
    assert await comm.call("record", "still open") == 1  # the connection lives
    await comm.disconnect()


async def test_an_oversized_frame_is_answered_and_closed_with_4413():
    comm = RivetCommunicator("ledger", ["big"])
    init = await comm.handshake()
    assert init["max_frame_bytes"] == 65536
    await comm.send_action("record", "x" * 70_000)
    error = await comm.receive_frame()
    assert (error["code"], error["metadata"]["limit"]) == ("too_large", 65536)
    assert await comm.receive_close() == 4413
    await comm.disconnect()


async def test_connections_per_actor_are_bounded_with_a_coded_refusal():
    with override_settings(RIVET={"MAX_CONNECTIONS_PER_ACTOR": 2}):
        first = RivetCommunicator("ledger", ["crowd"])
        second = RivetCommunicator("ledger", ["crowd"])
        assert (await first.handshake())["type"] == "init"
        assert (await second.handshake())["type"] == "init"
        third = RivetCommunicator("ledger", ["crowd"])
        frame, code = await refused(third)
        assert (frame["code"], code) == ("too_many_connections", 4429)
        assert frame["metadata"] == {"limit": 2}
        other = RivetCommunicator("ledger", ["other-actor"])
        assert (await other.handshake())["type"] == "init"  # per actor
        await other.disconnect()
        await first.disconnect()
        again = RivetCommunicator("ledger", ["crowd"])
        assert (await again.handshake())["type"] == "init"  # a slot came free
        await again.disconnect()
        await second.disconnect()


async def test_internal_errors_while_connecting_close_with_4500():
    comm = RivetCommunicator("ledger", ["boom"], params={"explode": True})
    frame, code = await refused(comm)
    assert (frame["code"], code) == ("internal_error", 4500)


async def test_an_expired_connection_is_closed_with_4410():
    comm = RivetCommunicator("ledger", ["expired"])
    await comm.handshake()
    await sync_to_async(Connection.objects.all().delete)()
    action_id = await comm.send_action("entries")
    error = await comm.receive_frame()
    assert (error["code"], error["action_id"]) == ("connection_expired", action_id)
    assert await comm.receive_close() == 4410
    await comm.disconnect()


# pg: PostgreSQL text cannot hold NUL; the name must be refused, not stored.
@pytest.mark.pg
@pytest.mark.parametrize("event", ["a\x00b", "\x00"])
async def test_event_names_with_nul_are_refused(event):
    comm = RivetCommunicator("ledger", ["nul-event"])
    await comm.handshake()
    await comm.subscribe(event)
    error = await comm.receive_frame()
    assert error["code"] == "malformed"
    await comm.disconnect()
    refused = RivetCommunicator("ledger", ["nul-event"], subscribe=[event])
    assert (await refused.handshake())["code"] == "malformed"
    await refused.disconnect()


async def test_frames_past_the_bound_during_a_since_replay_are_refused_at_once(
    monkeypatch,
):
    # A replay that never finishes (a client that does not read its events):
    # frames must still be taken, and refused past the bound (issue 40).
    await increment(["replay-flood"])
    stuck = asyncio.Event()

    async def replay(stream, since, names):
        await stuck.wait()

    monkeypatch.setattr(Stream, "replay", replay)
    with override_settings(RIVET={"MAX_PENDING_FRAMES": 3}):
        comm = RivetCommunicator(
            "counter", ["replay-flood"], since=0, subscribe="changed"
        )
        assert (await comm.handshake())["type"] == "init"
        for _ in range(4):
            await comm.send_action("increment")
        error = await comm.receive_frame()
        assert (error["code"], error["metadata"]["max_frames"]) == (
            "too_many_frames",
            3,
        )
        assert await comm.receive_close() == 4429
        stuck.set()  # the replay ends: the connection's cleanup awaits it
        await comm.disconnect()
    # Refused frames were not run.
    assert await actor_state("counter", ["replay-flood"]) == {"count": 1}
