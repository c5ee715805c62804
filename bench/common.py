"""Shared plumbing of the benchmarks: databases, Django setup, statistics."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


@contextlib.contextmanager
def postgres(durable: bool = True) -> Iterator[str]:
    """Start a throwaway PostgreSQL (default durability); yield its URL."""
    folder = tempfile.mkdtemp(prefix="rivet-bench-pg-")
    os.chmod(folder, 0o755)
    args = [str(ROOT / "scripts" / "pg.sh"), "start", folder]
    if durable:
        args.append("--durable")
    url = subprocess.run(
        args, check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        yield url
    finally:
        subprocess.run([str(ROOT / "scripts" / "pg.sh"), "stop", folder], check=False)


def database_legs() -> Iterator[tuple[str, dict[str, str]]]:
    """Yield ``(label, env)`` for SQLite (WAL) and PostgreSQL."""
    with tempfile.TemporaryDirectory(prefix="rivet-bench-") as folder:
        yield (
            "sqlite-wal",
            {"RIVET_BENCH_SQLITE": os.path.join(folder, "bench.sqlite3")},
        )
    with postgres() as url:
        yield "postgresql", {"RIVET_BENCH_DATABASE_URL": url}


def setup_django() -> None:
    """Configure Django from bench.settings and create the tables."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", run_syncdb=True, verbosity=0)


def run_leg(script: str, label: str, env: dict[str, str]) -> dict:
    """Run ``script --leg`` in a fresh process (one database per process)."""
    full_env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, script, "--leg", label],
        check=True,
        capture_output=True,
        text=True,
        env=full_env,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def sample(fn: Callable[[], object], n: int, warmup: int = 50) -> dict[str, float]:
    """Time ``fn`` ``n`` times after a warm-up; return microsecond statistics."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    times.sort()
    return {
        "n": n,
        "median_us": statistics.median(times),
        "p99_us": times[int(n * 0.99) - 1],
        "mean_us": statistics.fmean(times),
    }


def write_results(name: str, data: dict) -> Path:
    """Write ``bench/results/<name>.json`` and return its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True))
    return path
