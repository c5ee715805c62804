"""``RIVET["WORKFLOW_LIVE_WAIT"]`` on the database: a waiting run stays live.

A worker thread runs the workflow (``execution.run``, as a Celery task
does); the test thread sends. A message sent in this process wakes the
waiting run at once, which goes on without reading its history again (one
``list`` per run); one sent after the window wakes it the normal way (a
release, a replay). A lease lost while it waits stops it with nothing
written; a cancel ends it cancelled; a worker shutting down makes it yield.
Everything on the virtual clock: the window and the poll end only when the
test advances it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from django_rivet import checks as rivet_checks
from django_rivet import workflows
from django_rivet.models import Workflow, WorkflowKV, WorkflowMessage, WorkflowStatus
from django_rivet.testing import freeze_time, run_until_idle
from django_rivet.workflows import execution, live, registry, workflow
from django_rivet.workflows.driver import DjangoDriver

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

LIVE = {"WORKFLOW_LIVE_WAIT": 60}

seen: list[Any] = []


@workflow(name="liveChat")
async def live_chat(ctx: Any, input: Any) -> Any:
    total = 0
    for index in range(input["messages"]):
        message = await ctx.messages.next(f"m{index}", names=["add"])

        def add(total: int = total, body: Any = message.body) -> int:
            seen.append(body)
            return total + body

        total = await ctx.step(f"s{index}", add)
    return total


@workflow(name="liveKid")
async def live_kid(ctx: Any, input: Any) -> Any:
    return await ctx.step("grow", lambda: input * 2)


@workflow(name="liveParent")
async def live_parent(ctx: Any, input: Any) -> Any:
    return await ctx.child("kid", "liveKid", input, id="kid-of-parent")


@pytest.fixture
def clock():
    with freeze_time(1_700_000_000.0) as frozen:
        yield frozen


@pytest.fixture
def lists(monkeypatch):
    """How many times a driver read a whole history (``list``)."""
    calls = {"n": 0}
    original = DjangoDriver.list

    async def counting(self: DjangoDriver, prefix: bytes) -> Any:
        calls["n"] += 1
        return await original(self, prefix)

    monkeypatch.setattr(DjangoDriver, "list", counting)
    return calls


@pytest.fixture(autouse=True)
def chat():
    seen.clear()
    chats = registry.register_temporarily(live_chat, live_kid, live_parent)
    with chats, override_settings(RIVET=LIVE):
        try:
            yield
        finally:
            live.reopen()  # after a test of end_all()


class Worker:
    """``execution.run(workflow_id)`` in a thread of its own, as a worker runs it."""

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        self.result: list[Any] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from django.db import connection

        try:
            self.result.append(execution.run(self.workflow_id))
        except BaseException as exc:  # pragma: no cover - shown by the test
            self.result.append(exc)
        finally:
            connection.close()

    def join(self) -> Any:
        self.thread.join(30)
        assert not self.thread.is_alive(), "the run did not end"
        return self.result[0]


def until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.005)


def listening(workflow_id: str) -> None:
    until(lambda: workflow_id in live._listeners, "the run waits live")


def blocked(clock: Any) -> None:
    """Wait until the run blocks for its next poll (a wait on the clock).

    It listens before it looks in the inbox: a clock moved between the two
    would set its next poll after the new time, and nothing moves it again.
    """
    until(lambda: clock._waiters, "the run blocks until its next poll")


def kv_rows(workflow_id: str) -> list[tuple[bytes, bytes]]:
    rows = WorkflowKV.objects.filter(workflow_id=workflow_id).order_by("key")
    return [(bytes(k), bytes(v)) for k, v in rows.values_list("key", "value")]


def test_messages_sent_in_the_window_wake_the_run_in_process(clock, lists):
    handle = workflows.start("liveChat", {"messages": 3}, id="chat")
    worker = Worker("chat")
    for index, value in enumerate((1, 2, 3)):
        listening("chat")
        handle.send("add", value)
        until(lambda i=index: len(seen) > i, f"message {index} was received")
    assert worker.join() == "completed"
    # One run, one read of the history: every wake went on in memory.
    assert lists["n"] == 1
    assert handle.result() == 6
    row = Workflow.objects.get(pk="chat")
    assert row.run_count == 1
    assert not WorkflowMessage.objects.filter(workflow_id="chat").exists()


def test_a_message_from_another_process_is_found_by_the_poll(clock, lists):
    handle = workflows.start("liveChat", {"messages": 1}, id="polled")
    worker = Worker("polled")
    listening("polled")
    blocked(clock)
    # Another process's send: the row, and no signal here.
    WorkflowMessage.objects.create(
        workflow_id="polled",
        name="add",
        body=b"\x05",  # CBOR 5
    )
    clock.advance(0.1)  # WORKFLOW_POLL_INTERVAL
    assert worker.join() == "completed"
    assert lists["n"] == 1
    assert handle.result() == 5


def test_a_message_sent_after_the_window_wakes_it_through_a_replay(clock, lists):
    handle = workflows.start("liveChat", {"messages": 2}, id="late")
    worker = Worker("late")
    listening("late")
    clock.advance(61)  # the window ends: the run yields as without it
    assert worker.join() == "sleeping"
    row = Workflow.objects.get(pk="late")
    assert (row.status, row.waiting_for, row.wake_at) == ("sleeping", ["add"], None)
    assert lists["n"] == 1
    handle.send("add", 4)
    assert Workflow.objects.get(pk="late").wake_at == clock.datetime()
    assert run_until_idle(handle) == "sleeping"  # replayed, received, waits again
    assert seen == [4]
    assert lists["n"] == 2


def test_a_lease_lost_while_live_stops_the_run_without_a_write(clock):
    handle = workflows.start("liveChat", {"messages": 2}, id="stolen")
    with override_settings(RIVET={**LIVE, "WORKFLOW_LEASE_SECONDS": 0.3}):
        worker = Worker("stolen")
        listening("stolen")
        before = kv_rows("stolen")
        # Another worker took the workflow over (our lease had expired).
        Workflow.objects.filter(pk="stolen").update(lease_token="successor")
        stolen = Workflow.objects.filter(pk="stolen").values().get()
        # The heartbeat finds the lease gone and evicts the run.
        assert worker.join() == "sleeping"
    assert kv_rows("stolen") == before
    assert Workflow.objects.filter(pk="stolen").values().get() == stolen
    assert handle.status == "running"  # the successor's, untouched


def test_a_message_to_a_run_that_lost_its_lease_is_left_in_the_inbox(clock):
    handle = workflows.start("liveChat", {"messages": 2}, id="fenced")
    worker = Worker("fenced")
    listening("fenced")
    before = kv_rows("fenced")
    Workflow.objects.filter(pk="fenced").update(lease_token="successor")
    handle.send("add", 1)  # wakes it: it reads the message, its write is refused
    assert worker.join() == "sleeping"
    assert kv_rows("fenced") == before
    assert seen == []
    assert WorkflowMessage.objects.filter(workflow_id="fenced").count() == 1


def test_a_cancel_during_the_window_ends_it_cancelled(clock):
    handle = workflows.start("liveChat", {"messages": 2}, id="halted")
    worker = Worker("halted")
    listening("halted")
    assert handle.cancel() is True
    assert worker.join() == "cancelled"
    assert handle.status == "cancelled"
    assert handle.snapshot().state == "cancelled"
    assert Workflow.objects.get(pk="halted").cancel_requested is False


def test_a_worker_shutting_down_makes_live_runs_yield(clock):
    workflows.start("liveChat", {"messages": 2}, id="shutdown")
    worker = Worker("shutdown")
    listening("shutdown")
    until(lambda: live._runs, "the run is tracked")
    assert live.end_all() == 1
    assert worker.join() == "sleeping"
    row = Workflow.objects.get(pk="shutdown")
    assert (row.status, row.waiting_for) == (WorkflowStatus.SLEEPING, ["add"])
    assert row.lease_token == ""
    # Later runs of this process open no window: a message makes it run
    # again, by replay, and it yields at once.
    handle = workflows.get("shutdown")
    handle.send("add", 1)
    assert execution.run("shutdown") == "sleeping"
    assert seen == [1]


def test_a_run_made_due_by_its_window_s_arrivals_replays_once(clock, lists):
    # Messages that came in the window moved the wake signal: the release
    # makes it due now, and the same call runs it again -- a replay that
    # finds nothing new and yields without a window (one live pass per call).
    handle = workflows.start("liveChat", {"messages": 3}, id="again")
    worker = Worker("again")
    listening("again")
    handle.send("add", 1)
    until(lambda: len(seen) == 1, "the message was received")
    listening("again")
    live.make_room("run_workflow", ["someone-else"])  # its window closes
    assert worker.join() == "sleeping"
    assert lists["n"] == 2
    row = Workflow.objects.get(pk="again")
    assert (row.run_count, row.waiting_for, row.wake_at) == (2, ["add"], None)
    # The next message's dispatch runs it again (a replay), live.
    handle.send("add", 2)
    worker = Worker("again")
    until(lambda: len(seen) == 2, "the message was received")
    listening("again")
    handle.send("add", 3)
    assert worker.join() == "completed"
    assert lists["n"] == 3
    assert handle.result() == 6


def test_a_run_stays_live_for_its_budget_at_most(clock, lists):
    handle = workflows.start("liveChat", {"messages": 30}, id="budget")
    worker = Worker("budget")
    for index in range(live.BUDGET_WINDOWS):
        listening("budget")
        clock.advance(55)  # within each window of 60
        handle.send("add", 1)
        until(lambda i=index: len(seen) > i, f"message {index} was received")
    listening("budget")  # from 550 s: its window would end at 610 s...
    clock.advance(55)  # ...but 600 s (ten windows) from the first wait, it ends
    assert worker.join() == "sleeping"
    assert len(seen) == live.BUDGET_WINDOWS
    assert lists["n"] == 2  # and the replay its window's arrivals asked for
    row = Workflow.objects.get(pk="budget")
    assert (row.waiting_for, row.wake_at) == (["add"], None)


def test_a_child_ending_in_this_process_wakes_its_live_parent(clock, lists):
    handle = workflows.start("liveParent", 21, id="parent")
    parent = Worker("parent")
    listening("parent")  # it started the child and waits for it, live
    assert execution.run("kid-of-parent", live_wait=0) == "completed"
    assert parent.join() == "completed"
    assert lists["n"] == 2  # the child's run and the parent's one
    assert handle.result() == 42
    assert Workflow.objects.get(pk="parent").run_count == 1


def test_off_by_default_a_wait_yields_at_once(clock, lists):
    with override_settings(RIVET={}):
        handle = workflows.start("liveChat", {"messages": 1}, id="plain")
        assert execution.run("plain") == "sleeping"
        handle.send("add", 2)
        assert execution.run("plain") == "completed"
    assert lists["n"] == 2


@pytest.mark.parametrize("value", [-1, "5", True, 3601, None])
def test_rivet_e703_refuses_a_live_wait_that_is_not_seconds(value):
    with override_settings(RIVET={"WORKFLOW_LIVE_WAIT": value}):
        found = [m for m in run_checks() if m.id.startswith("rivet.")]
    assert [m.id for m in found] == ["rivet.E703"]
    assert found[0].msg == rivet_checks.E703


@pytest.mark.parametrize("value", [0, 0.5, 5, 3600])
def test_a_live_wait_of_seconds_passes_the_checks(value):
    with override_settings(RIVET={"WORKFLOW_LIVE_WAIT": value}):
        assert not [m for m in run_checks() if m.id == "rivet.E703"]


def test_the_in_process_worker_closes_live_windows_for_other_due_work(clock):
    from django_rivet import dispatch

    workflows.start("liveChat", {"messages": 2}, id="busy")
    worker = Worker("busy")
    listening("busy")
    until(lambda: live._runs, "the run is tracked")
    backend = dispatch.WorkerBackend()
    backend.wake("run_workflow", ["busy"])  # its own wake-up: it stays live
    assert live.make_room("run_workflow", ["busy"]) == 0
    assert worker.thread.is_alive()
    backend.wake("run_workflow", ["someone-else"])  # others' work is due
    assert worker.join() == "sleeping"
    assert Workflow.objects.get(pk="busy").waiting_for == ["add"]


class RecordingWorker(Worker):
    """A worker whose run notes each write: its statement, whether in a
    transaction, and how many messages the workflow had taken by then."""

    def __init__(self, workflow_id: str) -> None:
        self.writes: list[tuple[int, str, bool]] = []
        super().__init__(workflow_id)

    def _run(self) -> None:
        from django.db import connection

        def note(execute: Any, sql: str, params: Any, many: bool, context: Any):
            verb = sql.lstrip().split(" ", 1)[0].upper()
            if verb in ("INSERT", "UPDATE", "DELETE", "WITH"):
                tables = [
                    name
                    for name, found in (
                        ("kv", "workflowkv"),
                        ("message", "workflowmessage"),
                    )
                    if found in sql
                ]
                table = "+".join(tables) or "other"
                self.writes.append(
                    (len(seen), f"{verb} {table}", connection.in_atomic_block)
                )
            return execute(sql, params, many, context)

        with connection.execute_wrapper(note):
            super()._run()


def test_a_live_wake_writes_the_receipt_removal_and_step_in_one_commit(clock):
    handle = workflows.start("liveChat", {"messages": 3}, id="one-commit")
    worker = RecordingWorker("one-commit")
    for index, value in enumerate((1, 2, 3)):
        listening("one-commit")
        handle.send("add", value)
        until(lambda i=index: len(seen) > i, f"message {index} was received")
    assert worker.join() == "completed"
    # The second wake (the first one's step ran, the second's had not): the
    # message's receipt and the step's record, one checked INSERT, and the
    # message's removal, in one commit; nothing else written.
    second = [(what, atomic) for taken, what, atomic in worker.writes if taken == 2]
    assert second in (
        [("INSERT kv", True), ("DELETE message", True)],  # SQLite: a transaction
        [("WITH kv+message", False)],  # PostgreSQL: one statement, autocommit
    )
    assert not WorkflowMessage.objects.filter(workflow_id="one-commit").exists()
    assert handle.result() == 6
