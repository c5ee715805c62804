"""What a state costs in memory: :func:`measure`, for the process cache's bound.

The sum of the objects' own sizes (``sys.getsizeof``), walked level by
level (no recursion, whatever the depth); objects CPython shares cost
nothing: ``None``, booleans, small integers (-5 to 256), the empty string
and one-character Latin-1 strings. Within a few percent of what
tracemalloc measures for a decoded state of any shape (one-entry maps,
astral characters, small integers...: tests/actors/test_cache.py). An
object reachable twice counts twice: a decoded state holds no shared ones.

A container whose children are all of one kind (a map of 100,000 integers,
a list of strings) is summed with C-level passes over it (``map``,
``sum``); the others child by child.
"""

from __future__ import annotations

import datetime
import sys
import uuid
from collections.abc import Collection
from typing import Any

__all__ = ["MAX_BYTES_PER_BYTE", "changed_bytes", "measure"]

_getsizeof = sys.getsizeof
#: The most memory one encoded byte can cost decoded, about: a one-entry map
#: of a one-entry map, two bytes a level, is 184 bytes a level; an empty map
#: in a list, one byte, 72.
MAX_BYTES_PER_BYTE = 128
_CHUNK = 4096
# What a leaf of these types costs whatever its value: shared singletons,
# and fixed-size objects (a datetime's zone is the shared UTC).
_FIXED: dict[type, int] = {
    type(None): 0,
    bool: 0,
    float: _getsizeof(0.5),
    datetime.datetime: _getsizeof(datetime.datetime(2026, 1, 1)),
    datetime.date: _getsizeof(datetime.date(2026, 1, 1)),
}
_SMALL_INTS = frozenset(range(-5, 257))
_SHARED_TEXTS = frozenset(chr(code) for code in range(256)) | {""}
# An ASCII string's size: this header plus one byte per character.
_ASCII_HEADER = _getsizeof("ab") - 2
_INT_SIZE = _getsizeof(2**20)


def _text(text: str) -> int:
    return 0 if text in _SHARED_TEXTS else _getsizeof(text)


def _texts(texts: Collection[str]) -> int:
    """Return what the strings ``texts`` cost (C-level when all are ASCII)."""
    if not all(map(str.isascii, texts)):
        return sum(map(_text, texts))
    shared = sum(map(_SHARED_TEXTS.__contains__, texts))
    # A shared string's length is 0 or 1: counted here, within a byte each.
    return (len(texts) - shared) * _ASCII_HEADER + sum(map(len, texts))


def _leaf(value: Any) -> int:
    """Return what one leaf costs (``measure`` inlines the common kinds)."""
    fixed = _FIXED.get(type(value))
    if fixed is not None:
        return fixed
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, int):
        return 0 if value in _SMALL_INTS else _getsizeof(value)
    if isinstance(value, uuid.UUID):
        return _getsizeof(value) + _getsizeof(value.int)
    return _getsizeof(value)


def _uniform(kind: type, children: Collection[Any]) -> int | None:
    """Return what children all of ``kind`` cost, or None for a container kind."""
    fixed = _FIXED.get(kind)
    if fixed is not None:
        return fixed * len(children)
    if kind is str:
        return _texts(children)
    if kind is int:
        # Integers past 2**30 take 4 bytes more per 30 bits: within 1.3x.
        small = sum(map(_SMALL_INTS.__contains__, children))
        return (len(children) - small) * _INT_SIZE
    if kind is dict or kind is list or kind is tuple:
        return None
    return sum(map(_leaf, children))


def measure(value: Any) -> int:
    """Return the bytes ``value``'s objects hold."""
    total = 0
    level = [value]
    while level:
        deeper: list[Any] = []
        push = deeper.append
        for item in level:
            children: Any
            if isinstance(item, dict):
                total += _getsizeof(item) + _texts(item.keys())
                children = item.values()
            elif isinstance(item, list | tuple):
                total += _getsizeof(item)
                children = item
            else:
                total += _leaf(item)
                continue
            kinds = set(map(type, children))
            if len(kinds) == 1:
                cost = _uniform(kinds.pop(), children)
                if cost is None:
                    deeper.extend(children)
                else:
                    total += cost
                continue
            for child in children:
                kind = type(child)
                cost = _FIXED.get(kind)
                if cost is not None:
                    total += cost
                elif kind is str:
                    total += _text(child)
                elif kind is int:
                    if child not in _SMALL_INTS:
                        total += _INT_SIZE
                elif kind is dict or kind is list or kind is tuple:
                    push(child)
                else:
                    total += _leaf(child)
        level = deeper
    return total


def _common_prefix(a: bytes, b: bytes) -> int:
    """Return how many leading bytes ``a`` and ``b`` share (C-speed chunks)."""
    end = min(len(a), len(b))
    start = 0
    while start < end and a[start : start + _CHUNK] == b[start : start + _CHUNK]:
        start += _CHUNK
    while start < end and a[start] == b[start]:
        start += 1
    return min(start, end)


def changed_bytes(old: bytes, new: bytes) -> int:
    """Return how many bytes differ: both lengths less what they share.

    What they share is their common prefix and, after it, their common
    suffix. An update in place is a few bytes; a map that gains an entry
    changes its header too, so all of it counts.
    """
    prefix = _common_prefix(old, new)
    rest_old, rest_new = old[prefix:], new[prefix:]
    suffix = _common_prefix(rest_old[::-1], rest_new[::-1])
    return len(rest_old) + len(rest_new) - 2 * suffix
