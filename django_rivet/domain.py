"""The value domain: what may cross the wire and be stored.

What may be an argument, a return value, state, a KV value, an event, a queue
body, a schedule's arguments or a workflow value (docs/values.md), and the
walks that check it where a value is written or sent. :mod:`django_rivet.encoding`
encodes and decodes; this module only says whether a value is in, and if not,
where it is not. It imports nothing from Django.
"""

from __future__ import annotations

import contextlib
import decimal
import fractions
import json
import math
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import date, datetime
from typing import Any

import cbor2

from .exceptions import InvalidValue, ValueTooDeep

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "check_depth",
    "check_value",
    "format_path",
    "is_paced",
    "paced",
    "refused_type",
    "value_problem",
]

#: Containers (maps, lists) a value may nest: one limit for what clients send,
#: what is stored and what is read back.
MAX_DEPTH = 128
#: List items plus map entries in one incoming message (a 1 MiB body of tiny
#: items would otherwise be a million Python objects to build and walk).
MAX_ENTRIES = 100_000
#: Integers of the value domain: signed 64-bit, what every encoding carries
#: without a bignum (CBOR, BARE's i64, the RivetKit client's BigInt) and every
#: database column. Larger ones are refused where they are written or sent.
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
_CONTAINERS = (dict, list, tuple)


# What may be an argument, a return value, state, a KV value, an event, a queue
# body, a schedule's arguments or a workflow value (docs/values.md): one walk
# checks it, where the value is written or sent. The walk is level by level
# (no tuple per item) and finds *whether* a value is outside; only then a
# second, slower walk finds *where*, for the error.
_OK, _TEXT, _INT, _FLOAT, _MAP, _LIST, _REFUSED = range(7)
_KINDS: dict[type, int] = {
    type(None): _OK,
    bool: _OK,
    bytes: _OK,
    bytearray: _OK,
    datetime: _OK,
    date: _OK,
    uuid.UUID: _OK,
    str: _TEXT,
    int: _INT,
    float: _FLOAT,
    dict: _MAP,
    list: _LIST,
    tuple: _LIST,
}
# Why common Python types are refused, with what to use instead.
_REFUSED_HINTS: dict[type, str] = {
    set: "sets are not in the value domain (use a sorted list)",
    frozenset: "sets are not in the value domain (use a sorted list)",
    decimal.Decimal: "Decimal is not in the value domain (use str, or int cents)",
    fractions.Fraction: "Fraction is not in the value domain (use str or float)",
    complex: "complex is not in the value domain",
}


def _kind_of(item: Any, undefined: bool) -> int:
    """The kind of a value whose type is not one of the plain ones."""
    # Subclasses (enums, OrderedDict, namedtuple...) read back as their base.
    if isinstance(item, str):
        return _TEXT
    if isinstance(item, int):
        return _INT
    if isinstance(item, float):
        return _FLOAT
    if isinstance(item, dict):
        return _MAP
    if isinstance(item, list | tuple):
        return _LIST
    if isinstance(item, bytes | bytearray | date | uuid.UUID):
        return _OK
    if undefined and item is cbor2.undefined:
        return _OK
    return _REFUSED


def _text_ok(text: str) -> bool:
    # Lone surrogates (JSON escapes, Python strings) cannot be UTF-8.
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Decoding a large message holds the GIL, so it stalls every other thread of
# the process, the event loop included, however it is offloaded. Walks run
# in a decoding thread (run_decoder) pause for PACE_PAUSE seconds after every
# PACE_ITEMS items: the other threads get the GIL at once instead of after
# each 5 ms switch interval (bench/bench_bodies.py measures what it buys).
PACE_ITEMS = 2048
PACE_PAUSE = 0.0005


class _Pacing(threading.local):
    # A class default: a missing attribute of a threading.local costs an
    # AttributeError inside getattr(), about a microsecond on every walk.
    on = False


_pacing = _Pacing()


@contextlib.contextmanager
def paced() -> Iterator[None]:
    """Pause this thread's value walks now and then (see ``PACE_ITEMS``)."""
    _pacing.on = True
    try:
        yield
    finally:
        _pacing.on = False


def is_paced() -> bool:
    """Whether this thread's walks pause now and then (inside :func:`paced`)."""
    return _pacing.on


def _paced(children: Any) -> Iterator[Any]:
    for index, child in enumerate(children):
        if index and not index % PACE_ITEMS:
            time.sleep(PACE_PAUSE)
        yield child


def _scan(value: Any, max_entries: int | None, undefined: bool) -> int:
    """Return how many list items and map entries ``value`` holds, or -1.

    -1: outside the domain (fast; says nothing of where). The count sizes
    the process cache's estimate of an actor's state (actors/cache.py).
    """
    pace = _pacing.on
    seen = 0
    kinds = _KINDS
    kind = kinds.get(type(value))
    if kind is None:
        kind = _kind_of(value, undefined)
    if kind != _MAP and kind != _LIST:
        return 0 if _leaf_ok(value, kind) else -1
    level = [value]
    depth = 0
    entries = 0
    isfinite = math.isfinite
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            return -1
        deeper: list[Any] = []
        push = deeper.append
        for item in level:
            entries += len(item)
            if max_entries is not None and entries > max_entries:
                return -1
            children: Iterable[Any]
            if isinstance(item, dict):
                for key in item:
                    if type(key) is not str or not (key.isascii() or _text_ok(key)):
                        return -1
                children = item.values()
            else:
                children = item
            if pace:
                seen += len(item)
                if seen > PACE_ITEMS:
                    seen = 0
                    time.sleep(PACE_PAUSE)
                if len(item) > PACE_ITEMS:
                    children = _paced(children)
            for child in children:
                kind = kinds.get(type(child))
                if kind is None:
                    kind = _kind_of(child, undefined)
                if kind == _OK:
                    continue
                if kind == _TEXT:
                    if not child.isascii() and not _text_ok(child):
                        return -1
                elif kind == _INT:
                    if not INT_MIN <= child <= INT_MAX:
                        return -1
                elif kind == _FLOAT:
                    if not isfinite(child):
                        return -1
                elif kind == _REFUSED:
                    return -1
                else:
                    push(child)
        level = deeper
    return entries


def _leaf_ok(value: Any, kind: int) -> bool:
    if kind == _TEXT:
        return _text_ok(value)
    if kind == _INT:
        return bool(INT_MIN <= value <= INT_MAX)
    if kind == _FLOAT:
        return math.isfinite(value)
    return kind == _OK


def _leaf_problem(value: Any, kind: int) -> str:
    if kind == _TEXT:
        return "strings must be valid Unicode (no lone surrogates)"
    if kind == _INT:
        return "integers are 64-bit (from -2**63 to 2**63 - 1)"
    if kind == _FLOAT:
        return "numbers must be finite (no NaN or infinity)"
    if value is cbor2.undefined:
        return "undefined is not in the value domain"
    return refused_type(value)


def refused_type(value: Any) -> str:
    """Say why a value of this type is not in the domain, with what to use instead.

    One wording for actors and workflows: ``Decimal is not in the value
    domain (use str, or int cents)``.
    """
    hint = _REFUSED_HINTS.get(type(value))
    return hint or f"{type(value).__name__} is not in the value domain"


def _locate(
    value: Any, max_entries: int | None, undefined: bool
) -> tuple[list[str | int], str]:
    """Return the path to the first value outside the domain, and why."""
    entries = 0
    todo: list[tuple[Any, list[str | int]]] = [(value, [])]
    while todo:
        item, path = todo.pop()
        kind = _KINDS.get(type(item))
        if kind is None:
            kind = _kind_of(item, undefined)
        if kind != _MAP and kind != _LIST:
            if not _leaf_ok(item, kind):
                return path, _leaf_problem(item, kind)
            continue
        if len(path) >= MAX_DEPTH:
            return path, f"values nest at most {MAX_DEPTH} levels of lists and maps"
        entries += len(item)
        if max_entries is not None and entries > max_entries:
            return [], (
                f"a message holds at most {max_entries} list items and map entries"
            )
        if kind == _MAP:
            for key in item:
                if type(key) is not str:
                    return path, "map keys must be strings"
                if not _text_ok(key):
                    return path, "strings must be valid Unicode (no lone surrogates)"
            pairs: list[tuple[str | int, Any]] = list(item.items())
        else:
            pairs = list(enumerate(item))
        # Reversed: the stack pops the first child first.
        todo.extend((child, [*path, step]) for step, child in reversed(pairs))
    # The fast walk counts entries level by level: an excess it saw is found
    # here in the same count.
    return [], f"values nest at most {MAX_DEPTH} levels of lists and maps"


def format_path(where: str, path: list[str | int]) -> str:
    """Return ``where`` followed by ``path``: ``args[0].price``, ``state["a b"]``."""
    text = where
    if len(path) > 16:
        # A value nested too deeply: its path says little past its start.
        return format_path(where, path[:16]) + "..."
    for step in path:
        if isinstance(step, int):
            text += f"[{step}]"
        elif step.isidentifier():
            text += f".{step}" if text else step
        else:
            text += f"[{json.dumps(step, ensure_ascii=False)}]"
    return text


def value_problem(
    value: Any, *, max_entries: int | None = None, undefined: bool = False
) -> tuple[str, str] | None:
    """Return ``(path, reason)`` if ``value`` is outside the domain, else None.

    ``path`` is relative to the value (``""`` for the value itself);
    ``max_entries`` bounds list items plus map entries (messages from
    clients); ``undefined`` admits CBOR ``undefined`` (the RivetKit client's).
    """
    if _scan(value, max_entries, undefined) >= 0:
        return None
    path, reason = _locate(value, max_entries, undefined)
    return format_path("", path), reason


def check_value(value: Any, where: str = "value") -> int:
    """Raise :class:`InvalidValue` unless ``value`` is in the value domain.

    The error names the path from ``where`` (``state.items[3].price``);
    values nested too deeply raise :class:`ValueTooDeep`. One walk, so a
    self-referencing list is refused instead of recursing. Returns how many
    list items and map entries the value holds.
    """
    kind = _KINDS.get(type(value))
    # What most calls carry (no arguments, a number, a flag, an ASCII
    # string) is decided here, without setting up a walk.
    if kind == _OK:
        return 0
    if kind == _INT:
        if INT_MIN <= value <= INT_MAX:
            return 0
    elif kind == _TEXT:
        if value.isascii():
            return 0
    elif (kind == _LIST or kind == _MAP) and not value:
        return 0
    entries = _scan(value, None, False)
    if entries >= 0:
        return entries
    path, reason = _locate(value, None, False)
    where_path = format_path(where, path)
    error = ValueTooDeep if reason.startswith("values nest") else InvalidValue
    metadata: dict[str, Any] = {"path": where_path, "reason": reason}
    if error is ValueTooDeep:
        metadata["limit"] = MAX_DEPTH
    raise error(f"{where_path}: {reason}", metadata=metadata)


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`ValueTooDeep` if ``value`` nests more than ``limit`` containers.

    Iterative, so a self-referencing list is refused instead of recursing.
    (Kept for callers that only need the nesting bound; values that are
    stored or sent go through :func:`check_value`.)
    """
    if not isinstance(value, _CONTAINERS):
        return
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if depth > limit:
            raise ValueTooDeep(
                f"The value nests more than {limit} levels of lists and maps",
                metadata={"limit": limit},
            )
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, _CONTAINERS):
                todo.append((child, depth + 1))
