"""History as the admin and handle.history() see it, and live updates of it."""

from __future__ import annotations

from django_rivet.engine import (
    Loop,
    decode_history,
    read_history,
    run_workflow,
)

from .conftest import START


async def test_history_lists_every_entry_in_creation_order(clock, driver):
    def fail():
        raise ValueError("nope")

    async def body(ctx, state):
        await ctx.step("fetch", lambda: state)
        return Loop.break_(state) if state else Loop.continue_(state + 1)

    async def wf(ctx, _):
        await ctx.rollback_checkpoint("start")
        await ctx.step("charge", lambda: {"id": "ch_1"})
        clock.advance(5)
        await ctx.sleep("cool-off", 0)
        total = await ctx.loop("sum", body, state=0)
        await ctx.join("ship", {"label": lambda c: c.step("make", lambda: "L")})
        await ctx.race("fastest", {"a": lambda c: c.step("go", lambda: "A")})
        await ctx.get_version("gate", 2)
        await ctx.removed("old", "step")
        await ctx.try_step("risky", fail, max_retries=0)
        return total

    await run_workflow("wf-1", wf, None, driver)
    history = await read_history(driver)
    assert [(h.kind, h.location) for h in history] == [
        ("rollback_checkpoint", "start"),
        ("step", "charge"),
        ("sleep", "cool-off"),
        ("loop", "sum"),
        ("step", "sum/~0/fetch"),
        ("step", "sum/~1/fetch"),
        ("join", "ship"),
        ("step", "ship/label/make"),
        ("race", "fastest"),
        ("step", "fastest/a/go"),
        ("version_check", "gate"),
        ("removed", "old"),
        ("step", "risky"),
    ]
    charge = history[1]
    assert charge.status == "completed" and charge.attempts == 1
    assert charge.output == {"id": "ch_1"}
    assert charge.created_at == START and charge.completed_at == START
    assert history[2].created_at == START + 5
    assert history[3].output == 1
    assert history[6].output == {"label": "L"}
    assert history[8].output == ["a", "A"]
    assert history[10].output == 2
    risky = history[-1]
    assert risky.status == "exhausted"
    error = dict(risky.error)
    traceback = error.pop("traceback")
    assert error == {"name": "ValueError", "message": "nope", "kind": "exhausted"}
    assert traceback.endswith('raise ValueError("nope")\nValueError: nope\n')
    assert [h.seq for h in history] == sorted(h.seq for h in history)
    assert len({h.id for h in history}) == len(history)
    assert decode_history(sorted(driver.kv.items())) == history


async def test_on_history_reports_each_flush(clock, driver):
    snapshots = []

    async def wf(ctx, _):
        await ctx.step("one", lambda: 1)
        await ctx.sleep("nap", 60)
        await ctx.step("two", lambda: 2)

    await run_workflow("wf-1", wf, None, driver, on_history=snapshots.append)
    assert [[h.location for h in s] for s in snapshots] == [["one"], ["one", "nap"]]
    clock.advance(60)
    snapshots.clear()
    await run_workflow("wf-1", wf, None, driver, on_history=snapshots.append)
    last = snapshots[-1]
    assert [(h.location, h.status) for h in last] == [
        ("one", "completed"),
        ("nap", "completed"),
        ("two", "completed"),
    ]


async def test_a_replay_that_changes_nothing_writes_nothing(clock, driver):
    async def wf(ctx, _):
        await ctx.step("one", lambda: 1)
        return 1

    await run_workflow("wf-1", wf, None, driver)
    before = dict(driver.kv)
    snapshots = []
    await run_workflow("wf-1", wf, None, driver, on_history=snapshots.append)
    assert driver.kv == before
    assert snapshots == []
