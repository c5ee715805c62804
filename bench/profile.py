"""Profile the subject of a measure: ``python -m bench.profile P1 [--db postgresql]``.

In-process measures (P1, P4, P5, P6, P6L, P11, and P7's invocation) run the
subject's hot loop under pyinstrument in a fresh process, on a fresh
database of the kind asked (SQLite-WAL by default; PostgreSQL with default
durability is started when asked), and print the call tree.

Server measures (P2, P3, P12, P13, P17) profile the **server**: the leg starts
daphne as the measure does, drives it with the measure's client for
``--seconds``, and samples daphne's Python stacks with py-spy meanwhile
(``--side baseline`` drives the measure's baseline instead). It prints
:func:`bench.flame.summary` and keeps py-spy's collapsed stacks in
``bench/results/profile-<ID>-<side>-<db>-<pid>.txt`` (for speedscope.app or
flamegraph.pl). P12/P13 run on PostgreSQL + Redis; ``--db`` chooses for P2/P3.
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
    from django_rivet.engine import InMemoryDriver
    from django_rivet.testing import run_until_idle

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
    from django_rivet.engine import InMemoryDriver, run_workflow

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


def p6l(size: int = 100, wakes: int = 2000) -> str:
    """The live wake: the sender's thread (the send), then the run's thread.

    At 100 entries: a wake's cost does not grow with the history (P6L's
    growth rows), and the run's one load + replay stays out of the way.
    """
    from pyinstrument import Profiler

    from bench.measures.p06w_wake import live_run

    in_run = Profiler(interval=0.0005, async_mode="disabled")
    with live_run(size, in_run) as (_, wake):
        for _ in range(100):
            wake()
        sender = _profiled(wake, wakes)
    run = in_run.output_text(unicode=False, color=False, show_all=False)
    return f"== the sender's thread ==\n{sender}\n== the run's thread ==\n{run}"


PROFILES = {
    "P1": p1,
    "P7": p3,
    "P4": p4,
    "P5": p5,
    "P6": p6,
    "P6L": p6l,
    "P11": p11,
}

# Server measures: what each side drives (bench/measures/transport.py, hot.py).
SERVER = {
    "P2": {"subject": "rivet_http", "baseline": "same_commit"},
    "P3": {"subject": "rivet_ws", "baseline": "raw_consumer"},
    "P12": {"subject": "rivet", "baseline": "raw"},
    "P13": {"subject": "rivet", "baseline": "raw"},
    "P17": {"subject": "readonly", "baseline": "locked"},
}
SHAPES = {"P12": (1, 1), "P13": (2, 10), "P17": (1, 1)}  # daphne processes, actors


def leg(measure: str) -> str:
    return PROFILES[measure]()


def server_leg(
    measure: str, side: str, seconds: float, label: str, idle: bool = False
) -> str:
    """Drive daphne with one side of a server measure under py-spy."""
    import contextlib
    from pathlib import Path

    from bench import flame
    from bench.servers import ROOT, daphne, spy

    what = SERVER[measure][side]
    output = ROOT / "bench" / "results" / f"profile-{measure}-{side}-{label}.txt"
    output.parent.mkdir(parents=True, exist_ok=True)
    for old in output.parent.glob(f"{output.stem}-*.txt"):
        old.unlink()
    if measure == "P17":
        pids, note = _reads_under_spy(what, seconds, output, idle)
    elif measure in SHAPES:
        webs, keys = SHAPES[measure]
        pids, note = _hot_under_spy(what, webs, keys, seconds, output, idle)
    else:
        from bench.measures import transport

        env = transport.prepare()
        with contextlib.ExitStack() as stack:
            url, pid = stack.enter_context(daphne(env))
            once = transport.clients(stack, url)[what]
            for _ in range(200):  # warm-up
                once()
            pids = [pid]
            calls = 0
            with spy(pids, output, idle=idle):
                end = time.perf_counter() + seconds
                while time.perf_counter() < end:
                    once()
                    calls += 1
        note = f"{calls / seconds:.0f} round trips/s under the profiler"
    texts = [f"{measure} {side} ({what}, {label}): {note}"]
    for pid in pids:
        path = output.with_name(f"{output.stem}-{pid}{output.suffix}")
        texts.append(f"== daphne pid {pid} ({Path(path).name})\n")
        texts.append(flame.summary(path.read_text()))
    return "\n".join(texts)


def _hot_under_spy(
    side: str, webs: int, keys: int, seconds: float, output: Any, idle: bool
) -> tuple[list[int], str]:
    import contextlib
    import os

    import cbor2
    from django.db import connections

    from bench.benchapp.models import Row
    from bench.measures import hot
    from bench.servers import daphne, spy
    from bench.site import hot_row

    names = [f"k{index}" for index in range(keys)]
    for name in names:
        Row.objects.get_or_create(
            name=hot_row(name), defaults={"state": cbor2.dumps({"n": 0})}
        )
    connections.close_all()
    env = {k: v for k, v in os.environ.items() if k.startswith("RIVET_BENCH_")}
    env["RIVET_BENCH_EMBEDDED"] = "0"
    path = (
        (lambda key: f"/rivet/actors/hot/connect?key={key}&subscribe=changed")
        if side == "rivet"
        else (lambda key: f"/baseline/hot/{key}")
    )
    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(daphne(env)) for _ in range(webs)]
        urls, pids = [u for u, _ in started], [p for _, p in started]

        async def drive() -> dict[str, Any]:
            clients = await hot._open(urls, names, 50, path, side == "rivet")
            await hot.trial(clients, 1.0)  # warm-up
            with spy(pids, output, idle=idle):
                found = await hot.trial(clients, seconds)
            for client in clients:
                await client.ws.close()
                client.reader.cancel()
            return found

        found = asyncio.run(drive())
    note = (
        f"{found['increments_per_s']:.0f} increments/s, "
        f"{found['events_per_s']:.0f} events/s under the profiler"
    )
    return pids, note


def _reads_under_spy(
    arm: str, seconds: float, output: Any, idle: bool
) -> tuple[list[int], str]:
    import os

    from bench.measures import p17_reads
    from bench.servers import daphne, spy

    env = {k: v for k, v in os.environ.items() if k.startswith("RIVET_BENCH_")}
    env["RIVET_BENCH_EMBEDDED"] = "0"
    with daphne(env) as (url, pid):

        async def drive() -> dict[str, Any]:
            action = p17_reads.ARMS[arm]
            readers, writers = await p17_reads._open(url, f"p-{arm}", 45, 5, action)
            await p17_reads.trial(readers, writers, 1.0, None)  # warm-up
            with spy([pid], output, idle=idle):
                found = await p17_reads.trial(readers, writers, seconds, None)
            for caller in [*readers, *writers]:
                await caller.ws.close()
                caller.reader.cancel()
            return found

        found = asyncio.run(drive())
    note = (
        f"{found['reads_per_s']:.0f} reads/s, "
        f"{found['increments_per_s']:.0f} increments/s under the profiler"
    )
    return [pid], note


def main() -> None:
    from bench.runner import Context
    from bench.servers import Servers

    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("measure", choices=sorted([*PROFILES, *SERVER]))
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument(
        "--side", choices=["subject", "baseline"], default="subject",
        help="server measures: profile the subject or its baseline",
    )  # fmt: skip
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="server measures: load time"
    )
    parser.add_argument(
        "--idle", action="store_true",
        help="server measures: keep waiting threads' samples (wall-clock view)",
    )  # fmt: skip
    args = parser.parse_args()
    measure = args.measure.upper()
    servers = Servers()
    try:
        ctx = Context(servers=servers, quick=False)
        if measure in SERVER:
            db, env = args.db, {}
            if measure in SHAPES:
                db, env = "postgresql", {"RIVET_BENCH_REDIS_URL": servers.redis()}
            params = {"measure": measure, "side": args.side, "idle": args.idle,
                      "seconds": args.seconds, "label": db}  # fmt: skip
            print(ctx.leg("bench.profile:server_leg", params, db=db, env=env))
        else:
            print(ctx.leg("bench.profile:leg", {"measure": measure}, db=args.db))
    finally:
        servers.close()


if __name__ == "__main__":
    sys.exit(main())
