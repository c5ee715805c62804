"""P11: pure engine cost per step, in memory, against RivetKit's engine.

Subject: ``run_workflow`` (django-rivet's engine core, no Django) with
``InMemoryDriver`` running a workflow of N trivial async steps.

Baseline: ``@rivetkit/workflow-engine`` (npm, bench-only, installed into
``bench/.cache/node``, which git ignores) running the same shape under Node
with a no-latency in-memory driver: the package's ``InMemoryDriver`` with
its simulated latency removed (even ``sleep(0)`` is a >= 1 ms timer in
Node, which would be unfair to it). Node runs one long-lived process that
answers one trial per line, so its JIT stays warm; trials alternate.
Skipped (a row saying so) when ``node``/``npm`` are missing.

Growth: the same engine at 10,000 steps against itself at 1,000, trials
alternating in one process; the ratio of the per-step costs must stay
within 1.2 (flat: a flush costs what changed, not the history size).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.core import Row, Target, alternate, row_from

ID = "P11"
TITLE = "pure engine per-step cost vs @rivetkit/workflow-engine"
TARGET = Target("ratio", "<=", 2.0)
GROWTH_TARGET = Target("ratio", "<=", 1.2)
PACKAGE = "@rivetkit/workflow-engine@2.3.19"
HERE = Path(__file__).resolve().parent.parent
CACHE = HERE / ".cache" / "node"


def install_engine() -> Path:
    """Install the npm package once into the git-ignored cache; return it."""
    CACHE.mkdir(parents=True, exist_ok=True)
    package_json = CACHE / "package.json"
    marker = CACHE / "node_modules" / "@rivetkit" / "workflow-engine" / "package.json"
    if not marker.exists():
        package_json.write_text('{"private": true}\n')
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent", PACKAGE],
            cwd=CACHE,
            check=True,
            capture_output=True,
            timeout=600,
        )
    # ESM resolves packages from the script's folder: run it from the cache.
    script = CACHE / "engine_bench.mjs"
    shutil.copyfile(HERE / "node" / "engine_bench.mjs", script)
    return script


async def _workflow(ctx: Any, count: int) -> int:
    for index in range(count):

        async def step(index: int = index) -> int:
            return index

        await ctx.step(f"s{index}", step)
    return count


def _engine_trial(loop: asyncio.AbstractEventLoop, steps: int) -> Any:
    """Return a trial: one workflow of ``steps`` steps, microseconds per step."""
    from django_rivet.engine import InMemoryDriver, run_workflow

    counter = iter(range(10**9))

    def trial() -> float:
        driver = InMemoryDriver()
        started = time.perf_counter()
        outcome = loop.run_until_complete(
            run_workflow(f"wf-{next(counter)}", _workflow, steps, driver)
        )
        elapsed = time.perf_counter() - started
        assert outcome.state == "completed" and outcome.output == steps, outcome
        return elapsed / steps * 1e6

    return trial


def growth_leg(small: int, big: int, trials: int) -> dict[str, Any]:
    """Per-step cost at ``big`` steps against ``small`` steps, alternating."""
    loop = asyncio.new_event_loop()
    try:
        return alternate(
            _engine_trial(loop, big), _engine_trial(loop, small), trials, warmup=1
        )
    finally:
        loop.close()


def leg(steps: int, trials: int, script: str) -> dict[str, Any]:
    loop = asyncio.new_event_loop()
    subject = _engine_trial(loop, steps)

    node = subprocess.Popen(
        ["node", script],
        cwd=str(Path(script).parent),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def baseline() -> float:
        assert node.stdin is not None and node.stdout is not None
        node.stdin.write(f"{steps}\n")
        node.stdin.flush()
        return float(node.stdout.readline()) * 1000 / steps

    try:
        return alternate(subject, baseline, trials, warmup=3)
    finally:
        node.stdin.close()  # type: ignore[union-attr]
        node.wait(10)
        loop.close()


def run(ctx: Any) -> list:
    small, big, trials = ctx.size((1_000, 10_000, 5), (20, 200, 1))
    grown = ctx.leg(
        "bench.measures.p11_engine:growth_leg",
        {"small": small, "big": big, "trials": trials},
        django=False,
    )
    growth = row_from(
        ID,
        f"engine per step at {big:,} steps vs {small:,}",
        "us",
        grown,
        f"{small:,} steps",
        GROWTH_TARGET,
    )
    if shutil.which("node") is None or shutil.which("npm") is None:
        return [Row(ID, "engine per step (node missing: skipped)", "us", {}), growth]
    script = install_engine()
    steps, trials = ctx.size((1_000, 15), (50, 1))
    found = ctx.leg(
        "bench.measures.p11_engine:leg",
        {"steps": steps, "trials": trials, "script": str(script)},
        django=False,
    )
    return [
        row_from(
            ID,
            f"engine per step, {steps:,} steps in memory",
            "us",
            found,
            "RivetKit engine",
            TARGET,
        ),
        growth,
    ]
