"""step(transaction=True): the step and its history entry commit together."""

from __future__ import annotations

from django_rivet.engine import (
    InMemoryDriver,
    StepOutputError,
    keys,
    read_history,
    run_workflow,
    schema,
)
from django_rivet.engine.storage import Storage


class TransactionalDriver(InMemoryDriver):
    """Records transactions; can fail the write half like a rolled-back commit."""

    def __init__(self):
        super().__init__()
        self.transactions = []
        self.batches = 0
        self.fail_commit = False

    async def batch(self, writes):
        self.batches += 1
        await super().batch(writes)

    async def run_transactional(self, fn, make_writes):
        output = fn()
        writes = make_writes(output)
        self.transactions.append(writes)
        if self.fail_commit:
            self.fail_commit = False
            raise OSError("commit failed")
        await super().batch(writes)
        return output


async def test_the_step_entry_is_written_by_the_transaction(clock):
    driver = TransactionalDriver()
    effects = []

    async def wf(ctx, _):
        return await ctx.step(
            "charge", lambda: effects.append(1) or "ch_1", transaction=True
        )

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.output == "ch_1"
    [writes] = driver.transactions
    storage = await Storage.load(driver)
    [entry] = storage.entries.values()
    # One record: the entry, its metadata and the name it brought.
    record = schema.encode_entry(entry, storage.metadata[entry.id])
    history = [
        (key, value)
        for key, value in writes
        if key.startswith(tuple(keys.pack((f,)) for f in (1, 2, 4)))
    ]  # names, entries, metadata (the workflow fields ride along)
    assert history == [(keys.entry_key(entry.location), record)]
    assert entry.carried == [0, "charge"]
    assert driver.batches == 1  # only the completion; the step rode the transaction
    assert (await run_workflow("wf-1", wf, None, driver)).output == "ch_1"
    assert effects == [1]


async def test_a_rolled_back_commit_leaves_the_step_to_retry(clock):
    driver = TransactionalDriver()
    driver.fail_commit = True
    effects = []

    async def wf(ctx, _):
        return await ctx.step(
            "charge",
            lambda: effects.append(1) or f"ch_{len(effects)}",
            transaction=True,
            retry_backoff_base=1,
        )

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "sleeping"
    [entry] = await read_history(driver)
    assert entry.status == "failed" and "output" not in entry.data
    clock.set(outcome.sleep_until)
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.output == "ch_2"


async def test_an_unstorable_output_fails_inside_the_transaction(clock):
    driver = TransactionalDriver()

    async def wf(ctx, _):
        return await ctx.step("bad", lambda: {1, 2}, transaction=True)

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert isinstance(outcome.error, StepOutputError)
    assert driver.transactions == []  # make_writes raised: nothing committed


async def test_in_memory_driver_runs_fn_then_one_batch(clock):
    driver = InMemoryDriver()

    async def fn():
        return "async ok"

    async def wf(ctx, _):
        return await ctx.step("s", fn, transaction=True)

    assert (await run_workflow("wf-1", wf, None, driver)).output == "async ok"
