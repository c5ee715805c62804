"""CBOR and JSON codecs for values crossing the wire and for storage.

Two kinds of input, two kinds of decoding:

* **Untrusted wire data** (:func:`decode`, :func:`adecode`,
  :func:`decode_message`, :func:`json_loads`): what clients send. It must
  be a value JSON can carry -- maps with string keys, lists, strings,
  finite numbers (integers of at most 4300 digits, as Python's JSON reads),
  booleans and null -- plus what the CBOR tag allow-list adds (date/time,
  bignums, UUIDs, byte strings). Map keys of any other type are refused
  while decoding (cbor2's ``strict_hashable_types``), before a dict is
  built, so crafted keys whose hashes collide cannot make decoding
  quadratic. A message holds at most :data:`MAX_ENTRIES` list items and map
  entries and nests at most :data:`MAX_DEPTH` containers. NaN, infinities,
  CBOR ``undefined`` and other simple values are refused. Decoding bodies
  over :data:`OFFLOAD_BYTES` runs in a worker thread (:func:`adecode`), so
  one slow body cannot stall the event loop that serves other connections.
* **Stored data** (:func:`cbor_loads`): what this process wrote. Tags stay on
  the allow-list and nesting is bounded, nothing more.

CBOR tags outside the allow-list, including cbor2's other built-in tags
(regular expressions, MIME messages, sets, shared references...), are refused
either way, so decoding never builds arbitrary objects. Trailing bytes are
refused. Every decoding failure is
:class:`~django_rivet.exceptions.MalformedRequest`.

Writing (:func:`cbor_dumps`, what state, KV, events, queues, schedules and
workflow values go through) refuses values nested deeper than
:data:`MAX_DEPTH` with :class:`~django_rivet.exceptions.ValueTooDeep`: what
is stored can always be read back, and nothing a client can send is too deep
to be stored.

This module imports nothing from Django.
"""

from __future__ import annotations

import asyncio
import base64
import decimal
import email.message
import fractions
import io
import ipaddress
import json
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Literal, TypeVar

import cbor2

from .exceptions import InvalidEncoding, InvalidValue, MalformedRequest, ValueTooDeep

__all__ = [
    "ALLOWED_CBOR_TAGS",
    "INT_MAX",
    "INT_MIN",
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "OFFLOAD_BYTES",
    "READ_DEPTH",
    "Encoded",
    "Encoding",
    "adecode",
    "adecode_message",
    "cbor_dumps",
    "cbor_loads",
    "check_depth",
    "check_value",
    "cbor_map",
    "decode",
    "decode_message",
    "decode_trusted",
    "encode",
    "encode_state",
    "encode_value",
    "json_dumps",
    "json_loads",
    "parse_encoding",
    "run_decoder",
    "splice",
    "value_problem",
]

Encoding = Literal["json", "cbor"]
T = TypeVar("T")

# 0/1: date/time, 2/3: bignums, 37: UUID, 64: bytes tagged as a Uint8Array
# (what JavaScript encoders such as cbor-x write; decoded as bytes).
ALLOWED_CBOR_TAGS = frozenset({0, 1, 2, 3, 37, 64})
UINT8_ARRAY_TAG = 64
#: Containers (maps, lists) a value may nest: one limit for what clients send,
#: what is stored and what is read back.
MAX_DEPTH = 128
#: List items plus map entries in one incoming message (a 1 MiB body of tiny
#: items would otherwise be a million Python objects to build and walk).
MAX_ENTRIES = 100_000
#: Incoming bodies and frames larger than this are decoded in a worker thread.
OFFLOAD_BYTES = 16 * 1024
#: Integers of the value domain: signed 64-bit, what every encoding carries
#: without a bignum (CBOR, BARE's i64, the RivetKit client's BigInt) and every
#: database column. Larger ones are refused where they are written or sent.
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
#: Nesting accepted when reading what a server wrote or sent: a stored value
#: (at most MAX_DEPTH) inside a frame's envelope, plus one level for a tagged
#: leaf (a datetime, UUID or bignum counts as a level for cbor2).
READ_DEPTH = MAX_DEPTH + 8


def _refuse_tag(*args: Any) -> Any:
    raise ValueError("CBOR tag not allowed")


def _tag_hook(tag: Any, *args: Any) -> Any:
    # cbor2 6 calls tag_hook(tag, immutable) for tags it has no decoder for.
    if (
        isinstance(tag, cbor2.CBORTag)
        and tag.tag == UINT8_ARRAY_TAG
        and isinstance(tag.value, bytes)
    ):
        return tag.value
    raise ValueError("CBOR tag not allowed")


class _TagPolicy(Mapping[int, Any]):
    """Map every tag outside the allow-list to a refusing decoder.

    cbor2 consults ``semantic_decoders`` before its built-in tag decoders, so
    this one mapping disables them all, including tags added by future cbor2
    releases.
    """

    def __getitem__(self, tag: int) -> Any:
        if tag in ALLOWED_CBOR_TAGS:
            raise KeyError(tag)
        return _refuse_tag

    def __contains__(self, tag: object) -> bool:
        return tag not in ALLOWED_CBOR_TAGS

    def get(self, tag: int, default: Any = None) -> Any:
        return default if tag in ALLOWED_CBOR_TAGS else _refuse_tag

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0


_TAG_POLICY = _TagPolicy()


# -- the value domain -----------------------------------------------------------------
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
_pacing = threading.local()


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
    pace = getattr(_pacing, "on", False)
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


# -- writing ------------------------------------------------------------------------
def _refuse_type(encoder: Any, value: Any) -> None:
    raise TypeError(f"{type(value).__name__} values cannot be stored or sent")


# cbor2 encodes these natively with tags that decoding refuses; refusing them
# keeps every frame readable. (Values of the domain never hold them: checked
# values are encoded without this table, which costs cbor2 three times the
# time.)
_REFUSED_ENCODERS: dict[type, Any] = {
    kind: _refuse_type
    for kind in (
        set,
        frozenset,
        decimal.Decimal,
        fractions.Fraction,
        re.Pattern,
        email.message.Message,
        ipaddress.IPv4Address,
        ipaddress.IPv6Address,
        ipaddress.IPv4Network,
        ipaddress.IPv6Network,
        cbor2.CBORTag,
    )
}
_CONTAINERS = (dict, list, tuple)


def _cbor_encode(value: Any) -> bytes:
    try:
        return cbor2.dumps(
            value, timezone=UTC, date_as_datetime=True, encoders=_REFUSED_ENCODERS
        )
    except (cbor2.CBOREncodeError, TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"Value is not CBOR-serializable: {exc}") from exc


def _cbor_checked(value: Any) -> bytes:
    """Encode a value :func:`check_value` accepted (cbor2's fast path)."""
    try:
        return cbor2.dumps(value, timezone=UTC, date_as_datetime=True)
    except (cbor2.CBOREncodeError, TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"Value is not CBOR-serializable: {exc}") from exc


def cbor_dumps(value: Any, where: str = "value") -> bytes:
    """Check ``value`` against the value domain and encode it as CBOR for storage.

    Naive datetimes are taken as UTC. Raises :class:`InvalidValue` (also a
    ``TypeError``) naming the path from ``where`` for a value outside the
    domain, :class:`ValueTooDeep` past :data:`MAX_DEPTH`.
    """
    check_value(value, where)
    return _cbor_checked(value)


def encode_state(value: Any, where: str = "state") -> tuple[bytes, int]:
    """:func:`cbor_dumps`, also returning how many items and entries it holds."""
    entries = check_value(value, where)
    return _cbor_checked(value), entries


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        # JSON has no bytes; this tagged form is documented in docs/protocol.md.
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def json_dumps(value: Any, *, indent: int | None = None) -> str:
    """Encode ``value`` as JSON (datetimes as ISO 8601 strings).

    Compact by default; ``indent`` pretty-prints (the admin uses it).
    """
    return json.dumps(
        value,
        default=_json_default,
        separators=(",", ":") if indent is None else (",", ": "),
        indent=indent,
        ensure_ascii=False,
        allow_nan=False,
    )


@dataclass(frozen=True, slots=True)
class Encoded:
    """A value checked against the domain and encoded for one encoding.

    What an action's invocation hands the transport that called it (the
    output is encoded before the transaction commits); frames embed
    ``data`` as it is (:func:`splice`).
    """

    data: bytes


def encode_value(value: Any, encoding: Encoding, where: str = "output") -> bytes:
    """Check ``value`` against the value domain and encode it for the wire.

    Raises :class:`InvalidValue` naming the path from ``where``.
    """
    check_value(value, where)
    if encoding == "cbor":
        return _cbor_checked(value)
    return json_dumps(value).encode("utf-8")


def _cbor_head(major: int, length: int) -> bytes:
    if length < 24:
        return bytes((major << 5 | length,))
    if length < 0x100:
        return bytes((major << 5 | 24, length))
    if length < 0x10000:
        return bytes((major << 5 | 25,)) + length.to_bytes(2, "big")
    return bytes((major << 5 | 26,)) + length.to_bytes(4, "big")


def cbor_map(items: list[tuple[str, bytes]]) -> bytes:
    """Assemble a CBOR map from string keys and already-encoded values."""
    return _cbor_head(5, len(items)) + b"".join(
        _cbor_checked(key) + value for key, value in items
    )


def splice(head: dict[str, Any], name: str, data: bytes, encoding: Encoding) -> bytes:
    """Encode the map ``head`` plus ``name``: an already-encoded value, last.

    Frames carry an action's output as :class:`Encoded` bytes; this puts
    them in their envelope without decoding or encoding them again.
    """
    if encoding == "cbor":
        items = [(key, _cbor_encode(value)) for key, value in head.items()]
        return cbor_map([*items, (name, data)])
    start = json_dumps(head).encode("utf-8")[:-1]
    separator = b"," if head else b""
    return start + separator + json.dumps(name).encode("ascii") + b":" + data + b"}"


def encode(value: Any, encoding: Encoding) -> bytes:
    """Encode ``value`` for the wire in ``encoding`` (frames, error bodies).

    No domain check: frames wrap values checked where they were made (an
    action's output, an event's arguments); types outside the domain still
    fail here rather than reach a client unreadable.
    """
    if encoding == "cbor":
        return _cbor_encode(value)
    return json_dumps(value).encode("utf-8")


# -- reading what this process wrote ----------------------------------------------
def _cbor_decode(data: bytes | bytearray | memoryview, *, strict: bool) -> Any:
    decoder = cbor2.CBORDecoder(
        io.BytesIO(data),
        semantic_decoders=_TAG_POLICY,
        tag_hook=_tag_hook,
        # Tags count as a level for cbor2; the walk checks MAX_DEPTH
        # containers exactly.
        max_depth=MAX_DEPTH + 1 if strict else READ_DEPTH,
        # Buffered reads (a byte at a time cost five times as much); the
        # decoder's own read below finds trailing bytes in its buffer.
        read_size=4096,
        str_errors="strict",
        strict_hashable_types=strict,
    )
    try:
        value = decoder.decode()
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError) as exc:
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""
        raise MalformedRequest(f"Malformed CBOR: {exc}{cause}") from exc
    try:
        decoder.read(1)
    except cbor2.CBORDecodeEOF:
        return value
    raise MalformedRequest("Malformed CBOR: trailing bytes after the value")


def cbor_loads(data: bytes | bytearray | memoryview) -> Any:
    """Decode one stored CBOR value (tags on the allow-list, bounded depth)."""
    return _cbor_decode(data, strict=False)


def decode_trusted(data: bytes | str, encoding: Encoding) -> Any:
    """Decode what a server sent: the allow-list and a depth bound only.

    For clients reading answers (which may carry, say, integer map keys in
    CBOR); never for what clients send.
    """
    if encoding == "cbor":
        if isinstance(data, str):
            raise MalformedRequest("CBOR must arrive as binary data")
        return _cbor_decode(data, strict=False)
    try:
        if not isinstance(data, str):
            data = bytes(data).decode("utf-8")
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise MalformedRequest(f"Malformed JSON: {exc}") from exc


# -- reading what clients send ----------------------------------------------------
def decode_message(
    data: bytes | bytearray | memoryview | str,
    encoding: Encoding,
    *,
    undefined: bool = False,
) -> tuple[Any, MalformedRequest | None]:
    """Decode an untrusted message; return it with what is wrong with its values.

    Raises :class:`MalformedRequest` when the data cannot be decoded at all
    (syntax, refused tags, non-string CBOR map keys, trailing bytes, nesting
    beyond what the decoder builds). A message that decodes but carries values
    JSON cannot (NaN, ``undefined``, too deep, too many entries...) is returned
    with the refusal, so that a caller can still read, say, a frame's id to
    answer the right request. ``undefined=True`` admits CBOR ``undefined``
    (the RivetKit client's convention).
    """
    if encoding == "cbor":
        if isinstance(data, str):
            raise MalformedRequest("CBOR must arrive as binary data")
        value = _cbor_decode(data, strict=True)
    else:
        try:
            text = data if isinstance(data, str) else bytes(data).decode("utf-8")
            # NaN and Infinity decode to floats, refused below with the rest.
            value = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise MalformedRequest(f"Malformed JSON: {exc}") from exc
    problem = value_problem(value, max_entries=MAX_ENTRIES, undefined=undefined)
    if problem is None:
        return value, None
    path, reason = problem
    where = f" at {path}" if path else ""
    return value, MalformedRequest(
        f"Malformed {encoding.upper()}: {reason}{where}",
        metadata={"path": path, "reason": reason} if path else {"reason": reason},
    )


def decode(
    data: bytes | bytearray | memoryview | str,
    encoding: Encoding,
    *,
    undefined: bool = False,
) -> Any:
    """Decode untrusted wire data in ``encoding`` (see the module docstring)."""
    value, problem = decode_message(data, encoding, undefined=undefined)
    if problem is not None:
        raise problem
    return value


async def run_decoder(
    decoder: Callable[..., T], data: bytes | str, *args: Any, **kwargs: Any
) -> T:
    """Return ``decoder(data, *args, **kwargs)``, run in a worker thread when
    ``data`` is over :data:`OFFLOAD_BYTES`.

    Small messages are decoded in place (a thread hop costs more than they
    do); large ones leave the event loop free for other connections.
    """
    if len(data) <= OFFLOAD_BYTES:
        return decoder(data, *args, **kwargs)
    return await asyncio.to_thread(_run_paced, decoder, data, *args, **kwargs)


def _run_paced(decoder: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    # The value walks of this thread pause now and then (see PACE_ITEMS).
    _pacing.on = True
    try:
        return decoder(*args, **kwargs)
    finally:
        _pacing.on = False


async def adecode_message(
    data: bytes | bytearray | memoryview | str,
    encoding: Encoding,
    *,
    undefined: bool = False,
) -> tuple[Any, MalformedRequest | None]:
    """:func:`decode_message`, in a worker thread when ``data`` is large."""
    return await run_decoder(
        decode_message,
        bytes(data) if isinstance(data, bytearray | memoryview) else data,
        encoding,
        undefined=undefined,
    )


async def adecode(
    data: bytes | bytearray | memoryview | str,
    encoding: Encoding,
    *,
    undefined: bool = False,
) -> Any:
    """:func:`decode`, in a worker thread when ``data`` is large."""
    value, problem = await adecode_message(data, encoding, undefined=undefined)
    if problem is not None:
        raise problem
    return value


def json_loads(data: str | bytes | bytearray | memoryview) -> Any:
    """Decode JSON from untrusted text or UTF-8 bytes."""
    return decode(data, "json")


def parse_encoding(value: str | None) -> Encoding:
    """Validate an ``encoding`` parameter (default ``json``)."""
    if value in (None, "", "json"):
        return "json"
    if value == "cbor":
        return "cbor"
    raise InvalidEncoding(f"Unsupported encoding {value!r}; use 'json' or 'cbor'.")
