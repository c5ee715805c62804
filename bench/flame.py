"""Summarize py-spy's collapsed stacks as text: where a server's time went.

``py-spy record --format raw --threads --nolineno`` writes one line per
distinct stack: ``thread (tid): name;frame;frame;... count``, root first, a
frame being ``function (package/module.py)``. :func:`summary` turns that
into what fits in a README:

* the share of samples per thread kind (the event loop's ``MainThread``,
  ``rivet-invoke`` workers, asgiref's executor, ...);
* a pruned tree per thread kind: every frame holding at least ``min_share``
  of all samples, single-child chains joined with ``>``;
* the top functions by own time (the leaf frames), and by inclusive time
  among the packages worth reading (django_rivet, channels, daphne, django,
  asgiref, twisted, autobahn, psycopg, redis, asyncio).

Shares are of all samples taken (non-idle threads only: py-spy skips a
thread waiting in a system call, the GIL included).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

_THREAD = re.compile(r"^thread \((?:0x)?[0-9a-fA-F]+\): (?P<name>[^;]*)$")
_NUMBERED = re.compile(r"[-_ ]?\d+$")
READABLE = ("django_rivet/", "channels/", "channels_redis/", "daphne/", "django/",
            "asgiref/", "twisted/", "autobahn/", "psycopg/", "redis/", "asyncio/",
            "bench/", "cbor2/", "json/", "logging/")  # fmt: skip


@dataclass
class Node:
    """One frame of the tree: its inclusive sample count and its children."""

    count: int = 0
    children: dict[str, Node] = field(default_factory=dict)


def parse(text: str) -> list[tuple[str, list[str], int]]:
    """Return ``(thread kind, frames root first, samples)`` per line."""
    stacks = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        path, _, count = line.rpartition(" ")
        frames = path.split(";")
        kind = "?"
        if frames and (match := _THREAD.match(frames[0])):
            kind = _NUMBERED.sub("", match["name"]) or "?"
            frames = frames[1:]
        stacks.append((kind, frames, int(count)))
    return stacks


def _short(frame: str) -> str:
    # "invoke (django_rivet/actors/spine.py)" -> "invoke (actors/spine.py)"
    return frame.replace("(django_rivet/", "(")


def _tree(stacks: list[tuple[str, list[str], int]]) -> dict[str, Node]:
    roots: dict[str, Node] = {}
    for kind, frames, count in stacks:
        node = roots.setdefault(kind, Node())
        node.count += count
        for frame in frames:
            node = node.children.setdefault(frame, Node())
            node.count += count
    return roots


def _lines(
    node: Node, total: int, min_count: float, depth: int, out: list[str]
) -> None:
    for frame, child in sorted(node.children.items(), key=lambda kv: -kv[1].count):
        if child.count < min_count:
            continue
        names = [_short(frame)]
        # Join a chain of frames that pass their time on to one child.
        while True:
            kept = [kv for kv in child.children.items() if kv[1].count >= min_count]
            if len(kept) != 1 or kept[0][1].count < 0.97 * child.count:
                break
            frame, child = kept[0]
            names.append(_short(frame))
        if len(names) > 4:
            names = [*names[:2], "...", *names[-2:]]
        share = 100.0 * child.count / total
        out.append(f"{'  ' * depth}{share:5.1f}%  {' > '.join(names)}")
        _lines(child, total, min_count, depth + 1, out)


def summary(text: str, min_share: float = 0.02, top: int = 15) -> str:
    """Return the text summary of py-spy's raw output (see the module doc)."""
    stacks = parse(text)
    total = sum(count for _, _, count in stacks)
    if not total:
        return "no samples"
    out = [f"{total:,} samples (non-idle threads)"]
    roots = _tree(stacks)
    kinds = sorted(roots.items(), key=lambda kv: -kv[1].count)
    out.append(
        "threads: "
        + ", ".join(f"{kind} {100.0 * node.count / total:.0f}%" for kind, node in kinds)
    )
    for kind, node in kinds:
        if node.count < min_share * total:
            continue
        out.append(f"\n[{kind}] {100.0 * node.count / total:.1f}%")
        _lines(node, total, min_share * total, 1, out)
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for _, frames, count in stacks:
        if frames:
            own[_short(frames[-1])] += count
        for frame in set(frames):
            if any(f"({package}" in frame for package in READABLE):
                inclusive[_short(frame)] += count
    out.append(f"\nown time, top {top}:")
    out += [f"  {100.0 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    out.append(f"\ninclusive time, top {top}:")
    out += [f"  {100.0 * n / total:5.1f}%  {f}" for f, n in inclusive.most_common(top)]
    return "\n".join(out)
