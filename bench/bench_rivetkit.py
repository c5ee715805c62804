"""The official RivetKit client's round trips against django-rivet's own.

One daphne (bench.transport_asgi, both protocols under ``/rivet``) per
database; from one Node process, interleaved in rounds
(bench/rivetkit_rt.mjs):

* ``own_http`` / ``own_ws``: django-rivet's own protocol (SPEC 4), with
  ``fetch`` and the ``ws`` package -- what rivet.js does;
* ``rk_http_<encoding>``: ``client.bench.getOrCreate(key).increment()`` of
  the unchanged ``rivetkit`` client (gateway by name, ``bare``/``json``/``cbor``);
* ``rk_ws_<encoding>``: ``conn.increment()`` on one of its connections.

Then, from Python on the same server, ``py_http`` / ``py_ws``: the own
protocol with httpx and websockets (as bench_transport.py measures it).
Sequential, one caller: round-trip latencies inverted, not throughput.
rivetkit is installed from npm into the test cache (tests/support/rivetkit_node.py).
Results go to ``bench/results/rivetkit.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_transport import daphne, free_port, interleaved, ws_round_trip
from bench.common import ROOT, database_legs, run_leg, write_results

N = int(os.environ.get("RIVET_BENCH_RIVETKIT_N", "1000"))
ROUNDS = 10
VERSION = "2.3.19"
SETTINGS = "bench.transport_settings"


def leg() -> dict:
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    from bench.common import setup_django

    setup_django()
    import httpx
    from django.db import connections
    from websockets.sync.client import connect

    from tests.support.rivetkit_node import install_rivetkit

    connections.close_all()
    modules = install_rivetkit(VERSION)
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(daphne(free_port()))
        node = subprocess.run(
            ["node", str(ROOT / "bench" / "rivetkit_rt.mjs"), f"{url}/rivet",
             str(N), str(ROUNDS)],
            env={**os.environ, "RIVETKIT_MODULES": str(modules)},
            capture_output=True, text=True, check=True, timeout=1800,
        )  # fmt: skip
        results = json.loads(node.stdout.strip().splitlines()[-1])
        http = stack.enter_context(httpx.Client(base_url=url))
        ws = stack.enter_context(
            connect(
                f"{url.replace('http://', 'ws://')}/rivet/actors/bench/connect?key=one",
                subprotocols=["rivet"],
            )
        )
        assert json.loads(ws.recv())["type"] == "init"

        def post() -> None:
            response = http.post(
                "/rivet/actors/bench/actions/increment?key=one",
                content=b'{"args":[]}',
                headers={"Content-Type": "application/json"},
            )
            assert response.status_code == 200, response.text

        frame = {"type": "action", "name": "increment", "args": []}
        python = interleaved(
            {
                "py_http": post,
                "py_ws": ws_round_trip(
                    ws, lambda i: {**frame, "id": i}, lambda reply: None
                ),
            },
            N,
        )
    for stats in python.values():
        stats["round_trips_per_s"] = 1e6 / stats["mean_us"]
    results.update(python)
    return results


def main() -> None:
    report = {}
    for label, env in database_legs():
        report[label] = run_leg(__file__, label, env)
    header = ("database", "measure", "rt/s", "median us", "p99 us")
    print("{:<12} {:<14} {:>8} {:>10} {:>10}".format(*header))
    for label, results in report.items():
        for name, stats in results.items():
            if not isinstance(stats, dict):
                continue
            print(
                f"{label:<12} {name:<14} {stats['round_trips_per_s']:>8.0f} "
                f"{stats['median_us']:>10.1f} {stats['p99_us']:>10.1f}"
            )
    report["meta"] = {"n": N, "sequential": True, "rivetkit": VERSION}
    print("written", write_results("rivetkit", report))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--leg":
        print(json.dumps(leg()))
    else:
        main()
