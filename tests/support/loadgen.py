"""Clients for the load and fault tests: many sockets and callers, counted exactly.

Each client holds one WebSocket subscribed to its actor's ``changed`` events
and makes ``increments`` calls of ``tally.add(token)`` -- over its socket or
over HTTP. Tokens make a retried call idempotent (the actor counts each token
once), so a call whose answer was lost in an outage is retried until it is
acknowledged and every count must come out exact. Every error a caller sees
is recorded by code, every close code of every socket too, and every seq a
socket receives, with the ranges the server said it could not deliver
(``actor/events_missed``, ``actor/event_log_truncated``).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from typing import Any

from django_rivet.client import Client
from django_rivet.client.connection import AsyncConnection
from django_rivet.exceptions import RivetError

# Codes of the frames that say "these events will not come; refetch the state".
TOLD_CODES = {"actor/events_missed", "actor/event_log_truncated"}


@dataclasses.dataclass
class Socket:
    """One observing connection and everything it saw."""

    key: str
    conn: AsyncConnection
    seqs: list[int] = dataclasses.field(default_factory=list)
    told: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    closes: list[int | None] = dataclasses.field(default_factory=list)

    def missing(self, expected: int) -> list[int]:
        """Seqs 1..expected this socket neither received nor was told about."""
        got = set(self.seqs)
        lost = []
        for seq in range(1, expected + 1):
            if seq in got:
                continue
            if any(told_covers(told, seq) for told in self.told):
                continue
            lost.append(seq)
        return lost

    def in_order(self) -> bool:
        return all(a < b for a, b in zip(self.seqs, self.seqs[1:], strict=False))


def told_covers(metadata: dict[str, Any], seq: int) -> bool:
    """Whether a told frame's metadata covers ``seq`` (after since, before oldest)."""
    since = metadata.get("since") or 0
    oldest = metadata.get("oldest")
    if oldest is None:  # nothing left in the log: everything after since
        latest = metadata.get("latest") or 0
        return since < seq <= latest
    return since < seq < oldest


@dataclasses.dataclass
class Run:
    """What a load run measured."""

    sockets: list[Socket]
    expected: dict[str, int]
    latencies_ms: list[float]
    call_errors: collections.Counter[str]
    increments: int
    seconds: float

    @property
    def throughput(self) -> float:
        return self.increments / self.seconds

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]

    def delivered(self) -> tuple[int, int]:
        """(events received, events expected) over every socket."""
        got = sum(len(set(s.seqs)) for s in self.sockets)
        return got, sum(self.expected[s.key] for s in self.sockets)

    def told_sockets(self) -> int:
        return sum(1 for s in self.sockets if s.told)

    def silent_sockets(self) -> list[Socket]:
        """Sockets that lost events without being told."""
        return [s for s in self.sockets if s.missing(self.expected[s.key])]

    def close_codes(self) -> collections.Counter[int | None]:
        return collections.Counter(code for s in self.sockets for code in s.closes)

    def summary(self) -> dict[str, Any]:
        got, expected = self.delivered()
        return {
            "increments": self.increments,
            "seconds": round(self.seconds, 1),
            "throughput_per_s": round(self.throughput, 1),
            "p50_ms": round(self.percentile(0.5), 1),
            "p99_ms": round(self.percentile(0.99), 1),
            "events_delivered": got,
            "events_expected": expected,
            "sockets": len(self.sockets),
            "sockets_told": self.told_sockets(),
            "sockets_silent": len(self.silent_sockets()),
            "close_codes": dict(self.close_codes()),
            "call_errors": dict(self.call_errors),
        }


def _error_code(exc: BaseException) -> str:
    if isinstance(exc, RivetError):
        return exc.qualified_code
    return type(exc).__name__


async def _observe(client: Client, key: str) -> Socket:
    conn = await client.actor("tally", key).connect()
    socket = Socket(key, conn)

    def on_event(count: int) -> None:
        # The client sets last_seq to this event's seq before calling handlers.
        socket.seqs.append(conn.last_seq or 0)

    def on_error(error: RivetError) -> None:
        socket.errors.append(error.qualified_code)
        if error.qualified_code in TOLD_CODES:
            socket.told.append(dict(error.metadata or {}))

    closed = conn._on_closed

    def record_close(code: int | None) -> None:
        socket.closes.append(code)
        closed(code)

    conn._on_closed = record_close  # type: ignore[method-assign]
    conn.on("changed", on_event)
    conn.on_error(on_error)
    await conn.call("count")  # the subscription is in place
    return socket


async def _call(
    socket: Socket | None,
    client: Client,
    key: str,
    token: str,
    latencies: list[float],
    errors: collections.Counter[str],
    deadline: float,
) -> None:
    """Call ``add(token)`` until acknowledged (retrying is safe: tokens count once)."""
    while True:
        started = time.perf_counter()
        try:
            if socket is not None:
                await socket.conn.call("add", token, timeout=30)
            else:
                await client.actor("tally", key).acall("add", token)
        except Exception as exc:
            errors[_error_code(exc)] += 1
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"add({token!r}) never succeeded: {exc!r}"
                ) from exc
            await asyncio.sleep(0.1)
            continue
        latencies.append((time.perf_counter() - started) * 1000)
        return


async def run_load(
    urls: list[str],
    keys: list[str],
    increments: int,
    *,
    during: Any = None,
    connected: Any = None,
    timeout: float = 240.0,
) -> Run:
    """Client ``i`` works on ``keys[i]`` through ``urls[(i // 2) % len(urls)]``.

    Even clients call over their socket, odd ones over HTTP; every client's
    socket observes its actor. ``during`` (a coroutine function) runs while
    the calls are in flight -- the fault tests inject their fault there;
    ``connected`` (a function) is called once every socket is open.
    """
    clients = {url: Client(url + "/rivet", timeout=30) for url in urls}
    deadline = time.monotonic() + timeout
    sockets: list[Socket] = []
    try:
        sockets = list(
            await asyncio.gather(
                *[
                    _observe(clients[urls[(i // 2) % len(urls)]], key)
                    for i, key in enumerate(keys)
                ]
            )
        )
        latencies: list[float] = []
        errors: collections.Counter[str] = collections.Counter()
        if connected is not None:
            connected()

        async def work(index: int, key: str) -> None:
            client = clients[urls[(index // 2) % len(urls)]]
            socket = sockets[index] if index % 2 == 0 else None
            for n in range(increments):
                token = f"{index}-{n}"
                await _call(socket, client, key, token, latencies, errors, deadline)

        started = time.perf_counter()
        workers = [asyncio.create_task(work(i, key)) for i, key in enumerate(keys)]
        if during is not None:
            await during()
        await asyncio.gather(*workers)
        seconds = time.perf_counter() - started
        expected = collections.Counter(keys)
        expected_events = {key: count * increments for key, count in expected.items()}
        # Events still on their way: wait (bounded) until every socket has the
        # last seq of its actor, or stops getting closer.
        await _settle(sockets, expected_events, deadline)
        return Run(
            sockets,
            expected_events,
            latencies,
            errors,
            increments * len(keys),
            seconds,
        )
    finally:
        await asyncio.gather(
            *[socket.conn.close() for socket in sockets], return_exceptions=True
        )
        for client in clients.values():
            await client.aclose()


async def _settle(
    sockets: list[Socket], expected: dict[str, int], deadline: float
) -> None:
    last_progress = time.monotonic()
    seen = -1
    while time.monotonic() < deadline:
        done = [max(s.seqs, default=0) >= expected[s.key] for s in sockets]
        if all(done):
            return
        total = sum(len(s.seqs) for s in sockets)
        if total != seen:
            seen, last_progress = total, time.monotonic()
        elif time.monotonic() - last_progress > 30:
            return  # nothing moves any more: the assertions will say what is missing
        await asyncio.sleep(0.1)


async def final_counts(url: str, keys: list[str]) -> dict[str, int]:
    """The actors' counts, read over HTTP."""
    client = Client(url + "/rivet", timeout=30)
    try:
        return {
            key: await client.actor("tally", key).acall("count") for key in set(keys)
        }
    finally:
        await client.aclose()
