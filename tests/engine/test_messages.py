"""ctx.messages: durable receives that a replay never takes twice."""

from __future__ import annotations

import asyncio

import pytest

from django_rivet.engine import (
    InMemoryDriver,
    Message,
    MessageTimeoutError,
    read_history,
    run_workflow,
    start_workflow,
)

from .conftest import START
from .helpers import execute, idle


async def test_a_receive_waits_for_its_message(clock, driver, mode):
    async def wf(ctx, _):
        message = await ctx.messages.next("wait-message", names=["my-message"])
        return message.body

    run = start_workflow("wf-1", wf, None, driver, mode)
    if mode == "yield":
        outcome = await run
        assert outcome.state == "sleeping"
        assert outcome.waiting_for == ["my-message"]
        assert outcome.sleep_until is None
        await driver.add_message("my-message", "payload")
        outcome = await run_workflow("wf-1", wf, None, driver)
    else:
        await idle(clock, run._task, until=START)
        assert not run._task.done()
        await run.send("my-message", "payload")
        outcome = await run
    assert outcome.state == "completed"
    assert outcome.output == "payload"


async def test_a_receive_takes_any_name_of_its_set(clock, driver, mode):
    async def wf(ctx, _):
        message = await ctx.messages.next("wait-many", names=["first", "second"])
        return {"name": message.name, "body": message.body}

    first = await execute(clock, "wf-1", wf, driver, "yield")
    assert first.waiting_for == ["first", "second"]
    await driver.add_message("other", "ignored")
    await driver.add_message("second", "payload")
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == {"name": "second", "body": "payload"}
    assert [m.name for m in driver.messages] == ["other"]


async def test_messages_sent_before_the_run_are_consumed(clock, driver, mode):
    message_id = await driver.add_message("my-message", {"hello": "world"})

    async def wf(ctx, _):
        message = await ctx.messages.next("wait-message")
        assert isinstance(message, Message)
        return [message.id, message.name, message.body, message.created_at]

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == [message_id, "my-message", {"hello": "world"}, START]
    assert driver.messages == []


async def test_next_batch_respects_count_and_fifo_order(clock, driver, mode):
    for body in ("first", "second", "third"):
        await driver.add_message("fifo", body)

    async def wf(ctx, _):
        batch = await ctx.messages.next_batch("fifo", names=["fifo"], count=2)
        return [m.body for m in batch]

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == ["first", "second"]
    assert [m.body for m in driver.messages] == ["third"]


async def test_next_raises_on_timeout(clock, driver, mode):
    async def wf(ctx, _):
        try:
            await ctx.messages.next("timeout", names=["missing"], timeout=50)
        except MessageTimeoutError:
            return "timed out"
        return "received"

    if mode == "yield":
        outcome = await run_workflow("wf-1", wf, None, driver)
        assert outcome.state == "sleeping"
        assert outcome.sleep_until == START + 50
        assert outcome.waiting_for == ["missing"]
        assert driver.get_alarm("wf-1") == START + 50
        clock.advance(50)
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == "timed out"
    # The timeout is history: a late message does not change the replay.
    await driver.add_message("missing", "late")
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == "timed out"


async def test_next_batch_returns_empty_on_timeout(clock, driver, mode):
    async def wf(ctx, _):
        return await ctx.messages.next_batch("batch", count=3, timeout=5)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    if mode == "yield":
        assert outcome.state == "sleeping"
        clock.advance(5)
        outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "completed" and outcome.output == []


async def test_next_batch_with_a_timeout_returns_what_arrived(clock, driver, mode):
    async def wf(ctx, _):
        batch = await ctx.messages.next_batch("batch", count=2, timeout=5000)
        return [m.body for m in batch]

    run = start_workflow("wf-1", wf, None, driver, mode)
    if mode == "yield":
        assert (await run).state == "sleeping"
        await driver.add_message("batch", "first")
        outcome = await run_workflow("wf-1", wf, None, driver)
    else:
        await idle(clock, run._task, until=START)
        await run.send("batch", "first")
        outcome = await run
    assert outcome.output == ["first"]


async def test_a_replay_returns_recorded_messages_and_never_takes_new_ones(
    clock, driver, mode
):
    await driver.add_message("m", "one")

    async def wf(ctx, _):
        message = await ctx.messages.next("wait")
        return message.body

    first = await execute(clock, "wf-1", wf, driver, mode)
    await driver.add_message("m", "two")
    second = await execute(clock, "wf-1", wf, driver, mode)
    assert first.output == second.output == "one"
    assert [m.body for m in driver.messages] == ["two"]


async def test_a_crash_before_completing_never_delivers_a_message_twice(clock, mode):
    class LosesCompletions(InMemoryDriver):
        lose = True

        async def complete_message(self, id, response=None):
            if not self.lose:
                await super().complete_message(id, response)

    driver = LosesCompletions()
    await driver.add_message("m", "one")

    async def first_version(ctx, _):
        return (await ctx.messages.next("first")).body

    async def second_version(ctx, _):
        first = (await ctx.messages.next("first")).body
        second = await ctx.messages.next("second", timeout=10)
        return [first, second.body]

    await execute(clock, "wf-1", first_version, driver, mode)
    assert [m.body for m in driver.messages] == ["one"]  # never completed
    driver.lose = False
    await driver.add_message("m", "two")
    outcome = await execute(clock, "wf-1", second_version, driver, mode)
    assert outcome.output == ["one", "two"]
    assert driver.messages == []


async def test_messages_are_recorded_in_history(clock, driver):
    await driver.add_message("approve", {"by": "ann"})

    async def wf(ctx, _):
        return (await ctx.messages.next("wait-approval", names=["approve"])).body

    await run_workflow("wf-1", wf, None, driver)
    [entry] = await read_history(driver)
    assert entry.kind == "message"
    assert entry.status == "completed"
    assert entry.output[0]["body"] == {"by": "ann"}


async def test_a_receive_of_any_name_reports_a_wildcard(clock, driver):
    async def wf(ctx, _):
        return (await ctx.messages.next("anything")).body

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.waiting_for == ["*"]


async def test_a_message_sent_while_running_is_seen_by_a_later_receive(
    clock, driver, mode
):
    gate = asyncio.Event()

    async def wait_for_gate():
        await gate.wait()
        return "ready"

    async def wf(ctx, _):
        await ctx.step("gate", wait_for_gate, timeout=None)
        return (await ctx.messages.next("wait", names=["mid"])).body

    run = start_workflow("wf-1", wf, None, driver, mode)
    for _ in range(10):
        await asyncio.sleep(0)
    await driver.add_message("mid", "value")
    gate.set()
    outcome = await run
    assert outcome.state == "completed" and outcome.output == "value"


async def test_timeouts_may_be_timedeltas(clock, driver):
    from datetime import timedelta

    async def wf(ctx, _):
        return [
            ctx.workflow_id,
            await ctx.messages.next_batch("b", timeout=timedelta(days=1)),
        ]

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.sleep_until == START + 86400
    clock.advance(86400)
    assert (await run_workflow("wf-1", wf, None, driver)).output == ["wf-1", []]


class RecordFirstDriver(InMemoryDriver):
    """Refuses to complete a message no stored record names (order check)."""

    def __init__(self, batching: bool) -> None:
        super().__init__()
        self.completed: list[str] = []
        if not batching:  # a driver without the extension
            self.batch_completing = None  # type: ignore[assignment]

    async def complete_message(self, id: str, response=None) -> None:
        assert any(id.encode() in value for value in self.kv.values()), id
        self.completed.append(id)
        await super().complete_message(id, response)


@pytest.mark.parametrize("batching", [True, False], ids=["one-tx", "after"])
async def test_a_message_leaves_the_inbox_only_once_its_receipt_is_written(
    clock, batching
):
    driver = RecordFirstDriver(batching)
    effects: list[int] = []

    async def wf(ctx, _):
        first = await ctx.messages.next("a")
        second = await ctx.messages.next("b")  # the first still unwritten
        total = await ctx.step("s", lambda: effects.append(1) or first.body)
        return [total, second.body]

    first = await driver.add_message("m", 1)
    second = await driver.add_message("m", 2)
    outcome = await run_workflow("wf", wf, None, driver)
    assert (outcome.state, outcome.output) == ("completed", [1, 2])
    assert driver.messages == []
    assert effects == [1]
    if not batching:
        assert driver.completed == [first, second]


async def test_a_crash_before_the_receipt_is_written_receives_it_again(clock):
    driver = InMemoryDriver()
    effects: list[int] = []

    async def wf(ctx, _):
        message = await ctx.messages.next("a")
        return await ctx.step("s", lambda: effects.append(message.body) or 7)

    class Crash(BaseException):
        pass

    real = driver.batch_completing

    async def crash(writes, message_ids):
        raise Crash()

    await driver.add_message("m", 1)
    driver.batch_completing = crash  # type: ignore[method-assign]
    try:
        await run_workflow("wf", wf, None, driver)
    except Crash:
        pass
    # The step ran, nothing of the run was written: the message is still
    # there, and the next run receives it (and runs the step) again.
    assert [m.body for m in driver.messages] == [1]
    driver.batch_completing = real  # type: ignore[method-assign]
    outcome = await run_workflow("wf", wf, None, driver)
    assert (outcome.state, outcome.output) == ("completed", 7)
    assert effects == [1, 1]
    assert driver.messages == []
