import threading
import time

import pytest
from django.db import connection, transaction
from django_rivet import UserError, actors
from django_rivet.testing import RivetCommunicator

from chat.models import ChatMessage

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_message_reaches_the_others_the_state_and_the_history():
    ann = RivetCommunicator("chatRoom", ["acme", "lobby"], params={"nickname": "ann"})
    bob = RivetCommunicator("chatRoom", ["acme", "lobby"], params={"nickname": "bob"})
    assert (await ann.handshake())["type"] == "init"
    assert (await bob.handshake())["type"] == "init"
    await bob.subscribe("newMessage")
    await bob.call("recent")  # the subscription is in place once this returns

    sent = await ann.call("send_message", "  hello  ")

    event = await bob.receive_event("newMessage")
    assert event["args"] == [sent]
    assert (sent["nickname"], sent["text"]) == ("ann", "hello")
    assert await bob.call("recent") == [sent]
    row = await ChatMessage.objects.aget(pk=sent["id"])
    assert (row.org, row.room, row.nickname, row.text) == (
        "acme",
        "lobby",
        "ann",
        "hello",
    )
    await ann.disconnect()
    await bob.disconnect()


async def test_joining_without_a_nickname_is_refused():
    anonymous = RivetCommunicator(
        "chatRoom", ["acme", "lobby"], params={"nickname": " "}
    )
    frame = await anonymous.handshake()
    assert (frame["type"], frame["group"], frame["code"]) == (
        "error",
        "user",
        "nickname_required",
    )
    assert await anonymous.receive_close() == 4403


def test_a_refused_message_leaves_neither_state_nor_history():
    room = actors.get_or_create("chatRoom", ["acme", "quiet"])
    room.call("post", "ann", "first")
    with pytest.raises(UserError) as refused:
        room.call("post", "ann", "x" * 501)
    assert refused.value.code == "message_too_long"
    assert [m["text"] for m in room.call("recent")] == ["first"]
    assert list(ChatMessage.objects.values_list("text", flat=True)) == ["first"]


def test_the_state_keeps_the_last_fifty_messages_and_the_model_all():
    room = actors.get_or_create("chatRoom", ["acme", "busy"])
    for number in range(55):
        room.call("post", "bot", f"message {number}")
    recent = room.call("recent")
    assert len(recent) == 50
    assert recent[0]["text"] == "message 5"
    assert ChatMessage.objects.filter(room="busy").count() == 55


def test_http_callers_may_read_but_not_post(client):
    url = "/rivet/actors/chatRoom/actions/{}?key=acme&key=general"
    post = client.post(
        url.format("post"), {"args": ["eve", "hi"]}, content_type="application/json"
    )
    assert post.status_code == 403
    assert post.json()["code"] == "forbidden"
    read = client.post(url.format("recent"), {}, content_type="application/json")
    assert read.json() == {"output": []}
    assert not ChatMessage.objects.exists()


def test_server_side_code_posts_without_on_auth():
    room = actors.get_or_create("chatRoom", ["acme", "general"])
    assert room.call("post", "digest", "hello")["nickname"] == "digest"


def test_a_call_waits_for_another_threads_transaction():
    # The test database is SQLite in memory, whose shared cache fails a
    # statement at once on a table another connection is writing ("database
    # table is locked"): a socket saving its subscriptions while the room
    # answered a call failed that way. django-rivet makes it wait, as SQLite
    # waits on a database file.
    room = actors.get_or_create("chatRoom", ["acme", "lobby"])
    writing = threading.Event()

    def write_and_hold():
        try:
            with transaction.atomic():
                ChatMessage.objects.create(
                    org="acme", room="other", nickname="eve", text="hi"
                )
                writing.set()
                time.sleep(0.3)  # the call below starts meanwhile
        finally:
            connection.close()

    writer = threading.Thread(target=write_and_hold)
    writer.start()
    assert writing.wait(10)
    sent = room.call("post", "ann", "hello")
    writer.join(10)
    assert [m["text"] for m in room.call("recent")] == ["hello"]
    assert sorted(ChatMessage.objects.values_list("text", flat=True)) == [
        "hello",
        "hi",
    ]
    assert sent["nickname"] == "ann"
