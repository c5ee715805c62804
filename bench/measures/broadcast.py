"""P7 (and P9's connections): N WebSocket connections on daphne, Redis layer.

One leg, PostgreSQL and Redis: daphne serves ``bench.asgi`` with the Redis
channel layer; this process opens N django-rivet connections to one actor
(subscribed to ``tick`` through the ``subscribe`` query parameter) and N raw
``GroupConsumer`` connections in one group, and keeps all 2N open.

* daphne's resident memory is read before and after opening each set: the
  growth divided by N is the memory per open connection (P9);
* then trials alternate one broadcast each way, and a trial lasts until all
  N connections of that side got the event:
  - django-rivet: ``await handle.acall("shout", t0)``, an action doing
    ``ctx.broadcast("tick", t0)`` (so the trial includes the invocation's
    transaction, and the event-log row the broadcast writes);
  - baseline: ``channel_layer.group_send`` of an equivalent message to the
    raw consumers' group, from the same process, on the same layer.
  The value is the time until the last connection got it; every
  connection's own delivery time gives the p50/p99.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from bench.core import percentile, summarize


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def _main(url: str, pid: int, count: int, trials: int) -> dict[str, Any]:
    from channels.layers import get_channel_layer
    from websockets.asyncio.client import connect

    from bench.site import BROADCAST_GROUP
    from django_rivet import actors

    ws_url = url.replace("http://", "ws://")
    handle = await actors.aget_or_create("bench", "p7")
    layer = get_channel_layer()
    arrivals: dict[str, list[float]] = {"rivet": [], "raw": []}
    expected: dict[str, asyncio.Future | None] = {"rivet": None, "raw": None}
    readers: list[asyncio.Task] = []
    closed: list[str] = []

    async def reader(ws: Any, side: str) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await read(ws, side)
        except ConnectionClosed as exc:
            closed.append(f"{side}: {exc}")
            for done in expected.values():
                if done is not None and not done.done():
                    done.set_exception(RuntimeError(f"a connection closed: {exc}"))

    async def read(ws: Any, side: str) -> None:
        async for frame in ws:
            data = json.loads(frame)
            if data.get("type") == "event":
                arrivals[side].append(time.perf_counter())
                done = expected[side]
                if done is not None and len(arrivals[side]) >= count:
                    if not done.done():
                        done.set_result(None)

    async def open_many(path: str, side: str, rivet: bool) -> list:
        sockets = []
        for start in range(0, count, 50):  # 50 handshakes in flight at most
            batch = [
                connect(
                    ws_url + path,
                    subprotocols=["rivet"] if rivet else None,
                    max_queue=None,
                    open_timeout=60,
                )  # fmt: skip
                for _ in range(start, min(count, start + 50))
            ]
            opened = await asyncio.gather(*batch)
            for ws in opened:
                if rivet:
                    init = json.loads(await ws.recv())
                    assert init["type"] == "init", init
                readers.append(asyncio.create_task(reader(ws, side)))
            sockets += opened
        return sockets

    async def broadcast(side: str) -> list[float]:
        arrivals[side] = []
        done = expected[side] = asyncio.get_running_loop().create_future()
        started = time.perf_counter()
        if side == "rivet":
            await handle.acall("shout", started)
        else:
            await layer.group_send(
                BROADCAST_GROUP,
                {"type": "bench.event", "name": "tick", "args": [started]},
            )
        await asyncio.wait_for(done, 120)
        expected[side] = None
        return [(at - started) * 1000 for at in arrivals[side]]

    memory_start = rss_kib(pid)
    rivet_socks = await open_many("/rivet/actors/bench/connect?key=p7&subscribe=tick",
                                  "rivet", True)  # fmt: skip
    await broadcast("rivet")  # warm-up, and every subscription is live
    await asyncio.sleep(1)
    memory_rivet = rss_kib(pid)
    raw_socks = await open_many("/baseline/group", "raw", False)
    await broadcast("raw")
    await asyncio.sleep(1)
    memory_raw = rss_kib(pid)

    latencies: dict[str, list[float]] = {"rivet": [], "raw": []}
    totals: dict[str, list[float]] = {"rivet": [], "raw": []}
    for index in range(trials):
        for side in ("raw", "rivet") if index % 2 == 0 else ("rivet", "raw"):
            found = await broadcast(side)
            latencies[side] += found
            totals[side].append(max(found))
            await asyncio.sleep(0.05)
    for ws in rivet_socks + raw_socks:
        await ws.close()
    for task in readers:
        task.cancel()
    ratios = [r / b for r, b in zip(totals["rivet"], totals["raw"], strict=True)]
    return {
        "subject": summarize(totals["rivet"]),
        "baseline": summarize(totals["raw"]),
        "ratio": sorted(ratios)[len(ratios) // 2],
        "delivery": {
            side: {"p50_ms": percentile(v, 0.5), "p99_ms": percentile(v, 0.99)}
            for side, v in latencies.items()
        },
        "memory_kib": {"start": memory_start, "rivet": memory_rivet, "raw": memory_raw},
        "connections": count,
    }


def leg(count: int, trials: int) -> dict[str, Any]:
    from django.db import connections

    from bench.servers import daphne

    env = {k: v for k, v in os.environ.items() if k.startswith("RIVET_BENCH_")}
    env["RIVET_BENCH_EMBEDDED"] = "0"
    connections.close_all()
    with daphne(env) as (url, pid):
        return asyncio.run(_main(url, pid, count, trials))


def results(ctx: Any) -> dict[str, Any]:
    """Run (once per benchmark run) the connections leg."""
    params = ctx.size({"count": 1000, "trials": 15}, {"count": 10, "trials": 1})
    return ctx.once(
        "broadcast",
        lambda: ctx.leg(
            "bench.measures.broadcast:leg",
            params,
            db="postgresql",
            env={"RIVET_BENCH_REDIS_URL": ctx.servers.redis()},
        ),
    )
