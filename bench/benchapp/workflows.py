"""Workflows of the benchmarks (discovered like any app's workflows.py)."""

from django_rivet.workflow import workflow


def trivial(index: int) -> int:
    return index


@workflow(name="benchSteps")
async def bench_steps(ctx, steps):
    """``steps`` sequential trivial sync steps (the DBOS comparison's shape)."""
    for index in range(steps):
        await ctx.step(f"s{index}", lambda index=index: trivial(index))
    return steps


@workflow(name="benchAsyncSteps")
async def bench_async_steps(ctx, steps):
    """The same with async step functions (no hop to the database thread)."""
    for index in range(steps):

        async def step(index=index):
            return index

        await ctx.step(f"s{index}", step)
    return steps
