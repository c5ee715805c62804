"""P12 and P13: many sockets calling and watching actors through daphne.

One leg, PostgreSQL (default durability) and Redis: one or two daphne
processes serve ``bench.asgi`` (the quickstart's stack) with the Redis
channel layer. This process opens ``clients`` WebSocket connections per
side; client ``i`` works on key ``keys[i % len(keys)]`` through daphne
``(i // 2) % webs`` (the load test's layout), watches that key's events and
calls ``increment`` on it in a loop, one call at a time, for ``duration``
seconds:

* django-rivet: ``/rivet/actors/hot/connect?key=K&subscribe=changed``; the
  ``hot`` actor's ``increment`` bumps ``state["n"]`` and broadcasts
  ``changed`` (logged in the event log, delivered to every socket of K);
* baseline: ``bench.site.HotConsumer`` on the same servers, a raw Channels
  consumer doing that work by hand: lock the key's row, update it, commit,
  ``group_send`` to the key's sockets, answer.

Trials alternate the sides (the other side's sockets stay open and idle). A
trial ends once every caller got its last answer *and* every socket got the
event of every increment on its key (or 30 s passed: the row then says how
many never came). Reported per side: increments answered per second, event
frames delivered per second (until the last one arrived), and the latency
of every call (p50/p99).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.core import percentile, summarize

SIDES = ("rivet", "raw")
# Seconds a trial waits for the events of its last increments.
DRAIN_TIMEOUT = 30.0


class Client:
    """One socket: calls one at a time, counts the events it receives."""

    def __init__(self, ws: Any, key: str) -> None:
        self.ws = ws
        self.key = key
        self.events = 0
        self.last_event = 0.0
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.next_id = 0
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for frame in self.ws:
            data = json.loads(frame)
            kind = data.get("type")
            if kind == "event":
                self.events += 1
                self.last_event = time.perf_counter()
                continue
            waiter = self.pending.pop(data.get("id", data.get("action_id")), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(data)

    async def call(self) -> None:
        self.next_id += 1
        waiter = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = waiter
        await self.ws.send(
            json.dumps(
                {"type": "action", "id": self.next_id, "name": "increment", "args": []}
            )
        )
        reply = await asyncio.wait_for(waiter, 60)
        if reply.get("type") != "action_response":
            raise RuntimeError(f"call failed: {reply}")


def cpu_seconds(pid: int) -> float:
    """Return the CPU time (user + system) process ``pid`` has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def trial(
    clients: list[Client], duration: float, pids: list[int] = ()
) -> dict[str, Any]:
    """Every client calls until ``duration`` is over; then wait for the events.

    Also returns the CPU seconds the servers (``pids``) and this client used
    per increment (what the server spends on one, free of the machine's load).
    """
    for client in clients:
        client.events = 0
    cpu_before = [cpu_seconds(pid) for pid in pids]
    client_before = time.process_time()
    latencies: list[float] = []
    started = time.perf_counter()
    deadline = started + duration

    async def calls(client: Client) -> int:
        done = 0
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            await client.call()
            latencies.append((time.perf_counter() - began) * 1000)
            done += 1
        return done

    counts = await asyncio.gather(*(calls(client) for client in clients))
    ended = time.perf_counter()
    per_key: dict[str, int] = {}
    sockets: dict[str, int] = {}
    for client, count in zip(clients, counts, strict=True):
        per_key[client.key] = per_key.get(client.key, 0) + count
        sockets[client.key] = sockets.get(client.key, 0) + 1
    expected = sum(per_key[key] * sockets[key] for key in per_key)
    drain_until = time.perf_counter() + DRAIN_TIMEOUT
    while sum(c.events for c in clients) < expected:
        if time.perf_counter() > drain_until:
            break
        await asyncio.sleep(0.005)
    received = sum(c.events for c in clients)
    last_event = max((c.last_event for c in clients), default=ended)
    calls_total = sum(counts)
    server_cpu = sum(cpu_seconds(pid) for pid in pids) - sum(cpu_before)
    return {
        "server_cpu_ms_per_increment": 1000 * server_cpu / max(calls_total, 1),
        "client_cpu_ms_per_increment": (
            1000 * (time.process_time() - client_before) / max(calls_total, 1)
        ),
        "increments_per_s": calls_total / (ended - started),
        "events_per_s": received / (max(last_event, ended) - started),
        "latencies_ms": latencies,
        "events_expected": expected,
        "events_received": received,
    }


async def _open(
    urls: list[str], keys: list[str], clients: int, path: Callable[[str], str],
    rivet: bool,
) -> list[Client]:  # fmt: skip
    from websockets.asyncio.client import connect

    opened: list[Client] = []
    for index in range(clients):
        key = keys[index % len(keys)]
        base = urls[(index // 2) % len(urls)].replace("http://", "ws://")
        ws = await connect(
            base + path(key),
            subprotocols=["rivet"] if rivet else None,  # type: ignore[list-item]
            max_queue=None,
            open_timeout=60,
        )
        if rivet:
            init = json.loads(await ws.recv())
            assert init["type"] == "init", init
        opened.append(Client(ws, key))
    return opened


async def _main(
    urls: list[str],
    pids: list[int],
    keys: list[str],
    clients: int,
    duration: float,
    trials: int,
) -> dict[str, Any]:
    sides = {
        "rivet": await _open(
            urls, keys, clients,
            lambda key: f"/rivet/actors/hot/connect?key={key}&subscribe=changed",
            True,
        ),
        "raw": await _open(urls, keys, clients, lambda key: f"/baseline/hot/{key}",
                           False),
    }  # fmt: skip
    found: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    try:
        for side in SIDES:  # warm-up, dropped
            await trial(sides[side], min(duration, 1.0))
        for index in range(trials):
            for side in SIDES if index % 2 == 0 else SIDES[::-1]:
                found[side].append(await trial(sides[side], duration, pids))
                await asyncio.sleep(0.2)
    finally:
        for client in sides["rivet"] + sides["raw"]:
            with contextlib.suppress(Exception):
                await client.ws.close()
            client.reader.cancel()
    out: dict[str, Any] = {"clients": clients, "keys": len(keys), "webs": len(urls)}
    for side, runs in found.items():
        latencies = [ms for run in runs for ms in run["latencies_ms"]]
        out[side] = {
            "increments": [run["increments_per_s"] for run in runs],
            "events": [run["events_per_s"] for run in runs],
            "p50_ms": percentile(latencies, 0.5),
            "p99_ms": percentile(latencies, 0.99),
            "events_missing": sum(
                run["events_expected"] - run["events_received"] for run in runs
            ),
            "server_cpu_ms_per_increment": statistics.median(
                run["server_cpu_ms_per_increment"] for run in runs
            ),
            "client_cpu_ms_per_increment": statistics.median(
                run["client_cpu_ms_per_increment"] for run in runs
            ),
        }
    for what in ("increments", "events"):
        subject, baseline = out["rivet"][what], out["raw"][what]
        ratios = sorted(s / b for s, b in zip(subject, baseline, strict=True) if b)
        out[what] = {
            "subject": summarize(subject),
            "baseline": summarize(baseline),
            "ratio": ratios[len(ratios) // 2] if ratios else None,
        }
    return out


def leg(
    webs: int, keys: int, clients: int, duration: float, trials: int
) -> dict[str, Any]:
    import cbor2
    from django.db import connections

    from bench.benchapp.models import Row
    from bench.servers import daphne
    from bench.site import hot_row

    names = [f"k{index}" for index in range(keys)]
    for name in names:
        Row.objects.get_or_create(
            name=hot_row(name), defaults={"state": cbor2.dumps({"n": 0})}
        )
    connections.close_all()
    env = {k: v for k, v in os.environ.items() if k.startswith("RIVET_BENCH_")}
    env["RIVET_BENCH_EMBEDDED"] = "0"
    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(daphne(env)) for _ in range(webs)]
        urls, pids = [url for url, _ in started], [pid for _, pid in started]
        return asyncio.run(_main(urls, pids, names, clients, duration, trials))


def results(ctx: Any, measure: str, webs: int, keys: int) -> dict[str, Any]:
    """Run the leg of one shape (P12: 1 daphne, 1 actor; P13: 2 and 10)."""
    params = ctx.size(
        {"webs": webs, "keys": keys, "clients": 50, "duration": 5.0, "trials": 5},
        {"webs": webs, "keys": keys, "clients": 4, "duration": 0.2, "trials": 1},
    )
    return ctx.leg(  # type: ignore[no-any-return]
        "bench.measures.hot:leg",
        params,
        db="postgresql",
        env={"RIVET_BENCH_REDIS_URL": ctx.servers.redis()},
    )
