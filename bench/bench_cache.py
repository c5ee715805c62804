"""What one process holds for actors of large state (the process cache).

A fresh process on a fresh SQLite database (``tests.settings``) creates
``ACTORS`` actors of the test app's ``hoard`` and gives each a state of
19,000 small records (~0.9 MB encoded, the shape of issue 25's figure), one
call each, as a busy server would (no idle eviction: ``SLEEP_TIMEOUT`` is
set past the run). Reported: the resident memory the
process gained, in total and per actor, and what the cache estimates it
holds. ``--actors N`` changes the count (a version without a byte bound
needs ~7-12 MiB per actor: measure it with fewer and scale).

Run with ``scripts/bench.sh cache`` (or ``python bench/bench_cache.py
--actors 100``); writes ``bench/results/cache.json``. A measurement, not a
test.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RECORDS = 19_000
MIB = 1024 * 1024


def rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def leg(count: int) -> dict[str, object]:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django.conf import settings
    from django.test import override_settings

    from django_rivet import actors
    from django_rivet.actors import cache

    # No idle eviction during the run (a busy server calls its actors more
    # often than SLEEP_TIMEOUT): only the cache's own bounds act.
    rivet = {**getattr(settings, "RIVET", {}), "SLEEP_TIMEOUT": 86400}
    override_settings(RIVET=rivet).enable()
    handles = [actors.get_or_create("hoard", f"cache-{n}") for n in range(count)]
    gc.collect()
    before = rss()
    started = time.monotonic()
    for handle in handles:
        handle.call("records", RECORDS)
    gc.collect()
    after = rss()
    held = getattr(cache, "cached_bytes", lambda: None)()
    return {
        "actors": count,
        "records_per_actor": RECORDS,
        "seconds": round(time.monotonic() - started, 1),
        "rss_growth_mib": round((after - before) / MIB, 1),
        "per_actor_mib": round((after - before) / MIB / count, 2),
        "cache_estimate_mib": None if held is None else round(held / MIB, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--actors", type=int, default=1000)
    parser.add_argument("--leg", action="store_true")
    args = parser.parse_args()
    if args.leg:
        print(json.dumps(leg(args.actors)))
        return
    with tempfile.TemporaryDirectory(prefix="rivet-bench-cache-") as folder:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "RIVET_SERVER_DB_NAME": os.path.join(folder, "cache.sqlite3"),
            "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT)),
        }
        out = subprocess.run(
            [sys.executable, __file__, "--leg", "--actors", str(args.actors)],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["load_average"] = os.getloadavg()
    print(json.dumps(result, indent=2))
    from bench.common import write_results

    print(write_results("cache", result))


if __name__ == "__main__":
    main()
