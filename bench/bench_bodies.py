"""What large request bodies cost the other clients of one server process.

Serves the quickstart's ``asgi.py`` shape (``tests.support.asgi``: BodyLimitMiddleware,
AuthMiddlewareStack) with daphne on a fresh SQLite database. A *bystander*
calls a trivial action (``counter.getCount``) in a loop, one request at a
time, and records each round trip. Meanwhile *attackers* post bodies of about
1 MiB (the default ``MAX_HTTP_BODY_BYTES``) to an action, ``ATTACKERS`` at
once, ``ROUNDS`` times; each shape is a body that is expensive to decode for
its size (the most list items a message may hold, ``MAX_ENTRIES``), and
three past it that are refused before decoding (issue 40).

Reported per shape: the bystander's worst and 99th-percentile latency while
the attack runs, the same without any attack (the floor), and how long the
attackers' own requests took. Run with ``scripts/bench.sh bodies``; writes
``bench/results/bodies.json``. It is a measurement, not a test: the target
(another client's worst latency under 100 ms with three concurrent 1 MiB
bodies) is printed, never asserted.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import write_results  # noqa: E402
from tests.support.servers import daphne_process  # noqa: E402

ATTACKERS = 3
ROUNDS = int(os.environ.get("ROUNDS", "5"))
LIMIT = 1024 * 1024
ENTRIES = 100_000
TARGET_MS = 100.0


def _fill(items: list[str], head: str, tail: str, limit: int) -> bytes:
    """``head + ",".join(items) + tail`` cut to at most ``limit`` bytes."""
    body = head + ",".join(items) + tail
    while len(body.encode()) > limit:
        items = items[: int(len(items) * 0.95)]
        body = head + ",".join(items) + tail
    return body.encode()


def shapes() -> dict[str, tuple[bytes, str]]:
    """Bodies of about 1 MiB that are costly to decode for their size."""
    import cbor2

    count = ENTRIES - 10
    strings = _fill([json.dumps(f"s{n:05d}") for n in range(count)],
                    '{"args": [[', "]]}", LIMIT)  # fmt: skip
    maps = _fill(['{"a":1}'] * (count // 2), '{"args": [[', "]]}", LIMIT)
    floats = _fill([repr(0.1 + n) for n in range(count)], '{"args": [[', "]]}", LIMIT)
    cbor_ints = cbor2.dumps({"args": [[2**40 + n for n in range(count)]]})
    # Past MAX_ENTRIES (issue 40): refused from their bytes, before decoding.
    empty_lists = cbor2.dumps({"args": [[[]] * 1_000_000]})
    empty_maps = cbor2.dumps({"args": [[{"": {}}] * 349_000]})
    json_lists = _fill(["[]"] * 349_000, '{"args":[[', "]]}", LIMIT)
    return {
        "json-100k-strings": (strings, "application/json"),
        "json-50k-maps": (maps, "application/json"),
        "json-100k-floats": (floats, "application/json"),
        "cbor-100k-ints": (cbor_ints, "application/cbor"),
        "cbor-1m-empty-lists": (empty_lists, "application/cbor"),
        "cbor-349k-empty-maps": (empty_maps, "application/cbor"),
        "json-349k-empty-lists": (json_lists, "application/json"),
    }


def migrate(env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--verbosity", "0"],
        check=True,
        cwd=ROOT,
        env=env,
    )


def bystander(url: str, stop: threading.Event, out: list[tuple[float, float]]) -> None:
    """Call a trivial action in a loop; record (start, seconds) of each call."""
    with httpx.Client(timeout=30) as client:
        path = f"{url}/rivet/actors/counter/actions/getCount?key=bystander"
        while not stop.is_set():
            start = time.monotonic()
            response = client.post(path, json={"args": []})
            response.raise_for_status()
            out.append((start, time.monotonic() - start))


def attack(url: str, body: bytes, content_type: str, out: list[float]) -> None:
    with httpx.Client(timeout=60) as client:
        start = time.monotonic()
        response = client.post(
            f"{url}/rivet/actors/counter/actions/increment?key=attack",
            content=body,
            headers={"Content-Type": content_type},
        )
        out.append(time.monotonic() - start)
        # Refused (400/413) or not: what counts is what it cost the others.
        assert response.status_code < 500, response.text[:200]


def window(samples: list[tuple[float, float]], start: float, end: float) -> list[float]:
    """Latencies of the calls that overlapped ``[start, end]``, in ms."""
    return [s * 1000 for t, s in samples if t <= end and t + s >= start]


def summary(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values), 1),
        "p99_ms": round(values[max(int(len(values) * 0.99) - 1, 0)], 1),
        "max_ms": round(values[-1], 1),
    }


def measure(url: str) -> dict[str, object]:
    results: dict[str, object] = {}
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    runner = threading.Thread(target=bystander, args=(url, stop, samples))
    runner.start()
    try:
        time.sleep(1.0)  # warm up
        quiet_start = time.monotonic()
        time.sleep(3.0)
        results["floor"] = summary(window(samples, quiet_start, time.monotonic()))
        for name, (body, content_type) in shapes().items():
            during: list[float] = []
            took: list[float] = []
            for _ in range(ROUNDS):
                start = time.monotonic()
                threads = [
                    threading.Thread(
                        target=attack, args=(url, body, content_type, took)
                    )
                    for _ in range(ATTACKERS)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                during += window(samples, start, time.monotonic())
                time.sleep(0.3)
            results[name] = {
                "body_bytes": len(body),
                "bystander": summary(during),
                "attackers": summary([t * 1000 for t in took]),
            }
            print(name, json.dumps(results[name]), flush=True)
    finally:
        stop.set()
        runner.join()
    return results


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="rivet-bench-bodies-") as folder:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "RIVET_SERVER_DB_NAME": os.path.join(folder, "bodies.sqlite3"),
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
        migrate(env)
        with daphne_process(env) as (url, _proc):
            results = measure(url)
    worst = max(
        value["bystander"]["max_ms"]  # type: ignore[index]
        for key, value in results.items()
        if key != "floor"
    )
    results["worst_bystander_ms"] = worst
    results["target_ms"] = TARGET_MS
    results["load_average"] = os.getloadavg()
    print(f"floor {results['floor']}")
    print(f"worst bystander latency {worst} ms (target < {TARGET_MS} ms)")
    print(write_results("bodies", results))


if __name__ == "__main__":
    main()
