"""Read-only actions: no lock, the latest committed state, nothing written."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import sync_to_async

from django_rivet import Actor, ActorReadOnly, UserError, action, actors, queue_handler
from django_rivet.actors import cache
from django_rivet.models import Actor as ActorRow
from django_rivet.models import (
    ActorEvent,
    ActorKV,
    CronJob,
    QueueMessage,
    Schedule,
    Workflow,
)
from django_rivet.testing import register_temporarily
from tests.support.threads import closing
from tests.testapp.models import Note

# pg: what a read sees beside a write depends on the database's locks.
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

READERS = 20


class Board(Actor):
    """A score many read while a few write."""

    name = "board"
    initial_state = {"score": 0}
    # Test-only synchronization, set per test.
    writing = threading.Event()
    release = threading.Event()
    barrier: threading.Barrier | None = None
    times: list = []
    wakes = 0

    def on_wake(self, ctx):
        type(self).wakes += 1

    @action
    def add(self, ctx, points: int = 1):
        ctx.state["score"] += points
        return ctx.state["score"]

    @action(readonly=True)
    def get(self, ctx):
        return ctx.state["score"]

    @action
    def hold(self, ctx, points: int, fail: bool):
        """Write, then hold the lock until released; maybe roll back."""
        ctx.state["score"] += points
        self.times.append(("write", "start", time.monotonic()))
        self.writing.set()
        assert self.release.wait(30)
        self.times.append(("write", "end", time.monotonic()))
        if fail:
            raise UserError("rolled back on purpose", code="rollback")
        return ctx.state["score"]

    @action(readonly=True)
    def watch(self, ctx):
        """Record when it ran; meet every other reader inside the action."""
        self.times.append(("read", "start", time.monotonic()))
        assert self.barrier is not None
        self.barrier.wait(30)
        score = ctx.state["score"]
        self.times.append(("read", "end", time.monotonic()))
        return score

    @action(readonly=True)
    def write(self, ctx, kind: str):
        """Try one kind of write (all refused)."""
        WRITES[kind](ctx)
        return "wrote"

    @action(readonly=True)
    def read_kv(self, ctx, key: str):
        return ctx.kv.get(key)

    @queue_handler("jobs")
    def on_job(self, ctx, message):
        return None


class Other(Actor):
    name = "other"
    initial_state = {"n": 0}

    @action
    def bump(self, ctx):
        ctx.state["n"] += 1

    @action(readonly=True)
    def peek(self, ctx):
        return ctx.state["n"]


def _state(ctx):
    ctx.state = {"score": 100}


def _mutate(ctx):
    ctx.state["score"] = 100


WRITES = {
    "state_assign": _state,
    "state_mutate": _mutate,
    "kv": lambda ctx: ctx.kv.put("k", 1),
    "kv_delete": lambda ctx: ctx.kv.delete("k"),
    "schedule": lambda ctx: ctx.schedule.after(60, "add"),
    "cron": lambda ctx: ctx.cron.every("tick", 60, "add"),
    "queue": lambda ctx: ctx.queue.send("jobs", {"a": 1}),
    "broadcast": lambda ctx: ctx.broadcast("changed", 1),
    "workflow": lambda ctx: ctx.workflows.start("greet", {"name": "x"}),
    "after_commit": lambda ctx: ctx.after_commit(print),
    "destroy": lambda ctx: ctx.destroy(),
    "orm": lambda ctx: Note.objects.create(text="from a read"),
    "other_actor_write": lambda ctx: ctx.actors.get_or_create("other", "o").call(
        "bump"
    ),
}


@pytest.fixture
def board():
    Board.writing.clear()
    Board.release.clear()
    Board.times = []
    Board.wakes = 0
    with register_temporarily(Board, Other):
        handle = actors.get_or_create("board", "b")
        handle.call("add", 1)
        yield handle


def test_reads_run_together_while_a_write_holds_the_lock(board):
    Board.barrier = threading.Barrier(READERS)
    with ThreadPoolExecutor(READERS + 1) as pool:
        writer = pool.submit(closing(board.call), "hold", 10, False)
        assert Board.writing.wait(30)
        readers = [pool.submit(closing(board.call), "watch") for _ in range(READERS)]
        scores = [reader.result(60) for reader in readers]
        Board.release.set()
        assert writer.result(60) == 11
    # Every read finished while the write held the lock (its start and end
    # bracket them all), and all of them were inside the action at once (the
    # barrier only opens for READERS threads waiting together).
    write_start = next(
        t for who, what, t in Board.times if (who, what) == ("write", "start")
    )
    write_end = next(
        t for who, what, t in Board.times if (who, what) == ("write", "end")
    )
    read_times = [t for who, _, t in Board.times if who == "read"]
    assert len(read_times) == 2 * READERS
    assert all(write_start < t < write_end for t in read_times)
    # They saw the committed state, not the write's.
    assert scores == [1] * READERS
    assert board.call("get") == 11


def test_a_read_never_sees_a_write_that_rolls_back(board):
    with ThreadPoolExecutor(1) as pool:
        writer = pool.submit(closing(board.call), "hold", 500, True)
        assert Board.writing.wait(30)
        during = board.call("get")
        Board.release.set()
        with pytest.raises(UserError):
            writer.result(60)
    assert during == 1
    assert board.call("get") == 1
    assert ActorRow.objects.get(name="board").decoded_state() == {"score": 1}


def test_a_read_sees_the_latest_commit_of_another_process():
    with register_temporarily(Board, Other):
        handle = actors.get_or_create("board", "fresh")
        assert handle.call("get") == 0
        # Another process commits a write: this one's cached state is stale.
        ActorRow.objects.filter(name="board").update(
            state=b"\xa1escore\x18\x2a", version=99
        )
        assert handle.call("get") == 42


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_every_kind_of_write_in_a_read_is_refused_and_leaves_nothing(board, kind):
    before = ActorRow.objects.get(name="board")
    with pytest.raises(ActorReadOnly) as raised:
        board.call("write", kind)
    assert raised.value.code == "readonly"
    after = ActorRow.objects.get(name="board")
    assert (after.version, after.decoded_state()) == (before.version, {"score": 1})
    assert not ActorKV.objects.exists()
    assert not Schedule.objects.exists()
    assert not CronJob.objects.exists()
    assert not QueueMessage.objects.exists()
    assert not Workflow.objects.exists()
    assert not ActorEvent.objects.exists()
    assert not Note.objects.exists()
    assert not ActorRow.objects.filter(name="other").exists()
    # The actor keeps working, reads and writes.
    assert board.call("add", 1) == 2
    assert board.call("get") == 2


def test_a_read_calls_other_reads(board):
    with register_temporarily(Board, Other):
        actors.get_or_create("other", "o").call("bump")

        class Reader(Actor):
            name = "reader"

            @action(readonly=True)
            def both(self, ctx):
                other = ctx.actors.get("other", "o").call("peek")
                return [ctx.state, other]

        with register_temporarily(Reader):
            assert actors.get_or_create("reader").call("both") == [None, 1]


def test_a_read_reads_kv(board):
    board_id = board.actor_id
    from django_rivet.actors.kv import ActorKVStore

    ActorKVStore(board_id).put("k", {"v": 1})
    assert board.call("read_kv", "k") == {"v": 1}


def test_the_first_read_loads_the_actor_once_then_takes_no_lock(board):
    cache.clear()
    Board.wakes = 0
    assert board.call("get") == 1
    assert board.call("get") == 1
    assert Board.wakes == 1


def test_a_first_read_creates_the_actor_under_the_lock():
    with register_temporarily(Board, Other):
        handle = actors.get_or_create("board", "new")
        ActorRow.objects.all().delete()
        cache.clear()
        assert handle.call("get") == 0
        assert ActorRow.objects.filter(name="board").count() == 1


async def test_async_reads_do_not_queue_behind_a_write(board):
    loop_writer = sync_to_async(closing(board.call), thread_sensitive=False)
    import asyncio

    writer = asyncio.ensure_future(loop_writer("hold", 5, False))
    await sync_to_async(Board.writing.wait, thread_sensitive=False)(30)
    # acall goes through the lanes: the read must not wait for the write.
    assert await board.acall("get") == 1
    Board.release.set()
    assert await writer == 6
    assert await board.acall("get") == 6


# -- every entry point: HTTP, both WebSocket flavours, the RivetKit gateway ----------
def doc_row():
    return ActorRow.objects.get(name="doc")


def test_over_http_a_read_answers_and_a_write_in_it_is_refused():
    from django.test import Client

    client = Client()
    url = "/rivet/actors/doc/actions/{}?key=h"
    note = client.post(
        url.format("note"), {"args": ["a"]}, content_type="application/json"
    )
    assert note.json() == {"output": 1}
    version = doc_row().version
    read = client.post(
        url.format("stats"), {"args": []}, content_type="application/json"
    )
    assert read.json() == {"output": {"updates": 0, "caller": None}}
    refused = client.post(
        url.format("scribble"), {"args": []}, content_type="application/json"
    )
    assert (refused.status_code, refused.json()["code"]) == (500, "readonly")
    gateway = client.post(
        "/rivet/gateway/doc/action/stats?rvt-method=get&rvt-key=h",
        '{"args": []}',
        content_type="application/json",
        headers={"x-rivet-encoding": "json"},
    )
    assert gateway.json() == {"output": {"updates": 0, "caller": None}}
    assert (doc_row().version, doc_row().decoded_state()["texts"]) == (version, ["a"])


async def test_over_both_websocket_flavours_a_read_sees_its_connection():
    import json
    from urllib.parse import quote

    from channels.testing import WebsocketCommunicator

    from django_rivet.testing import RivetCommunicator, websocket_application

    own = RivetCommunicator("doc", ["w"], params={"name": "ann"})
    await own.handshake()
    assert await own.call("stats") == {"updates": 0, "caller": "ann"}
    with pytest.raises(ActorReadOnly):
        await own.call("scribble")
    await own.disconnect()

    params = quote(json.dumps({"name": "bob"}), safe="")
    kit = WebsocketCommunicator(
        websocket_application(),
        "/rivet/gateway/doc/connect?rvt-method=get&rvt-key=w",
        subprotocols=["rivet", "rivet_encoding.json", f"rivet_conn_params.{params}"],
    )
    assert (await kit.connect(10))[0]
    init = json.loads(await kit.receive_from(10))
    assert init["body"]["tag"] == "Init"
    for action_id, name in (("1", "stats"), ("2", "scribble")):
        request = {"id": ["$BigInt", action_id], "name": name, "args": []}
        await kit.send_to(
            text_data=json.dumps({"body": {"tag": "ActionRequest", "val": request}})
        )
    answer = json.loads(await kit.receive_from(10))["body"]
    assert answer["tag"] == "ActionResponse"
    assert answer["val"]["output"] == {"updates": 0, "caller": "bob"}
    error = json.loads(await kit.receive_from(10))["body"]
    assert (error["tag"], error["val"]["code"]) == ("Error", "readonly")
    await kit.disconnect()
    texts = await sync_to_async(lambda: doc_row().decoded_state()["texts"])()
    assert texts == []


async def test_many_async_reads_beside_a_write_are_answered_in_rounds(
    board, monkeypatch
):
    import asyncio

    from django_rivet.actors import lanes

    batches = []
    run_reads = lanes._run_reads

    def recorded(batch):
        batches.append(len(batch))
        return run_reads(batch)

    monkeypatch.setattr(lanes, "_run_reads", recorded)

    writer = asyncio.ensure_future(
        sync_to_async(closing(board.call), thread_sensitive=False)("hold", 5, False)
    )
    await sync_to_async(Board.writing.wait, thread_sensitive=False)(30)
    # More reads at once than run alone: the rest wait and share rounds. A
    # read that writes is refused without failing the others of its round.
    calls = [
        board.acall("write", "orm")
        if i == 7
        else board.acall("write", "state_mutate")
        if i == 20
        else board.acall("get")
        for i in range(40)
    ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    refused = [outcomes.pop(20), outcomes.pop(7)]
    assert all(isinstance(error, ActorReadOnly) for error in refused)
    assert outcomes == [1] * 38
    assert max(batches) > 1  # some reads shared a round
    Board.release.set()
    assert await writer == 6
    assert set(await asyncio.gather(*[board.acall("get") for _ in range(10)])) == {6}
    assert not await sync_to_async(Note.objects.exists)()
