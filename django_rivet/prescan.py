"""Counting an untrusted message's entries and nesting before decoding it.

``cbor2`` and ``json`` build a whole value, holding the GIL, before
:func:`~django_rivet.domain.value_problem` can count it: a 1 MiB body of a
million empty lists took about half a second to build and be refused, and
three at once stalled every other client of the process for 1.4-1.9 s.
These scans read the bytes instead -- no object per item -- and say when a
message holds more than :data:`~django_rivet.domain.MAX_ENTRIES` list items
and map entries, or nests more than :data:`~django_rivet.domain.MAX_DEPTH`
lists and maps, so that it is refused before it is built:

* **CBOR** (:func:`cbor_excess`): a walk of the items' heads. A definite
  list or map says how many entries it holds in its head, so a head past
  the limit is refused at once; strings are skipped by their length, and
  runs of small scalars (integers, floats, ``null``...) by one regular
  expression each. Malformed or truncated data ends the scan without a
  verdict: the decoder then says what is wrong, having built at most what
  the scan walked.
* **JSON** (:func:`json_excess`): counts of structural characters outside
  strings (strings are found by one regular expression): entries are the
  commas plus the non-empty lists and maps; nesting is how many times
  removing every innermost ``[]`` empties the brackets.

Each entry takes at least one byte of CBOR and two of JSON, so messages
too small to pass :data:`~django_rivet.domain.MAX_ENTRIES` are not scanned
at all (every WebSocket frame under the default
``MAX_INCOMING_MESSAGE_BYTES``): their nesting is bounded while they are
decoded (``cbor2``'s ``max_depth``; ``json``'s recursion limit) and their
size bounds what decoding them costs. The scans count what was sent: a
map's duplicate keys count as entries although the decoded map keeps one.

This module imports nothing from Django.
"""

from __future__ import annotations

import re
import time

from .domain import MAX_DEPTH, MAX_ENTRIES, PACE_ITEMS, PACE_PAUSE, is_paced

__all__ = ["cbor_excess", "json_excess", "too_deep", "too_many"]

Buffer = bytes | bytearray | memoryview


def too_many(max_entries: int) -> str:
    """The refusal of a message over ``max_entries`` (``value_problem``'s words)."""
    return f"a message holds at most {max_entries} list items and map entries"


def too_deep(max_depth: int) -> str:
    """The refusal of a message nested past ``max_depth``."""
    return f"values nest at most {max_depth} levels of lists and maps"


# -- CBOR ---------------------------------------------------------------------------
# The walk's current frame: a definite list or map is its count of items
# still to come (a map's entry is two items); the others are these.
_LIST, _MAP, _STRING, _ROOT = -1, -2, -3, -4
_ARGUMENT = {24: 1, 25: 2, 26: 4, 27: 8}


def _item_size(initial: int, empty_containers: bool) -> int:
    """The size of a whole item that its first byte says, else 0.

    Integers, floats, simple values and strings of at most 23 bytes;
    empty lists and maps when ``empty_containers`` (else they are walked,
    for their depth).
    """
    major, info = initial >> 5, initial & 31
    if major in (0, 1, 7) and (info < 24 or info in _ARGUMENT):
        return 1 + _ARGUMENT.get(info, 0)
    if major in (2, 3) and info < 24:
        return 1 + info
    if major in (4, 5) and info == 0 and empty_containers:
        return 1
    return 0


_SIZES = bytes(_item_size(initial, True) for initial in range(256))
_SIZES_AT_MAX_DEPTH = bytes(_item_size(initial, False) for initial in range(256))
# Runs of items of one byte: small integers, empty strings, simple values,
# and (below the depth limit) empty lists and maps.
_ONE_BYTE_RUN = re.compile(
    b"[" + bytes(b for b in range(256) if _SIZES[b] == 1) + b"]+"
)
_ONE_BYTE_RUN_AT_MAX_DEPTH = re.compile(
    b"[" + bytes(b for b in range(256) if _SIZES_AT_MAX_DEPTH[b] == 1) + b"]+"
)


_SAME_HEAD_RUNS: dict[int, re.Pattern[bytes]] = {}


def _same_head_run(initial: int, size: int) -> re.Pattern[bytes]:
    """A run of items of ``size`` bytes that all start with ``initial``."""
    pattern = _SAME_HEAD_RUNS.get(initial)
    if pattern is None:
        head = re.escape(bytes((initial,)))
        pattern = re.compile(b"(?:%s[\\s\\S]{%d})+" % (head, size - 1))
        _SAME_HEAD_RUNS[initial] = pattern
    return pattern


def cbor_excess(
    data: Buffer, max_entries: int = MAX_ENTRIES, max_depth: int = MAX_DEPTH
) -> str | None:
    """Return why CBOR ``data`` holds too much to build, else ``None``.

    ``None`` also when the data is malformed (the decoder says so).
    """
    size = len(data)
    if size <= max_entries:  # every item takes a byte
        return None
    pace = is_paced()
    limit = 2 * max_entries  # counted in halves: a map's item is half an entry
    halves = 0
    frame = _ROOT  # the innermost open list, map or string
    stack: list[int] = []  # the frames around it
    depth = 0
    index = 0
    steps = tags = 0
    while index < size:
        if pace:
            steps += 1
            if steps >= PACE_ITEMS:
                steps = 0
                time.sleep(PACE_PAUSE)
        below = depth < max_depth
        initial = data[index]
        step = (_SIZES if below else _SIZES_AT_MAX_DEPTH)[initial]
        if step:  # a whole item: skip it, or a run of items of its size
            count, tags = 1, 0
            if index + 3 * step < size:
                pattern = None
                if step == 1 and frame != _STRING:
                    if _SIZES[data[index + 1]] == _SIZES[data[index + 3]] == 1:
                        pattern = _ONE_BYTE_RUN if below else _ONE_BYTE_RUN_AT_MAX_DEPTH
                elif data[index + step] == data[index + 2 * step] == initial:
                    pattern = _same_head_run(initial, step)
                if pattern is not None:
                    room = frame if frame > 0 else size
                    run = pattern.match(data, index, index + room * step)
                    if run is not None:
                        count = (run.end() - index) // step
            index += count * step
            if frame > 0:
                frame -= count
            elif frame == _LIST:
                halves += 2 * count
            elif frame == _MAP:
                halves += count
            elif frame == _ROOT:
                return None  # a scalar: the whole value
            elif initial >> 5 not in (2, 3):
                return None  # an indefinite string's chunk that is not one
        else:
            major, info = initial >> 5, initial & 31
            index += 1
            if info < 24:
                argument = info
            elif info in _ARGUMENT:
                width = _ARGUMENT[info]
                argument = int.from_bytes(data[index : index + width], "big")
                index += width
            elif info == 31 and major == 7:  # a break ends an indefinite item
                if frame not in (_LIST, _MAP, _STRING):
                    return None
                if frame != _STRING:
                    depth -= 1
                frame = stack.pop()
                if frame == _ROOT:
                    return None
                argument = -2
            elif info == 31 and major in (2, 3, 4, 5):
                argument = -1  # indefinite
            else:
                return None  # malformed: the decoder says how
            if major == 6:  # a tag: the item it tags takes the slot
                tags += 1
                if tags > max_depth:
                    return None  # the decoder counts tags as levels: refused
                continue
            tags = 0
            if argument != -2:  # the item takes a slot of its list or map
                if frame > 0:
                    frame -= 1
                elif frame == _LIST:
                    halves += 2
                elif frame == _MAP:
                    halves += 1
                elif frame == _STRING and (argument < 0 or major not in (2, 3)):
                    return None
                if major in (2, 3):
                    if argument >= 0:
                        index += argument
                        if frame == _ROOT:
                            return None
                    else:
                        stack.append(frame)
                        frame = _STRING
                elif depth >= max_depth:
                    return too_deep(max_depth)
                elif argument:  # a list or map
                    if argument > 0:
                        halves += 2 * argument
                    stack.append(frame)
                    frame = (
                        (argument * (2 if major == 5 else 1))
                        if argument > 0
                        else (_LIST if major == 4 else _MAP)
                    )
                    depth += 1
                elif frame == _ROOT:
                    return None  # an empty list or map: the whole value
        if halves > limit:
            return too_many(max_entries)
        while frame == 0:  # the innermost list or map is complete
            depth -= 1
            frame = stack.pop()
            if frame == _ROOT:
                return None
    return None


# -- JSON ---------------------------------------------------------------------------
# A string, or an unterminated one to the end: every attempt matches, so the
# scan is linear whatever the quotes and backslashes (possessive: no
# backtracking).
_JSON_STRING = re.compile(rb'"[^"\\]*+(?:\\[\s\S]?[^"\\]*+)*+(?:"|\Z)')
# Everything but brackets (braces become brackets: nesting is one count).
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_NOT_BRACKETS_OR_QUOTES = bytes(b for b in range(256) if b not in b'[]{}"')


def json_excess(
    data: Buffer | str, max_entries: int = MAX_ENTRIES, max_depth: int = MAX_DEPTH
) -> str | None:
    """Return why JSON ``data`` holds too much to build, else ``None``.

    ``None`` also when the data is malformed (the decoder says so).
    """
    if len(data) <= 2 * max_entries + 1:  # an entry takes two bytes, "0,"
        return None
    if isinstance(data, str):
        raw: bytes | bytearray = data.encode("utf-8", "surrogatepass")
    else:
        raw = data.tobytes() if isinstance(data, memoryview) else data
    # Counted in the whole text first (strings too): an upper bound, enough
    # for most messages.
    opened = raw.count(b"[") + raw.count(b"{")
    bound = raw.count(b",") + opened
    if bound <= max_entries and opened <= max_depth:
        return None
    brackets = None
    if bound <= max_entries and b"\\" not in raw:
        # Only the nesting is in doubt. Without escapes, the strings are
        # what lies between quotes: when no string holds a bracket, the
        # brackets left once every empty "" is gone are the structure's.
        quoted = raw.translate(_BRACKETS, _NOT_BRACKETS_OR_QUOTES).replace(b'""', b"")
        if b'"' not in quoted:
            brackets = quoted
    if brackets is None:
        # A placeholder for each string keeps ["x"] from reading as [].
        structure = _JSON_STRING.sub(b"0", raw)
        commas = structure.count(b",")
        if commas > max_entries:  # each comma is one entry after another
            return too_many(max_entries)
        structure = structure.translate(None, b" \t\r\n")
        opened = structure.count(b"[") + structure.count(b"{")
        empty = structure.count(b"[]") + structure.count(b"{}")
        if commas + opened - empty > max_entries:
            return too_many(max_entries)
        if opened <= max_depth:
            return None
        brackets = structure.translate(_BRACKETS, _NOT_BRACKETS)
    # Each pass removes the innermost lists and maps: one level.
    for _level in range(max_depth):
        if not brackets:
            return None
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):
            return None  # unbalanced: malformed
        brackets = shorter
    return too_deep(max_depth) if brackets else None
