"""Workflows of the benchmarks (discovered like any app's workflows.py)."""

from collections.abc import Callable

from django_rivet.workflows import workflow

#: P6w's live row: called with a wake's index once its step is durable
#: (``ctx.step`` returns after the step's flush). Replays call it too, with
#: old indexes; the measure waits for the index it sent.
WAKE_HOOK: Callable[[int], None] | None = None


def trivial(index: int) -> int:
    return index


async def steps(ctx, count):
    """``count`` sequential trivial sync steps (the DBOS comparison's shape)."""
    for index in range(count):
        await ctx.step(f"s{index}", lambda index=index: trivial(index))
    return count


@workflow(name="benchSteps")
async def bench_steps(ctx, count):
    return await steps(ctx, count)


@workflow(name="benchReplay")
async def bench_replay(ctx, count):
    """``count`` steps, then wait for messages forever (P6 replays it).

    Every message wakes it: the run loads the whole history, replays the
    steps and the messages received so far, records the new one and waits
    again, so one workflow serves any number of trials.
    """
    await steps(ctx, count)
    index = 0
    while True:
        await ctx.messages.next(f"m{index}")
        index += 1


@workflow(name="benchWake")
async def bench_wake(ctx, count):
    """``count`` steps, then per message: receive it, one step, wait (P6w).

    Each wake adds a received message and a step to the history; the wait
    for the next message is what the workflow is left in.
    """
    await steps(ctx, count)
    index = 0
    while True:
        await ctx.messages.next(f"m{index}")
        await ctx.step(f"w{index}", lambda index=index: trivial(index))
        hook = WAKE_HOOK
        if hook is not None:
            hook(index)
        index += 1


@workflow(name="benchDeaf")
async def bench_deaf(ctx, input):
    """Waits for a message nobody sends (P41's requests get no answer)."""
    await ctx.messages.next("never", names=["never"])


def anyone(request, workflow_id, key):
    """Every reader may follow the benchmark's streams over HTTP."""
    return True


@workflow(name="benchStream", can_read_stream=anyone)
async def bench_stream(ctx, count):
    """Write ``count`` small values to stream ``n`` as fast as it can (P15)."""
    for index in range(count):
        await ctx.write_stream("n", index)
    await ctx.close_stream("n")
    return count
