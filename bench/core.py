"""Statistics, targets and the result rows every measure reports.

A measure runs *trials*: one trial is a batch of operations timed as a
whole, giving one number (microseconds per operation, operations per second,
seconds per workflow...). Subject and baseline trials alternate -- baseline,
subject, subject, baseline, ... -- so a load change on the shared machine
falls on both. A value is the median over trials; its spread is the median
absolute deviation over trials relative to the median (``±3%``); a ratio is
the median of the per-trial ratios of neighbouring subject and baseline
trials (paired, so slow phases of the machine cancel out).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


def summarize(samples: list[float]) -> dict[str, float]:
    """Return median, relative spread (MAD / median), min, max and count."""
    median = statistics.median(samples)
    mad = statistics.median(abs(x - median) for x in samples)
    return {
        "median": median,
        "spread": mad / median if median else 0.0,
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
    }


def percentile(values: list[float], q: float) -> float:
    """Return the ``q`` quantile (0..1) of ``values`` (nearest rank)."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))
    return ordered[index]


def alternate(
    subject: Callable[[], float],
    baseline: Callable[[], float],
    trials: int,
    warmup: int = 1,
) -> dict[str, Any]:
    """Run ``trials`` of each, alternating; return both summaries and the ratio.

    Each callable runs one trial and returns its number. ``warmup`` trials of
    each run first and are dropped. The ratio is subject / baseline.
    """
    for _ in range(warmup):
        baseline()
        subject()
    subjects: list[float] = []
    baselines: list[float] = []
    for index in range(trials):
        order = (baseline, subject) if index % 2 == 0 else (subject, baseline)
        for fn in order:
            gc.collect()
            (subjects if fn is subject else baselines).append(fn())
    ratios = [s / b for s, b in zip(subjects, baselines, strict=True) if b]
    return {
        "subject": summarize(subjects),
        "baseline": summarize(baselines),
        "ratio": statistics.median(ratios) if ratios else None,
        "subject_samples": subjects,
        "baseline_samples": baselines,
    }


def per_op_us(fn: Callable[[], object], count: int) -> Callable[[], float]:
    """Make a trial: run ``fn`` ``count`` times, return microseconds per call."""

    def trial() -> float:
        start = time.perf_counter()
        for _ in range(count):
            fn()
        return (time.perf_counter() - start) * 1e6 / count

    return trial


def ops_per_s(fn: Callable[[], object], count: int) -> Callable[[], float]:
    """Make a trial: run ``fn`` ``count`` times, return calls per second."""

    def trial() -> float:
        start = time.perf_counter()
        for _ in range(count):
            fn()
        return count / (time.perf_counter() - start)

    return trial


@dataclass(frozen=True)
class Target:
    """A goal: ``ratio <= 1.5``, ``ratio >= 0.8``, ``value <= 50`` or none."""

    on: str = "none"  # "ratio" | "value" | "none"
    op: str = "<="
    limit: float = 0.0
    text: str = ""

    def describe(self) -> str:
        if self.text:
            return self.text
        if self.on == "none":
            return "report"
        suffix = "x" if self.on == "ratio" else ""
        return f"{self.op} {self.limit:g}{suffix}"

    def verdict(self, value: float | None, ratio: float | None) -> str:
        if self.on == "none":
            return "info"
        found = ratio if self.on == "ratio" else value
        if found is None:
            return "n/a"
        ok = found <= self.limit if self.op == "<=" else found >= self.limit
        return "PASS" if ok else "MISS"


@dataclass
class Row:
    """One line of the table."""

    id: str
    measure: str
    unit: str
    value: dict[str, float]
    baseline: dict[str, float] | None = None
    baseline_label: str = ""
    ratio: float | None = None
    target: Target = field(default_factory=Target)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return self.target.verdict(self.value.get("median"), self.ratio)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["target"] = self.target.describe()
        data["verdict"] = self.verdict
        return data


def row_from(
    id: str,
    measure: str,
    unit: str,
    compared: dict[str, Any],
    baseline_label: str,
    target: Target,
    **extra: Any,
) -> Row:
    """Build a row from the result of :func:`alternate`."""
    return Row(
        id=id,
        measure=measure,
        unit=unit,
        value=compared["subject"],
        baseline=compared["baseline"],
        baseline_label=baseline_label,
        ratio=compared["ratio"],
        target=target,
        extra=extra,
    )


def single(samples: list[float]) -> dict[str, float]:
    """Summarize a measure that has no baseline."""
    return summarize(samples)


def rounds(
    measures: dict[str, Callable[[], float]], trials: int, warmup: int = 1
) -> dict[str, Any]:
    """Like :func:`alternate` for several measures: rotate their order each trial.

    Returns ``{"summary": {name: summary}, "samples": {name: [...]}}``; pair
    any two with :func:`paired`.
    """
    names = list(measures)
    for _ in range(warmup):
        for name in names:
            measures[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(trials):
        shift = index % len(names)
        order = names[shift:] + names[:shift]
        if index % 2:
            order.reverse()
        for name in order:
            gc.collect()
            samples[name].append(measures[name]())
    return {
        "summary": {name: summarize(found) for name, found in samples.items()},
        "samples": samples,
    }


def paired(found: dict[str, Any], subject: str, baseline: str) -> dict[str, Any]:
    """Shape two measures of :func:`rounds` like the result of :func:`alternate`."""
    subjects, baselines = found["samples"][subject], found["samples"][baseline]
    ratios = [s / b for s, b in zip(subjects, baselines, strict=True) if b]
    return {
        "subject": found["summary"][subject],
        "baseline": found["summary"][baseline],
        "ratio": statistics.median(ratios) if ratios else None,
    }
