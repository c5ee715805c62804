"""Order-preserving tuple keys (FoundationDB tuple-layer semantics).

``pack`` turns a tuple into bytes whose byte order matches the tuple order, so a
sorted KV store can answer prefix and range scans over structured keys. The
encoding is the FoundationDB tuple layer's for the types used here: ``None``,
``bytes``, ``str``, arbitrary-size ``int``, ``bool``, ``float`` and nested
tuples. Elements of different types order by type code (None < bytes < str <
tuple < int < float < bool), as in FoundationDB.

The workflow key layout (docs/storage-format.md, "Keys") lives at the
bottom of this module.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

__all__ = [
    "ENTRIES",
    "EVENT",
    "METADATA",
    "NAMES",
    "PUBLISHED",
    "REPLY",
    "WORKFLOW",
    "WORKFLOW_ERROR",
    "WORKFLOW_INPUT",
    "WORKFLOW_OUTPUT",
    "WORKFLOW_STATE",
    "Location",
    "entry_key",
    "entry_id_of",
    "entry_prefix",
    "event_key",
    "metadata_key",
    "name_index_of",
    "name_key",
    "pack",
    "range_of",
    "reply_key",
    "strinc",
    "unpack",
    "unpack_location",
    "workflow_key",
]

_NULL = 0x00
_BYTES = 0x01
_STRING = 0x02
_NESTED = 0x05
_NEG_BIG = 0x0B
_INT_ZERO = 0x14
_POS_BIG = 0x1D
_DOUBLE = 0x21
_FALSE = 0x26
_TRUE = 0x27
_ESCAPE = 0xFF

Element = None | bytes | str | int | float | bool | tuple[Any, ...]


def pack(items: tuple[Any, ...]) -> bytes:
    """Encode a tuple as order-preserving bytes."""
    out = bytearray()
    for item in items:
        _encode(out, item, nested=False)
    return bytes(out)


def unpack(data: bytes) -> tuple[Any, ...]:
    """Decode bytes produced by :func:`pack` back into a tuple."""
    items, pos = _decode_sequence(data, 0, nested=False)
    if pos != len(data):
        raise ValueError("Trailing bytes after tuple")
    return tuple(items)


def unpack_location(data: bytes, start: int) -> Location:
    """Decode the location packed in ``data`` from offset ``start``.

    The fast path of loading history: a location is small non-negative ints
    and ``(int, int)`` iteration markers, decoded here without the general
    machinery; anything else falls back to :func:`unpack`.
    """
    items: list[int | tuple[int, int]] = []
    pos, end = start, len(data)
    while pos < end:
        code = data[pos]
        if _INT_ZERO < code <= _INT_ZERO + 8:
            length = code - _INT_ZERO
            items.append(int.from_bytes(data[pos + 1 : pos + 1 + length], "big"))
            pos += 1 + length
        elif code == _INT_ZERO:
            items.append(0)
            pos += 1
        elif code == _NESTED:
            pair, pos = _unpack_marker(data, pos + 1)
            if pair is None:
                break
            items.append(pair)
        else:
            break
    else:
        return tuple(items)
    return tuple(unpack(data[start:]))  # pragma: no cover - not engine keys


def _unpack_marker(data: bytes, pos: int) -> tuple[tuple[int, int] | None, int]:
    numbers: list[int] = []
    while pos < len(data):
        code = data[pos]
        if code == _NULL:
            if len(numbers) == 2:
                return (numbers[0], numbers[1]), pos + 1
            return None, pos
        if code == _INT_ZERO:
            numbers.append(0)
            pos += 1
        elif _INT_ZERO < code <= _INT_ZERO + 8:
            length = code - _INT_ZERO
            numbers.append(int.from_bytes(data[pos + 1 : pos + 1 + length], "big"))
            pos += 1 + length
        else:
            return None, pos
    return None, pos


def range_of(
    prefix: tuple[Any, ...], *, include_prefix: bool = False
) -> tuple[bytes, bytes]:
    """Return the half-open byte range ``[start, end)`` of keys extending ``prefix``.

    With ``include_prefix`` the key equal to ``pack(prefix)`` is inside the range.
    """
    packed = pack(prefix)
    start = packed if include_prefix else packed + b"\x00"
    # No element encoding starts with 0xFF, so every extension sorts below it.
    return start, packed + b"\xff"


def strinc(key: bytes) -> bytes:
    """Return the first key greater than every key starting with ``key``."""
    stripped = key.rstrip(b"\xff")
    if not stripped:
        raise ValueError("Key must contain a byte other than 0xFF")
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _encode(out: bytearray, item: Element, *, nested: bool) -> None:
    # bool before int: bool is an int subclass.
    if item is None:
        out.append(_NULL)
        if nested:
            out.append(_ESCAPE)
    elif item is True:
        out.append(_TRUE)
    elif item is False:
        out.append(_FALSE)
    elif isinstance(item, bytes | bytearray | memoryview):
        out.append(_BYTES)
        out += bytes(item).replace(b"\x00", b"\x00\xff")
        out.append(_NULL)
    elif isinstance(item, str):
        out.append(_STRING)
        out += item.encode("utf-8").replace(b"\x00", b"\x00\xff")
        out.append(_NULL)
    elif isinstance(item, int):
        _encode_int(out, item)
    elif isinstance(item, float):
        out.append(_DOUBLE)
        out += _float_bytes(item)
    elif isinstance(item, tuple):
        out.append(_NESTED)
        for child in item:
            _encode(out, child, nested=True)
        out.append(_NULL)
    else:
        raise TypeError(f"Cannot pack {type(item).__name__} into a tuple key")


def _encode_int(out: bytearray, value: int) -> None:
    if value == 0:
        out.append(_INT_ZERO)
        return
    magnitude = abs(value)
    length = (magnitude.bit_length() + 7) // 8
    if length > 255:
        raise ValueError("Integer too large for a tuple key")
    if value > 0:
        if length <= 8:
            out.append(_INT_ZERO + length)
        else:
            out.append(_POS_BIG)
            out.append(length)
        out += magnitude.to_bytes(length, "big")
        return
    # Negative numbers store the one's complement so that more negative sorts lower.
    complement = (1 << (8 * length)) - 1 - magnitude
    if length <= 8:
        out.append(_INT_ZERO - length)
    else:
        out.append(_NEG_BIG)
        out.append(length ^ 0xFF)
    out += complement.to_bytes(length, "big")


def _float_bytes(value: float) -> bytes:
    raw = bytearray(struct.pack(">d", value))
    if raw[0] & 0x80:
        # Negative: flip every bit so larger magnitudes sort lower.
        return bytes(b ^ 0xFF for b in raw)
    raw[0] ^= 0x80
    return bytes(raw)


def _float_from(raw: bytes) -> float:
    data = bytearray(raw)
    if data[0] & 0x80:
        data[0] ^= 0x80
    else:
        data = bytearray(b ^ 0xFF for b in data)
    value: float = struct.unpack(">d", bytes(data))[0]
    return value


def _decode_sequence(
    data: bytes, pos: int, *, nested: bool
) -> tuple[list[Element], int]:
    items: list[Element] = []
    while pos < len(data):
        code = data[pos]
        if nested and code == _NULL:
            if pos + 1 < len(data) and data[pos + 1] == _ESCAPE:
                items.append(None)
                pos += 2
                continue
            return items, pos + 1
        item, pos = _decode_one(data, pos, code)
        items.append(item)
    if nested:
        raise ValueError("Unterminated nested tuple")
    return items, pos


def _decode_one(data: bytes, pos: int, code: int) -> tuple[Element, int]:
    pos += 1
    if code == _NULL:
        return None, pos
    if code in (_BYTES, _STRING):
        raw, pos = _read_escaped(data, pos)
        return (raw if code == _BYTES else raw.decode("utf-8")), pos
    if code == _NESTED:
        items, pos = _decode_sequence(data, pos, nested=True)
        return tuple(items), pos
    if code == _INT_ZERO:
        return 0, pos
    if _INT_ZERO < code <= _INT_ZERO + 8:
        length = code - _INT_ZERO
        return int.from_bytes(data[pos : pos + length], "big"), pos + length
    if _INT_ZERO - 8 <= code < _INT_ZERO:
        length = _INT_ZERO - code
        complement = int.from_bytes(data[pos : pos + length], "big")
        return complement - ((1 << (8 * length)) - 1), pos + length
    if code == _POS_BIG:
        length = data[pos]
        pos += 1
        return int.from_bytes(data[pos : pos + length], "big"), pos + length
    if code == _NEG_BIG:
        length = data[pos] ^ 0xFF
        pos += 1
        complement = int.from_bytes(data[pos : pos + length], "big")
        return complement - ((1 << (8 * length)) - 1), pos + length
    if code == _DOUBLE:
        return _float_from(data[pos : pos + 8]), pos + 8
    if code == _FALSE:
        return False, pos
    if code == _TRUE:
        return True, pos
    raise ValueError(f"Unknown tuple type code 0x{code:02x}")


def _read_escaped(data: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    while True:
        end = data.find(b"\x00", pos)
        if end < 0:
            raise ValueError("Unterminated byte string")
        out += data[pos:end]
        if end + 1 < len(data) and data[end + 1] == _ESCAPE:
            out.append(0)
            pos = end + 2
            continue
        return bytes(out), end + 1


# --- The workflow key layout (docs/storage-format.md) --------------------------
# A location is a path of name indexes (ints) and loop iteration markers
# ``(loop_name_index, iteration)``; markers are nested tuples so that all of an
# iteration's entries share one key prefix and pruning is one range delete.
Location = tuple[int | tuple[int, int], ...]

NAMES = 1
ENTRIES = 2
WORKFLOW = 3
METADATA = 4
# Values published for readers outside the workflow (schema version 2):
# ``(5, 1, key)`` the value of ``ctx.set_event(key, ...)``, ``(5, 2,
# message_id)`` the reply ``ctx.reply`` sent to a request.
PUBLISHED = 5
EVENT = 1
REPLY = 2

WORKFLOW_STATE = 1
WORKFLOW_OUTPUT = 2
WORKFLOW_ERROR = 3
WORKFLOW_INPUT = 4


# The hot keys (one of each per step) are built directly: the same bytes
# as ``pack`` (``tests/engine/test_keys.py`` checks), without its
# general type dispatch.
_NAME_PREFIX = pack((NAMES,))
_ENTRY_PREFIX = pack((ENTRIES,))
_METADATA_PREFIX = pack((METADATA,))
_METADATA_STRING = _METADATA_PREFIX + bytes((_STRING,))


def _uint(value: int) -> bytes:
    if value == 0:
        return b"\x14"
    length = (value.bit_length() + 7) // 8
    if value < 0 or length > 8:
        return pack((value,))
    return bytes((_INT_ZERO + length,)) + value.to_bytes(length, "big")


def name_key(index: int) -> bytes:
    """Return the key of name registry slot ``index``."""
    return _NAME_PREFIX + _uint(index)


def entry_key(location: Iterable[int | tuple[int, int]]) -> bytes:
    """Return the key of the history entry at ``location``."""
    parts = [_ENTRY_PREFIX]
    for segment in location:
        if type(segment) is int:
            parts.append(_uint(segment))
        elif type(segment) is tuple and len(segment) == 2:
            parts += (b"\x05", _uint(segment[0]), _uint(segment[1]), b"\x00")
        else:
            return pack((ENTRIES, *location))
    return b"".join(parts)


def entry_prefix(location: Iterable[int | tuple[int, int]]) -> tuple[bytes, bytes]:
    """Return the key range of every entry strictly below ``location``."""
    return range_of((ENTRIES, *location))


def name_index_of(key: bytes) -> int:
    """Return the index in a key made by :func:`name_key` (load's fast path)."""
    if len(key) > 2 and key[:2] == _NAME_PREFIX:
        code = key[2]
        if code == _INT_ZERO and len(key) == 3:
            return 0
        if _INT_ZERO < code <= _INT_ZERO + 8 and len(key) == 3 + code - _INT_ZERO:
            return int.from_bytes(key[3:], "big")
    index: int = unpack(key)[1]
    return index


def entry_id_of(key: bytes) -> str:
    """Return the entry id in a key made by :func:`metadata_key`."""
    body = key[3:-1]
    if key[:3] == _METADATA_STRING and key[-1:] == b"\x00":
        if b"\x00" not in body.replace(b"\x00\xff", b""):
            return body.replace(b"\x00\xff", b"\x00").decode("utf-8")
    entry_id: str = unpack(key)[1]
    return entry_id


def metadata_key(entry_id: str) -> bytes:
    """Return the key of an entry's metadata."""
    escaped = entry_id.encode("utf-8").replace(b"\x00", b"\x00\xff")
    return _METADATA_STRING + escaped + b"\x00"


def workflow_key(field: int) -> bytes:
    """Return the key of a workflow field (state, output, error or input)."""
    return pack((WORKFLOW, field))


def event_key(key: str) -> bytes:
    """Return the key of the published event ``key`` (``ctx.set_event``)."""
    return pack((PUBLISHED, EVENT, key))


def reply_key(message_id: str) -> bytes:
    """Return the key of the reply to message ``message_id`` (``ctx.reply``)."""
    return pack((PUBLISHED, REPLY, message_id))
