"""ctx.reply and ctx.set_event: published once, never again on replay."""

from __future__ import annotations

import pytest

from django_rivet.engine import (
    StepOutputError,
    keys,
    read_event,
    read_history,
    read_reply,
)

from .helpers import RecordingDriver, execute, run_to_end


def writes_of(driver: RecordingDriver, key: bytes) -> int:
    return sum(1 for batch in driver.batches for k, _ in batch if k == key)


async def answering(ctx, _):
    message = await ctx.messages.next("ask", names=["approve"])
    await ctx.reply("answer", message, {"ok": True, "by": message.body["by"]})
    await ctx.sleep("after", 60)
    return "done"


async def test_a_reply_is_sent_once_even_when_the_workflow_replays(clock, mode):
    driver = RecordingDriver()
    heard = []
    await execute(clock, "wf-1", answering, driver, "yield")
    message_id = await driver.add_message("approve", {"by": "ann"})
    assert await read_reply(driver, message_id) == (False, None)
    outcome = await execute(
        clock, "wf-1", answering, driver, "yield", on_reply=heard.append
    )
    assert outcome.state == "sleeping"
    assert heard == [message_id]
    assert await read_reply(driver, message_id) == (True, {"ok": True, "by": "ann"})
    # The reader took it; the replays that finish the workflow send nothing.
    await driver.delete(keys.reply_key(message_id))
    outcome = await run_to_end(
        clock, "wf-1", answering, driver, mode, on_reply=heard.append
    )
    assert outcome.output == "done"
    assert heard == [message_id]
    assert await read_reply(driver, message_id) == (False, None)
    assert writes_of(driver, keys.reply_key(message_id)) == 1
    reply = next(e for e in await read_history(driver) if e.kind == "reply")
    assert (reply.location, reply.status, reply.output) == (
        "answer",
        "completed",
        {"ok": True, "by": "ann"},
    )
    assert reply.data["message_id"] == message_id


async def test_set_event_publishes_the_latest_value_once_per_call(clock, mode):
    driver = RecordingDriver()

    async def wf(ctx, _):
        await ctx.set_event("progress", {"done": 1})
        await ctx.sleep("a", 10)
        await ctx.set_event("progress", {"done": 2})
        await ctx.sleep("b", 10)
        await ctx.set_event("stage", "shipping")
        return "ok"

    assert (await read_event(driver, "progress")) == (False, None)
    await execute(clock, "wf-1", wf, driver, "yield")
    assert await read_event(driver, "progress") == (True, {"done": 1})
    clock.advance(10)
    await execute(clock, "wf-1", wf, driver, "yield")
    assert await read_event(driver, "progress") == (True, {"done": 2})
    outcome = await run_to_end(clock, "wf-1", wf, driver, mode)
    assert outcome.output == "ok"
    # Two replays passed the first set_event: it was written once.
    assert writes_of(driver, keys.event_key("progress")) == 2
    assert await read_event(driver, "progress") == (True, {"done": 2})
    assert await read_event(driver, "stage") == (True, "shipping")
    events = [e.location for e in await read_history(driver) if e.kind == "event"]
    assert events == ["event:progress", "event:progress#2", "event:stage"]


async def test_set_event_keys_and_values_are_checked(clock, driver):
    async def bad_key(ctx, _):
        await ctx.set_event("", 1)

    async def bad_value(ctx, _):
        await ctx.set_event("k", {1, 2})

    assert isinstance(
        (await execute(clock, "wf-1", bad_key, driver, "yield")).error, ValueError
    )
    outcome = await execute(clock, "wf-2", bad_value, driver, "yield")
    assert isinstance(outcome.error, StepOutputError)


async def test_reply_takes_a_message_a_step_returned_or_its_id(clock, driver, mode):
    async def wf(ctx, _):
        message = await ctx.messages.next("ask")
        kept = await ctx.step("keep", lambda: message)  # stored as a map
        await ctx.reply("by-map", kept, 1)
        with pytest.raises(TypeError):
            await ctx.reply("nothing", None, 2)
        return "ok"

    message_id = await driver.add_message("q", None)
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == "ok"
    assert await read_reply(driver, message_id) == (True, 1)
