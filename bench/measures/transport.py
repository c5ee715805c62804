"""P2 and P3: actions through daphne, against same-server floors and baselines.

One leg per database (SQLite-WAL, PostgreSQL) starts one daphne process
serving ``bench.asgi`` and, from one client process, measures in rotating
rounds:

* ``rivet_http``: ``POST /rivet/actors/bench/actions/increment`` on one
  keep-alive ``httpx.Client``;
* ``same_commit``: an async view making the action's durable commit and
  nothing else (one raw ``UPDATE`` in a transaction, on a long-lived
  thread that keeps its connection): P2's floor since issue 46;
* ``plain_view``: a sync Django view doing the same work with the ORM
  (``select_for_update().get()``, bump the CBOR state, ``save()``, in
  ``atomic``);
* ``http_noop``: a no-op async view on the same server (P2's floor until
  issue 46, still printed);
* ``rivet_ws``: the same action as WebSocket frames on one connection;
* ``raw_consumer``: a raw Channels consumer doing that ORM work per frame
  (P3's baseline); ``ws_noop``: the same frames doing no work (the floor).

Every trial is sequential from one client, so throughput here is round trips
per second of one client (latency inverted), not the server under load.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from typing import Any

from bench.core import rounds

MEASURES = ("rivet_http", "http_noop", "same_commit", "plain_view", "rivet_ws",
            "raw_consumer", "ws_noop")  # fmt: skip


def ops_per_s(fn: Callable[[], None], count: int) -> Callable[[], float]:
    def trial() -> float:
        started = time.perf_counter()
        for _ in range(count):
            fn()
        return count / (time.perf_counter() - started)

    return trial


def ws_round_trip(ws: Any, make_frame: Callable[[int], dict]) -> Callable[[], None]:
    counter = iter(range(1, 10**9))

    def once() -> None:
        frame_id = next(counter)
        ws.send(json.dumps(make_frame(frame_id)))
        while True:
            reply = json.loads(ws.recv())
            if reply.get("id") == frame_id:
                assert "error" not in reply.get("type", ""), reply
                return

    return once


def prepare() -> dict[str, str]:
    """Create the baselines' row; return the environment daphne is served with."""
    import cbor2
    from django.db import connections

    from bench.benchapp.models import Row

    for name in ("baseline", "same-commit"):
        Row.objects.get_or_create(name=name, defaults={"state": cbor2.dumps({"n": 0})})
    connections.close_all()
    env = {k: v for k, v in os.environ.items() if k.startswith("RIVET_BENCH_")}
    env["RIVET_BENCH_EMBEDDED"] = "0"  # no background worker in the server
    return env


def clients(stack: contextlib.ExitStack, url: str) -> dict[str, Callable[[], None]]:
    """Open one HTTP client and two sockets; return one round trip per measure."""
    import httpx
    from websockets.sync.client import connect

    http = stack.enter_context(httpx.Client(base_url=url))
    ws_url = url.replace("http://", "ws://")
    rivet_ws = stack.enter_context(
        connect(f"{ws_url}/rivet/actors/bench/connect?key=p3", subprotocols=["rivet"])  # type: ignore[list-item]
    )
    assert json.loads(rivet_ws.recv())["type"] == "init"
    raw_ws = stack.enter_context(connect(f"{ws_url}/baseline/ws"))

    def post(path: str) -> Callable[[], None]:
        def once() -> None:
            response = http.post(
                path,
                content=b'{"args":[]}',
                headers={"Content-Type": "application/json"},
            )
            assert response.status_code == 200, response.text

        return once

    frame = {"type": "action", "name": "increment", "args": []}
    return {
        "rivet_http": post("/rivet/actors/bench/actions/increment?key=p2"),
        "http_noop": post("/baseline/noop"),
        "same_commit": post("/baseline/same-commit"),
        "plain_view": post("/baseline/view"),
        "rivet_ws": ws_round_trip(rivet_ws, lambda i: {**frame, "id": i}),
        "raw_consumer": ws_round_trip(raw_ws, lambda i: {"id": i}),
        "ws_noop": ws_round_trip(raw_ws, lambda i: {"id": i, "noop": True}),
    }


def leg(trials: int, batch: int) -> dict[str, Any]:
    from bench.servers import daphne

    env = prepare()
    with contextlib.ExitStack() as stack:
        url, _ = stack.enter_context(daphne(env))
        fns = clients(stack, url)
        return rounds({name: ops_per_s(fn, batch) for name, fn in fns.items()},
                      trials, warmup=2)  # fmt: skip


def results(ctx: Any) -> dict[str, dict[str, Any]]:
    """Run (once per benchmark run) the transport legs of both databases."""
    params = ctx.size({"trials": 15, "batch": 100}, {"trials": 1, "batch": 3})
    return ctx.once(  # type: ignore[no-any-return]
        "transport",
        lambda: {
            label: ctx.leg("bench.measures.transport:leg", params, db=db)
            for db, label in (("sqlite", "SQLite-WAL"), ("postgresql", "PostgreSQL"))
        },
    )
