"""A failed step attempt keeps its traceback and logs one WARNING with it."""

from __future__ import annotations

import logging

from django_rivet.engine import MAX_KV_BATCH_PAYLOAD_BYTES, read_history
from django_rivet.engine.errors import MAX_TRACEBACK_CHARS

from .helpers import execute, run_to_end


def divide(numerator):
    return numerator / 0


async def test_a_failed_attempt_stores_its_traceback_and_logs_it(clock, driver, caplog):
    async def wf(ctx, _):
        return await ctx.step("ratio", lambda: divide(1), max_retries=1)

    caplog.set_level(logging.INFO, logger="django_rivet")
    outcome = await run_to_end(clock, "wf-1", wf, driver, "yield")
    assert outcome.state == "failed"
    [entry] = await read_history(driver)
    traceback = entry.error["traceback"]
    assert traceback.startswith("Traceback (most recent call last):")
    assert "in divide" in traceback and "return numerator / 0" in traceback
    assert traceback.endswith("ZeroDivisionError: division by zero\n")
    assert entry.error["message"] == "division by zero"
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.name for r in warnings] == ["django_rivet.workflow"] * 2  # 2 attempts
    for attempt, record in enumerate(warnings, start=1):
        message = record.getMessage()
        assert "workflow=wf-1 step=ratio" in message
        assert f"attempt={attempt}" in message
        assert record.exc_info is not None  # the handler prints the traceback
        assert isinstance(record.exc_info[1], ZeroDivisionError)


async def test_a_huge_traceback_is_cut_to_its_last_16_kib(clock, driver):
    async def wf(ctx, _):
        def boom():
            raise ValueError("x" * (MAX_KV_BATCH_PAYLOAD_BYTES // 2))

        return await ctx.step("boom", boom, max_retries=0)

    outcome = await execute(clock, "wf-1", wf, driver, "yield")
    assert outcome.state == "failed"
    [entry] = await read_history(driver)
    traceback = entry.error["traceback"]
    assert len(traceback) <= MAX_TRACEBACK_CHARS + len("[truncated]\n")
    assert traceback.startswith("[truncated]\n") and traceback.endswith("xxx\n")
