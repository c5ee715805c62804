"""The benchmark runner: ``python -m bench [--quick] [ids...]`` / ``make bench``.

Runs the measures (all, or the ids given: ``P1 P5``), each in fresh
processes against servers this run starts and stops (PostgreSQL with default
durability, Redis, daphne, a Celery worker), prints one table and writes
``bench/results/latest.json``. ``--quick`` runs every measure at tiny sizes
to check that it executes (the smoke run of ``make test``): its numbers mean
nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.core import Row
from bench.measures import MEASURES
from bench.servers import ROOT, Servers, python_env

RESULTS = ROOT / "bench" / "results"


class LegFailed(RuntimeError):
    """A leg's process failed; its output is in the message."""


@dataclass
class Context:
    """What a measure gets: the servers, the size mode, a way to run legs."""

    servers: Servers
    quick: bool
    curves: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Results shared by measures that come from one leg (P2/P3, P7/P9).
    memo: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _locks: dict[str, threading.Lock] = field(default_factory=dict)

    def size(self, full: Any, quick: Any) -> Any:
        return quick if self.quick else full

    def leg(
        self,
        target: str,
        params: dict[str, Any] | None = None,
        *,
        db: str | None = None,
        env: dict[str, str] | None = None,
        django: bool = True,
        timeout: float = 1800,
    ) -> Any:
        """Run ``module:function(**params)`` in a fresh process; return its result.

        ``db`` ("sqlite" or "postgresql") gives the leg a fresh migrated
        database of its own.
        """
        extra = dict(env or {})
        if db is not None:
            extra.update(self.servers.database(db))
        args = [sys.executable, "-m", "bench.leg", target, json.dumps(params or {})]
        if not django:
            args.append("--no-django")
        proc = subprocess.run(
            args,
            cwd=ROOT,
            env=python_env(**extra),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines or not lines[-1].startswith("RESULT "):
            raise LegFailed(
                f"{target} {params} failed (exit {proc.returncode}):\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-8000:]}"
            )
        return json.loads(lines[-1][len("RESULT ") :])

    def curve(self, name: str, point: dict[str, Any]) -> None:
        self.curves.setdefault(name, []).append(point)

    def once(self, key: str, compute: Callable[[], Any]) -> Any:
        """Return ``compute()``, computed once per run (legs shared by measures)."""
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self.memo:
                self.memo[key] = compute()
        return self.memo[key]


# -- the table -----------------------------------------------------------------------
def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "us":
        if value >= 10_000:
            return f"{value / 1000:.1f} ms"
        return f"{value:.0f} us" if value >= 100 else f"{value:.1f} us"
    if unit == "s":
        return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"
    if unit == "ms":
        return f"{value:.1f} ms"
    if unit in ("/s", "calls/s", "rt/s"):
        return f"{value:,.0f} {unit}"
    if unit == "KiB":
        return f"{value:.1f} KiB"
    return f"{value:.3g} {unit}"


def table(rows: list[Row]) -> str:
    header = ("id", "measure", "value", "baseline", "ratio", "target", "result")
    lines = []
    for row in rows:
        value = fmt(row.value.get("median"), row.unit)
        if row.value.get("n", 1) > 1:
            value += f" ±{row.value.get('spread', 0) * 100:.0f}%"
        baseline = "-"
        if row.baseline is not None:
            baseline = fmt(row.baseline.get("median"), row.unit)
            if row.baseline.get("n", 1) > 1:
                baseline += f" ±{row.baseline.get('spread', 0) * 100:.0f}%"
            if row.baseline_label:
                baseline += f" ({row.baseline_label})"
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        lines.append(
            (row.id, row.measure, value, baseline, ratio, row.target.describe(),
             row.verdict)
        )  # fmt: skip
    widths = [max(len(str(x[i])) for x in [header, *lines]) for i in range(7)]
    out = [" | ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True))]
    out.append("-+-".join("-" * w for w in widths))
    for line in lines:
        out.append(
            " | ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True))
        )
    return "\n".join(out)


def curves_text(curves: dict[str, list[dict[str, Any]]]) -> str:
    out = []
    for name, points in curves.items():
        out.append(f"{name}:")
        first = points[0]
        for point in points:
            per_unit = point["value"] / point["size"]
            growth = per_unit / (first["value"] / first["size"])
            base = ""
            if point.get("baseline") is not None:
                base = (
                    f"  baseline {point['baseline']:.3f} s"
                    f"  ratio {point['value'] / point['baseline']:.2f}x"
                )
            out.append(
                f"  {point['size']:>7,} {point.get('unit', 'entries')}: "
                f"{point['value']:.3f} s  ({per_unit * 1e6:.1f} us each, "
                f"x{growth:.2f} of the smallest per unit){base}"
            )
    return "\n".join(out)


# -- main ------------------------------------------------------------------------------
def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "ids", nargs="*", help="measures to run (P1 ... P41, in any case: P6w, p6w)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    parser.add_argument(
        "--output",
        default=None,
        help="results file (default bench/results/latest.json)",
    )
    args = parser.parse_args(argv)
    by_upper = {measure_id.upper(): measure_id for measure_id in MEASURES}
    wanted = [by_upper.get(i.upper(), i) for i in args.ids] or list(MEASURES)
    unknown = [i for i in wanted if i not in MEASURES]
    if unknown:
        parser.error(f"unknown measure(s) {unknown}; known: {list(MEASURES)}")

    signal.signal(signal.SIGTERM, _terminate)
    started = time.time()
    load_before = os.getloadavg()
    servers = Servers()
    ctx = Context(servers=servers, quick=args.quick)
    rows: list[Row] = []
    failures: dict[str, str] = {}
    timings: dict[str, float] = {}

    def measure(measure_id: str) -> list[Row]:
        module = MEASURES[measure_id]
        print(f"==> {measure_id} {module.TITLE}", flush=True)
        began = time.perf_counter()
        try:
            found: list[Row] = module.run(ctx)
        except Exception as exc:  # report, go on with the next measure
            failures[measure_id] = f"{type(exc).__name__}: {exc}"
            print(f"    {measure_id} FAILED: {failures[measure_id]}", file=sys.stderr,
                  flush=True)  # fmt: skip
            return []
        finally:
            timings[measure_id] = time.perf_counter() - began
        for row in found:
            value = fmt(row.value.get("median"), row.unit)
            ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
            print(f"    {row.id} {row.measure}: {value} ratio {ratio} {row.verdict}",
                  flush=True)  # fmt: skip
        return found

    try:
        if args.quick:
            # Numbers mean nothing in a smoke run: overlap the legs to stay
            # within a minute. A full run measures one thing at a time.
            with ThreadPoolExecutor(max_workers=3) as pool:
                for found in pool.map(measure, wanted):
                    rows += found
        else:
            for measure_id in wanted:
                rows += measure(measure_id)
    finally:
        servers.close()
    load_after = os.getloadavg()
    elapsed = time.time() - started

    mode = "quick (smoke: tiny sizes, numbers mean nothing)" if args.quick else "full"
    print(f"\ndjango-rivet benchmarks, {mode}; {elapsed:.0f} s; load average "
          f"{load_before[0]:.2f} before, {load_after[0]:.2f} after, "
          f"{os.cpu_count()} CPUs\n")  # fmt: skip
    print(table(rows))
    if ctx.curves:
        print("\nGrowth curves (cost must grow linearly: per-unit cost flat)")
        print(curves_text(ctx.curves))
    for measure_id, reason in failures.items():
        print(f"\n{measure_id} FAILED: {reason}", file=sys.stderr)

    import django

    report = {
        "meta": {
            "mode": "quick" if args.quick else "full",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "seconds": elapsed,
            "measure_seconds": timings,
            "loadavg_before": load_before,
            "loadavg_after": load_after,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "django": django.get_version(),
        },
        "rows": [row.to_json() for row in rows],
        "curves": ctx.curves,
        "failures": failures,
    }
    output = Path(args.output) if args.output else RESULTS / "latest.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2, sort_keys=True))
    print(f"\nwritten {output}")
    return 1 if failures else 0
