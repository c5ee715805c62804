"""Action round trips per second through daphne, against same-run baselines.

For each database (SQLite in WAL mode, PostgreSQL with default durability)
one daphne process serves:

* ``rivet_http``: ``POST /rivet/actors/bench/actions/increment`` (rivet's
  async view -> ainvoke -> one invocation that locks the actor and writes
  its state);
* ``rivet_ws``: the same action as WebSocket frames on one connection;
* ``plain_view`` / ``plain_async_view``: a Django view doing the same ORM
  work (one transaction locking a row and updating a field);
* ``raw_consumer``: a Channels consumer doing that work per frame;
* ``http_noop`` / ``ws_noop``: the floors, the same trips doing no work.

Every measure is sequential from one client (one reused ``httpx.Client``,
one WebSocket), so the numbers are round-trip latencies inverted, not
throughput under load. Results go to ``bench/results/transport.json``.

Under ASGI, Django runs each request's sync code in a fresh thread-sensitive
context, so a plain view opens a new database connection per request even
with ``CONN_MAX_AGE`` set (Django recommends a connection pool there); that
is part of what the plain-view baseline costs, on PostgreSQL most of all.
rivet's invocations run in long-lived worker threads that keep theirs.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, database_legs, run_leg, write_results

N = int(os.environ.get("RIVET_BENCH_TRANSPORT_N", "2000"))
ROUNDS = 10
SETTINGS = "bench.transport_settings"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def daphne(port: int) -> Iterator[str]:
    """Serve bench.transport_asgi with daphne; yield its base URL."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "bench.transport_asgi:application"],
        cwd=ROOT,
        env=env,
        # Access logs would cost the server time and flood the leg's stdout.
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        import socket

        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError("daphne exited early")
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ws_round_trip(ws, make_frame: Callable[[int], dict], check: Callable) -> Callable:
    counter = iter(range(1, 10**9))

    def once() -> None:
        frame_id = next(counter)
        ws.send(json.dumps(make_frame(frame_id)))
        while True:
            reply = json.loads(ws.recv())
            if reply.get("id") == frame_id:
                check(reply)
                return

    return once


def interleaved(measures: dict[str, Callable[[], None]], n: int) -> dict:
    """Sample every measure in alternating rounds.

    Other processes share the machine's cores; alternating keeps a load
    change from favouring whichever measure ran at a quiet moment.
    """
    times: dict[str, list[float]] = {name: [] for name in measures}
    for fn in measures.values():  # warm-up
        for _ in range(50):
            fn()
    per_round = max(n // ROUNDS, 1)
    for _ in range(ROUNDS):
        for name, fn in measures.items():
            for _ in range(per_round):
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * 1e6)
    results = {}
    for name, samples in times.items():
        samples.sort()
        results[name] = {
            "n": len(samples),
            "median_us": statistics.median(samples),
            "p99_us": samples[int(len(samples) * 0.99) - 1],
            "mean_us": statistics.fmean(samples),
        }
    return results


def leg() -> dict:
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    from bench.common import setup_django

    setup_django()
    import httpx
    from websockets.sync.client import connect

    from bench.benchapp.models import Row

    Row.objects.get_or_create(name="baseline")
    from django.db import connections

    connections.close_all()
    ws_frame = {"type": "action", "name": "increment", "args": []}
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(daphne(free_port()))
        http = stack.enter_context(httpx.Client(base_url=url))
        ws_url = url.replace("http://", "ws://")
        rivet_ws = stack.enter_context(
            connect(
                f"{ws_url}/rivet/actors/bench/connect?key=one", subprotocols=["rivet"]
            )
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

        def ok(reply: dict) -> None:
            assert reply.get("type") == "action_response", reply

        measures = {
            "rivet_http": post("/rivet/actors/bench/actions/increment?key=one"),
            "plain_view": post("/baseline/view"),
            "plain_async_view": post("/baseline/async-view"),
            "rivet_ws": ws_round_trip(rivet_ws, lambda i: {**ws_frame, "id": i}, ok),
            "raw_consumer": ws_round_trip(raw_ws, lambda i: {"id": i}, lambda r: None),
            # Floors: the same trips doing no work at all.
            "http_noop": post("/baseline/noop"),
            "ws_noop": ws_round_trip(
                raw_ws, lambda i: {"id": i, "noop": True}, lambda r: None
            ),
        }
        results = interleaved(measures, N)
    for stats in results.values():
        stats["round_trips_per_s"] = 1e6 / stats["mean_us"]
    results["rivet_http"]["ratio_to_plain_view"] = (
        results["rivet_http"]["round_trips_per_s"]
        / results["plain_view"]["round_trips_per_s"]
    )
    results["rivet_ws"]["ratio_to_raw_consumer"] = (
        results["rivet_ws"]["round_trips_per_s"]
        / results["raw_consumer"]["round_trips_per_s"]
    )
    return results


def main() -> None:
    report = {}
    for label, env in database_legs():
        report[label] = run_leg(__file__, label, env)
    print(
        f"{'database':<12} {'transport':<18} {'rt/s':>8} {'median us':>10} "
        f"{'p99 us':>10}"
    )
    for label, results in report.items():
        for name, stats in results.items():
            print(
                f"{label:<12} {name:<18} {stats['round_trips_per_s']:>8.0f} "
                f"{stats['median_us']:>10.1f} {stats['p99_us']:>10.1f}"
            )
    report["meta"] = {
        "n": N,
        "sequential": True,
        "server": "daphne, 1 process",
        "note": "plain views open a DB connection per request under ASGI",
    }
    print("written", write_results("transport", report))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--leg":
        print(json.dumps(leg()))
    else:
        main()
