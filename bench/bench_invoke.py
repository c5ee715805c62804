"""Cost of one trivial ``handle.call`` against a raw ORM transaction.

The baseline is what an invocation must do at least: one transaction that
locks a row and updates a field. Measured in the same run, on SQLite (WAL)
and on PostgreSQL with default durability, sequentially from one thread.
"""

from __future__ import annotations

import json
import sys

from bench.common import database_legs, run_leg, sample, setup_django, write_results

N = 2000


def leg() -> dict:
    setup_django()
    from django.db import connection, transaction
    from django.db.models import F

    from bench.benchapp.models import Row
    from django_rivet import actors

    Row.objects.get_or_create(name="baseline")
    handle = actors.get_or_create("bench", "one")

    def raw_lock_update() -> None:
        with transaction.atomic():
            rows = Row.objects.filter(name="baseline")
            if connection.vendor == "postgresql":
                rows.select_for_update().get()
            rows.update(value=F("value") + 1)

    results = {
        "raw_orm_lock_update": sample(raw_lock_update, N),
        "call_noop": sample(lambda: handle.call("noop"), N),
        "call_increment": sample(lambda: handle.call("increment"), N),
    }
    base = results["raw_orm_lock_update"]["median_us"]
    for name in ("call_noop", "call_increment"):
        results[name]["ratio_to_baseline"] = results[name]["median_us"] / base
    return results


def main() -> None:
    report = {}
    for label, env in database_legs():
        report[label] = run_leg(__file__, label, env)
    header = ("database", "operation", "median us", "p99 us", "x base")
    print("{:<12} {:<22} {:>10} {:>10} {:>7}".format(*header))
    for label, results in report.items():
        for name, stats in results.items():
            ratio = stats.get("ratio_to_baseline", 1.0)
            print(
                f"{label:<12} {name:<22} {stats['median_us']:>10.1f} "
                f"{stats['p99_us']:>10.1f} {ratio:>7.2f}"
            )
    print("written", write_results("invoke", report))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--leg":
        print(json.dumps(leg()))
    else:
        main()
