"""P15: workflow streams and actor events over Server-Sent Events, through daphne.

PostgreSQL (default durability) + Redis + one daphne serving the quickstart's
stack (``bench.asgi``). Two legs:

* **A stream and its readers.** This process is the worker: it runs the
  ``benchStream`` workflow, which writes ``count`` small values to a stream
  as fast as it can, while ``readers`` SSE clients (a process of their own,
  :mod:`.sse_clients`) follow it through daphne. The driver's commits are
  timed here (``internals.record_stream_commits``) and each value's receipt
  there: the rows give values written per second (target >= 1,000) against
  the same workflow with no reader (same run, alternating), and the latency
  from a value's commit to its receipt over every (reader, value) pair
  (target p99 <= 100 ms), with duplicates and gaps (both must be 0).
* **Actor events: SSE against a WebSocket.** One SSE reader of
  ``/rivet/actors/bench/events`` and one WebSocket subscriber of the same
  actor, connected together; the actor broadcasts ``bursts`` x ``burst``
  events (one invocation per burst, one after the other). Per trial, each
  receiver's events per second (from the first call to its last event);
  the ratio SSE / WebSocket is paired per trial (target >= 0.8x).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

from bench.core import Row, Target, row_from, summarize

ID = "P15"
TITLE = "workflow streams and actor events over SSE (daphne, PostgreSQL + Redis)"
WRITE_TARGET = Target("value", ">=", 1000)
LATENCY_TARGET = Target("value", "<=", 100)
ACTOR_TARGET = Target("ratio", ">=", 0.8)


# -- the stream leg -------------------------------------------------------------------
def _stream_trial(url: str, pid: int, count: int, readers: int) -> dict[str, Any]:
    from bench import internals
    from bench.measures.hot import cpu_seconds
    from bench.servers import python_env
    from django_rivet import workflows
    from django_rivet.testing import run_until_idle

    workflow_id = f"stream-{uuid.uuid4().hex[:12]}"
    handle = workflows.start("benchStream", count, id=workflow_id)
    clients = None
    if readers:
        clients = subprocess.Popen(
            [sys.executable, "-m", "bench.measures.sse_clients",
             f"{url}/rivet/workflows/{workflow_id}/streams/n", str(readers)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=python_env(),
        )  # fmt: skip
        assert clients.stdout is not None and clients.stdin is not None
        if clients.stdout.readline().strip() != "ready":
            raise RuntimeError("the SSE readers did not start")
    commits: dict[int, float] = {}
    internals.record_stream_commits(commits)
    server_cpu, writer_cpu = cpu_seconds(pid), time.process_time()
    client_cpu = 0.0 if clients is None else cpu_seconds(clients.pid)
    started = time.time()
    assert run_until_idle(handle) == "completed"
    written = count / (max(commits.values()) - started)
    found: dict[str, Any] = {
        "values_per_s": written,
        "writer_cpu_s": time.process_time() - writer_cpu,
    }
    if clients is not None:
        assert clients.stdin is not None and clients.stdout is not None
        clients.stdin.write(json.dumps(commits) + "\n")
        clients.stdin.flush()
        found.update(json.loads(clients.stdout.readline()))
        found["client_cpu_s"] = cpu_seconds(clients.pid) - client_cpu
        clients.wait(60)
    found["server_cpu_s"] = cpu_seconds(pid) - server_cpu
    found["seconds"] = time.time() - started
    return found


def stream_leg(count: int, readers: int, trials: int) -> dict[str, Any]:
    from bench.servers import daphne

    env = {k: v for k, v in os.environ.items() if k.startswith("RIVET_BENCH_")}
    env["RIVET_BENCH_EMBEDDED"] = "0"
    subject: list[dict[str, Any]] = []
    baseline: list[dict[str, Any]] = []
    with daphne(env) as (url, pid):
        _stream_trial(url, pid, min(count, 200), min(readers, 2))  # warm-up
        for index in range(trials):
            order = ((subject, readers), (baseline, 0))
            for runs, how_many in order if index % 2 == 0 else order[::-1]:
                runs.append(_stream_trial(url, pid, count, how_many))
    rates = [run["values_per_s"] for run in subject]
    alone = [run["values_per_s"] for run in baseline]
    return {
        "written": {
            "subject": summarize(rates),
            "baseline": summarize(alone),
            "ratio": sorted(s / b for s, b in zip(rates, alone, strict=True))[
                len(rates) // 2
            ],
        },
        "p50_ms": statistics.median(run["latencies_ms"][0] for run in subject),
        "p99_ms": statistics.median(run["latencies_ms"][1] for run in subject),
        "p99_runs": [run["latencies_ms"][1] for run in subject],
        "missing": sum(run["missing"] for run in subject),
        "duplicates": sum(run["duplicates"] for run in subject),
        # CPU seconds per trial of the writer, daphne and the readers'
        # process, and the trial's wall time (the machine is shared).
        "cpu": [
            {
                k: round(run.get(k, 0.0), 2)
                for k in ("writer_cpu_s", "server_cpu_s", "client_cpu_s", "seconds")
            }
            for run in subject
        ],  # fmt: skip
    }


# -- the actor leg --------------------------------------------------------------------
async def _actor_trials(
    url: str, handle: Any, key: str, bursts: int, burst: int, trials: int
) -> Any:
    from websockets.asyncio.client import connect

    from bench.measures.sse_clients import read_events

    await handle.acall("noop")
    ws = await connect(
        url.replace("http://", "ws://")
        + f"/rivet/actors/bench/connect?key={key}&subscribe=burst",
        subprotocols=["rivet"],  # type: ignore[list-item]
        max_queue=None,
    )
    assert json.loads(await ws.recv())["type"] == "init"
    seen = {"sse": [0, 0.0], "ws": [0, 0.0]}

    def on_sse(data: bytes, at: float) -> None:
        found = data.count(b"event: burst\n")
        if found:
            seen["sse"][0] += found
            seen["sse"][1] = at

    async def on_ws() -> None:
        async for frame in ws:
            if json.loads(frame).get("type") == "event":
                seen["ws"][0] += 1
                seen["ws"][1] = time.time()

    opened = asyncio.Event()
    sse_url = f"{url}/rivet/actors/bench/events?key={key}&subscribe=burst"
    tasks = [
        asyncio.ensure_future(read_events(sse_url, on_sse, opened)),
        asyncio.ensure_future(on_ws()),
    ]
    await opened.wait()
    rates: dict[str, list[float]] = {"sse": [], "ws": []}
    missing = 0
    try:
        for index in range(trials + 1):  # the first is a warm-up
            for side in seen.values():
                side[0] = 0
            started = time.time()
            for _ in range(bursts):
                await handle.acall("burst", burst)
            expected = bursts * burst
            deadline = time.time() + 30
            while min(s[0] for s in seen.values()) < expected:
                if time.time() > deadline:
                    break
                await asyncio.sleep(0.002)
            missing += sum(expected - s[0] for s in seen.values()) if index else 0
            if index:
                for name, (count, last) in seen.items():
                    rates[name].append(count / (last - started))
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await ws.close()
    return rates, missing


def actor_leg(bursts: int, burst: int, trials: int) -> dict[str, Any]:
    from bench.servers import daphne
    from django_rivet import actors

    env = {k: v for k, v in os.environ.items() if k.startswith("RIVET_BENCH_")}
    env["RIVET_BENCH_EMBEDDED"] = "0"
    key = f"sse-{uuid.uuid4().hex[:8]}"
    handle = actors.get_or_create("bench", key)
    with daphne(env) as (url, _pid):
        rates, missing = asyncio.run(
            _actor_trials(url, handle, key, bursts, burst, trials)
        )
    ratios = sorted(s / w for s, w in zip(rates["sse"], rates["ws"], strict=True))
    return {
        "events": {
            "subject": summarize(rates["sse"]),
            "baseline": summarize(rates["ws"]),
            "ratio": ratios[len(ratios) // 2],
        },
        "missing": missing,
    }


def run(ctx: Any) -> list:
    env = {"RIVET_BENCH_REDIS_URL": ctx.servers.redis()}
    stream = ctx.leg(
        "bench.measures.p15_streams:stream_leg",
        ctx.size(
            {"count": 10_000, "readers": 100, "trials": 3},
            {"count": 300, "readers": 3, "trials": 1},
        ),
        db="postgresql",
        env=env,
    )
    readers = ctx.size(100, 3)
    count = ctx.size(10_000, 300)
    flaws = f", {stream['missing']} missing, {stream['duplicates']} duplicates"
    actor = ctx.leg(
        "bench.measures.p15_streams:actor_leg",
        ctx.size(
            {"bursts": 20, "burst": 100, "trials": 7},
            {"bursts": 2, "burst": 20, "trials": 1},
        ),
        db="postgresql",
        env=env,
    )
    note = f", {actor['missing']} missing" if actor["missing"] else ""
    return [
        row_from(ID, f"{count:,} values written, {readers} SSE readers", "values/s",
                 stream["written"], "no reader", WRITE_TARGET),
        Row(id=ID, measure=f"commit to receipt p99 ({readers} readers{flaws})",
            unit="ms", value={"median": stream["p99_ms"]}, baseline=None,
            baseline_label="", ratio=None, target=LATENCY_TARGET,
            extra={"p50_ms": stream["p50_ms"], "p99_runs": stream["p99_runs"],
                   "cpu": stream["cpu"]}),
        Row(id=ID, measure="commit to receipt p50", unit="ms",
            value={"median": stream["p50_ms"]}, baseline=None, baseline_label="",
            ratio=None),
        row_from(ID, f"actor events, one SSE reader{note}", "events/s",
                 actor["events"], "WebSocket subscriber", ACTOR_TARGET),
    ]  # fmt: skip
