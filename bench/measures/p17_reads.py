"""P17: one hot actor read by many sockets while a few write (P12's stack).

PostgreSQL (default durability) + Redis + one daphne serving the
quickstart's stack (``bench.asgi``). 50 WebSocket clients on the ``hot``
actor, each subscribed to its ``changed`` event as in P12: 45 call a read in
a loop, one call at a time, and 5 call ``increment`` (which broadcasts
``changed`` to all 50). Two arms, on two keys of the same actor class,
alternating trials (the other arm's sockets stay open and idle):

* subject: the reads call ``get``, an ``@action(readonly=True)``: no lock,
  they never queue behind the increments;
* baseline: the reads call ``getLocked``, the same code as a plain action:
  it takes the actor's lock, queuing in the actor's lane with the
  increments.

Rows: reads answered per second (the target: >= 5x the baseline), and the
increments per second of each arm, to compare with P12's (the writers must
not starve), with the latency of each kind of call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
from typing import Any

from bench.core import Row, Target, percentile, row_from, summarize
from bench.measures.hot import cpu_seconds

ID = "P17"
TITLE = "one hot actor: 45 sockets reading, 5 incrementing (daphne, PostgreSQL)"
TARGET = Target("ratio", ">=", 5.0)
ARMS = {"readonly": "get", "locked": "getLocked"}


class Caller:
    """One socket: calls one action at a time; counts the events it receives."""

    def __init__(self, ws: Any, action: str) -> None:
        self.ws = ws
        self.action = action
        self.events = 0
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.next_id = 0
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for frame in self.ws:
            data = json.loads(frame)
            if data.get("type") == "event":
                self.events += 1
                continue
            waiter = self.pending.pop(data.get("id", data.get("action_id")), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(data)

    async def call(self) -> None:
        self.next_id += 1
        waiter = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = waiter
        frame = {"type": "action", "id": self.next_id, "name": self.action, "args": []}
        await self.ws.send(json.dumps(frame))
        reply = await asyncio.wait_for(waiter, 60)
        if reply.get("type") != "action_response":
            raise RuntimeError(f"call failed: {reply}")


async def trial(
    readers: list[Caller], writers: list[Caller], duration: float, pid: int | None
) -> dict[str, Any]:
    """Every caller calls until ``duration`` is over; count what was answered."""
    latencies: dict[str, list[float]] = {"read": [], "write": []}
    cpu_before = cpu_seconds(pid) if pid else 0.0
    started = time.perf_counter()
    deadline = started + duration

    async def calls(caller: Caller, kind: str) -> int:
        done = 0
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            await caller.call()
            latencies[kind].append((time.perf_counter() - began) * 1000)
            done += 1
        return done

    counts = await asyncio.gather(
        *(calls(c, "read") for c in readers), *(calls(c, "write") for c in writers)
    )
    elapsed = time.perf_counter() - started
    reads = sum(counts[: len(readers)])
    writes = sum(counts[len(readers) :])
    server_cpu = (cpu_seconds(pid) - cpu_before) if pid else 0.0
    return {
        "reads_per_s": reads / elapsed,
        "increments_per_s": writes / elapsed,
        "latencies": latencies,
        "server_cpu_ms_per_call": 1000 * server_cpu / max(reads + writes, 1),
    }


async def _open(url: str, key: str, readers: int, writers: int, read: str) -> tuple:
    from websockets.asyncio.client import connect

    opened: dict[str, list[Caller]] = {"read": [], "write": []}
    for index in range(readers + writers):
        ws = await connect(
            url.replace("http://", "ws://")
            + f"/rivet/actors/hot/connect?key={key}&subscribe=changed",
            subprotocols=["rivet"],  # type: ignore[list-item]
            max_queue=None,
            open_timeout=60,
        )
        init = json.loads(await ws.recv())
        assert init["type"] == "init", init
        kind = "read" if index < readers else "write"
        opened[kind].append(Caller(ws, read if kind == "read" else "increment"))
    return opened["read"], opened["write"]


async def _main(
    url: str, pid: int, readers: int, writers: int, duration: float, trials: int
) -> dict[str, Any]:
    arms = {
        arm: await _open(url, f"p17-{arm}", readers, writers, action)
        for arm, action in ARMS.items()
    }
    found: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    order = list(ARMS)
    try:
        for arm in order:  # warm-up, dropped
            await trial(*arms[arm], min(duration, 1.0), None)
        for index in range(trials):
            for arm in order if index % 2 == 0 else order[::-1]:
                found[arm].append(await trial(*arms[arm], duration, pid))
                await asyncio.sleep(0.2)
    finally:
        for callers in arms.values():
            for caller in [*callers[0], *callers[1]]:
                with contextlib.suppress(Exception):
                    await caller.ws.close()
                caller.reader.cancel()
    out: dict[str, Any] = {"readers": readers, "writers": writers}
    for arm, runs in found.items():
        reads = [ms for run in runs for ms in run["latencies"]["read"]]
        writes = [ms for run in runs for ms in run["latencies"]["write"]]
        out[arm] = {
            "reads": [run["reads_per_s"] for run in runs],
            "increments": [run["increments_per_s"] for run in runs],
            "read_p50_ms": percentile(reads, 0.5),
            "read_p99_ms": percentile(reads, 0.99),
            "write_p50_ms": percentile(writes, 0.5),
            "write_p99_ms": percentile(writes, 0.99),
            "server_cpu_ms_per_call": statistics.median(
                run["server_cpu_ms_per_call"] for run in runs
            ),
        }
    for what in ("reads", "increments"):
        subject, baseline = out["readonly"][what], out["locked"][what]
        ratios = sorted(s / b for s, b in zip(subject, baseline, strict=True) if b)
        out[what] = {
            "subject": summarize(subject),
            "baseline": summarize(baseline),
            "ratio": ratios[len(ratios) // 2] if ratios else None,
        }
    return out


def leg(readers: int, writers: int, duration: float, trials: int) -> dict[str, Any]:
    from bench.servers import daphne

    env = {k: v for k, v in os.environ.items() if k.startswith("RIVET_BENCH_")}
    env["RIVET_BENCH_EMBEDDED"] = "0"
    with daphne(env) as (url, pid):
        return asyncio.run(_main(url, pid, readers, writers, duration, trials))


def run(ctx: Any) -> list:
    params = ctx.size(
        {"readers": 45, "writers": 5, "duration": 5.0, "trials": 5},
        {"readers": 4, "writers": 1, "duration": 0.2, "trials": 1},
    )
    found = ctx.leg(
        "bench.measures.p17_reads:leg",
        params,
        db="postgresql",
        env={"RIVET_BENCH_REDIS_URL": ctx.servers.redis()},
    )
    shape = f"{found['readers']} reading + {found['writers']} incrementing, 1 actor"
    ro, locked = found["readonly"], found["locked"]
    latency = (
        f"p50/p99 {ro['read_p50_ms']:.0f}/{ro['read_p99_ms']:.0f} ms"
        f" vs {locked['read_p50_ms']:.0f}/{locked['read_p99_ms']:.0f}"
    )
    writes = (
        f"p50/p99 {ro['write_p50_ms']:.0f}/{ro['write_p99_ms']:.0f} ms"
        f" vs {locked['write_p50_ms']:.0f}/{locked['write_p99_ms']:.0f}"
    )
    return [
        row_from(ID, f"{shape}: reads ({latency})", "/s", found["reads"],
                 "reads taking the lock", TARGET,
                 server_cpu_ms_per_call={
                     arm: found[arm]["server_cpu_ms_per_call"] for arm in ARMS}),
        row_from(ID, f"{shape}: increments ({writes})", "/s",
                 found["increments"], "beside locked reads", Target()),
        Row(id=ID, measure=f"{shape}: read latency p99", unit="ms",
            value={"median": ro["read_p99_ms"]},
            baseline={"median": locked["read_p99_ms"]},
            baseline_label="reads taking the lock",
            ratio=ro["read_p99_ms"] / locked["read_p99_ms"]
            if locked["read_p99_ms"] else None),
    ]  # fmt: skip
