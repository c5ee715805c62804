"""Time of a 1000-step workflow (trivial steps), next to DBOS 3.4.0.

Each leg runs in a fresh process on one database: SQLite in WAL mode, then a
PostgreSQL with default durability, both started by the bench. Our runtime
runs the workflow in-process the way the ``rivet.run_workflow`` task does
(claim the lease, run until it completes, release), so the time is the
engine plus its database writes: one transaction per step. DBOS 3.4.0 (an
optional bench-only dependency, installed into the venv when missing) runs
the same shape -- a workflow calling 1000 trivial steps in sequence -- on the
same kind of database in the same run, with its system database next to
ours (another SQLite file in WAL mode, another database on the same server).
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time

from bench.common import ROOT, database_legs, run_leg, setup_django, write_results

STEPS = 1000
RUNS = 5
DBOS_VERSION = "3.4.0"


def ensure_dbos() -> None:
    """Install DBOS into this interpreter's environment when it is missing."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", f"dbos=={DBOS_VERSION}"],
            check=True,
        )


def summarize(times: list[float]) -> dict:
    return {
        "runs": len(times),
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "steps_per_s": STEPS / statistics.median(times),
    }


def rivet_leg() -> dict:
    setup_django()
    from django.test.utils import override_settings

    from django_rivet import workflows
    from django_rivet.workflow_runtime import execution

    # No broker here: wake-ups would go to Celery's default AMQP URL.
    override_settings(RIVET={"EMBEDDED_WORKER": True}).enable()

    results = {}
    for name in ("benchSteps", "benchAsyncSteps"):
        execution.run(workflows.start(name, 50).workflow_id)  # warm-up
        started = time.perf_counter()
        handle = workflows.start(name, STEPS)
        status = execution.run(handle.workflow_id)
        results[name] = time.perf_counter() - started
        assert status == "completed" and handle.result() == STEPS, status
    return results


def dbos_leg() -> dict:
    from dbos import DBOS

    url = os.environ.get("RIVET_BENCH_DATABASE_URL")
    if url:
        system_url = url.rsplit("/", 1)[0] + "/dbos_bench"
        system_url = system_url.replace("postgres://", "postgresql://", 1)
    else:
        path = os.environ["RIVET_BENCH_SQLITE"] + "-dbos"
        # WAL like our leg (DBOS keeps SQLite's default journal otherwise);
        # the mode is stored in the file.
        sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").close()
        system_url = f"sqlite:///{path}"
    DBOS(config={"name": "rivet-bench", "system_database_url": system_url})

    @DBOS.step()
    def trivial(index: int) -> int:
        return index

    @DBOS.workflow()
    def steps_workflow(steps: int) -> int:
        for index in range(steps):
            trivial(index)
        return steps

    DBOS.launch()
    try:
        steps_workflow(50)  # warm-up
        started = time.perf_counter()
        assert steps_workflow(STEPS) == STEPS
        elapsed = time.perf_counter() - started
    finally:
        DBOS.destroy()
    return {f"dbos_{DBOS_VERSION}": elapsed}


def leg(label: str) -> dict:
    return dbos_leg() if label.startswith("dbos") else rivet_leg()


def main() -> None:
    ensure_dbos()
    report: dict[str, dict] = {}
    for label, env in database_legs():
        # The runtimes alternate, one process per run, so load on the machine
        # (other jobs, disk) falls on both alike.
        times: dict[str, list[float]] = {}
        for _ in range(RUNS):
            for runtime in ("rivet", "dbos"):
                measured = run_leg(__file__, f"{runtime}-{label}", env)
                for name, elapsed in measured.items():
                    times.setdefault(name, []).append(elapsed)
        report[label] = {name: summarize(found) for name, found in times.items()}
    print(f"{STEPS} sequential trivial steps, median of {RUNS} runs")
    print(f"{'database':<12} {'runtime':<18} {'median s':>9} {'steps/s':>9}")
    for label, results in report.items():
        for name, stats in results.items():
            print(
                f"{label:<12} {name:<18} {stats['median_s']:>9.3f} "
                f"{stats['steps_per_s']:>9.0f}"
            )
    report["_meta"] = {"steps": STEPS, "runs": RUNS}
    print("written", write_results("workflow", report))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--leg":
        print(json.dumps(leg(sys.argv[2])))
    else:
        sys.path.insert(0, str(ROOT))
        main()
