"""Profile the subject of a measure: ``python -m bench.profile P1 [--db postgresql]``.

Runs the subject's hot loop under pyinstrument in a fresh process, on a
fresh database of the kind asked (SQLite-WAL by default; PostgreSQL with
default durability is started when asked), and prints the call tree. For
the server-side measures (P2, P3, P7) it profiles the same invocation
in-process (``acall`` through ``sync_to_async``), the part of the server's
time that django-rivet owns.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any


def _profiled(fn: Any, repeat: int = 1) -> str:
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0005)
    profiler.start()
    for _ in range(repeat):
        fn()
    profiler.stop()
    return str(profiler.output_text(unicode=False, color=False, show_all=False))


def p1(calls: int = 2000) -> str:
    from django_rivet import actors

    handle = actors.get_or_create("bench", "profile")
    for _ in range(100):
        handle.call("increment")
    return _profiled(lambda: handle.call("increment"), calls)


def p3(calls: int = 1000) -> str:
    from django_rivet import actors

    handle = actors.get_or_create("bench", "profile")

    async def many() -> None:
        for _ in range(calls):
            await handle.acall("increment")

    asyncio.run(many())  # warm-up
    return _profiled(lambda: asyncio.run(many()))


def p4(size: int = 10_000) -> str:
    from bench import internals
    from bench.measures.p04_flush import build, run_private
    from django_rivet import workflows
    from django_rivet.workflows.driver import DjangoDriver

    workflow_id = workflows.start("benchSteps", 0).workflow_id
    token = internals.take_lease(workflow_id)
    storage = build(
        DjangoDriver(workflow_id, lease_token=token, private_loop=True), size
    )
    return _profiled(lambda: run_private(storage.flush()))


def p5(steps: int = 1000) -> str:
    from django_rivet import workflows
    from django_rivet.testing import run_until_idle

    run_until_idle(workflows.start("benchSteps", 50))
    return _profiled(lambda: run_until_idle(workflows.start("benchSteps", steps)))


def p6(size: int = 10_000) -> str:
    from bench import internals
    from bench.measures.p04_flush import build, run_private
    from django_rivet import workflows
    from django_rivet.testing import run_until_idle
    from django_rivet.workflow import InMemoryDriver

    handle = workflows.start("benchReplay", size)
    driver = InMemoryDriver()
    run_private(build(driver, size).flush())
    internals.add_kv_rows(handle.workflow_id, driver.kv)
    run_until_idle(handle)
    handle.send("m0", None)
    run_until_idle(handle)
    handle.send("m1", None)
    return _profiled(lambda: run_until_idle(handle))


def p11(steps: int = 1000) -> str:
    from django_rivet.workflow import InMemoryDriver, run_workflow

    async def workflow(ctx: Any, count: int) -> int:
        for index in range(count):

            async def step(index: int = index) -> int:
                return index

            await ctx.step(f"s{index}", step)
        return count

    def once() -> None:
        asyncio.run(
            run_workflow(f"wf-{time.time()}", workflow, steps, InMemoryDriver())
        )

    once()
    return _profiled(once, 10)


PROFILES = {"P1": p1, "P2": p3, "P3": p3, "P7": p3, "P4": p4, "P5": p5, "P6": p6,
            "P11": p11}  # fmt: skip


def leg(measure: str) -> str:
    return PROFILES[measure]()


def main() -> None:
    from bench.runner import Context
    from bench.servers import Servers

    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("measure", choices=sorted(PROFILES))
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    args = parser.parse_args()
    servers = Servers()
    try:
        ctx = Context(servers=servers, quick=False)
        print(ctx.leg("bench.profile:leg", {"measure": args.measure}, db=args.db))
    finally:
        servers.close()


if __name__ == "__main__":
    sys.exit(main())
