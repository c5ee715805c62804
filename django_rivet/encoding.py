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
  quadratic. A message holds at most
  :data:`~django_rivet.domain.MAX_ENTRIES` list items and map entries and
  nests at most :data:`~django_rivet.domain.MAX_DEPTH` containers. NaN,
  infinities, CBOR ``undefined`` and other simple values are refused.
  Decoding bodies over :data:`OFFLOAD_BYTES` runs in a worker thread
  (:func:`adecode`), so one slow body cannot stall the event loop that
  serves other connections.
* **Stored data** (:func:`cbor_loads`): what this process wrote. Tags stay on
  the allow-list and nesting is bounded, nothing more.

CBOR tags outside the allow-list, including cbor2's other built-in tags
(regular expressions, MIME messages, sets, shared references...), are refused
either way, so decoding never builds arbitrary objects. Trailing bytes are
refused. Every decoding failure is
:class:`~django_rivet.exceptions.MalformedRequest`.

Writing (:func:`cbor_dumps`, what state, KV, events, queues, schedules and
workflow values go through) refuses values nested deeper than
:data:`~django_rivet.domain.MAX_DEPTH` with
:class:`~django_rivet.exceptions.ValueTooDeep`: what is stored can always
be read back, and nothing a client can send is too deep to be stored.

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
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, date, datetime
from typing import Any, Literal, TypeVar

import cbor2

from .domain import MAX_DEPTH, MAX_ENTRIES, check_value, paced, value_problem
from .exceptions import InvalidEncoding, MalformedRequest
from .prescan import cbor_excess, json_excess

__all__ = [
    "ALLOWED_CBOR_TAGS",
    "OFFLOAD_BYTES",
    "READ_DEPTH",
    "Encoding",
    "adecode",
    "adecode_message",
    "cbor_dumps",
    "cbor_loads",
    "decode",
    "decode_message",
    "decode_trusted",
    "encode",
    "encode_state",
    "encode_value",
    "encode_if_changed",
    "json_dumps",
    "json_loads",
    "parse_encoding",
    "run_decoder",
]

Encoding = Literal["json", "cbor"]
T = TypeVar("T")

# 0/1: date/time, 2/3: bignums, 37: UUID, 64: bytes tagged as a Uint8Array
# (what JavaScript encoders such as cbor-x write; decoded as bytes).
ALLOWED_CBOR_TAGS = frozenset({0, 1, 2, 3, 37, 64})
UINT8_ARRAY_TAG = 64
#: Incoming bodies and frames larger than this are decoded in a worker thread.
OFFLOAD_BYTES = 16 * 1024
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
    domain, :class:`ValueTooDeep` past :data:`~django_rivet.domain.MAX_DEPTH`.
    """
    check_value(value, where)
    return _cbor_checked(value)


def encode_state(value: Any, where: str = "state") -> tuple[bytes, int]:
    """:func:`cbor_dumps`, also returning how many items and entries it holds."""
    entries = check_value(value, where)
    return _cbor_checked(value), entries


def encode_if_changed(value: Any, stored: bytes, where: str = "state") -> bytes | None:
    """Return ``value`` encoded, or None if it encodes exactly as ``stored``.

    cbor2's encoder (in C) runs first; only a value whose encoding differs
    is walked against the value domain (as :func:`cbor_dumps` does, raising
    the same errors). ``stored`` was checked when it was written, and a value
    outside the domain never encodes as one inside it (other map keys, NaN,
    bignums, the tags of sets and decimals all encode differently; lone
    surrogates and cycles fail to encode), so an unchanged state costs one
    encoding and one comparison, not the walk.
    """
    try:
        encoded: bytes | None = cbor2.dumps(value, timezone=UTC, date_as_datetime=True)
    except (cbor2.CBOREncodeError, TypeError, ValueError, RecursionError):
        encoded = None
    if encoded is not None and encoded == stored:
        return None
    check_value(value, where)
    return encoded if encoded is not None else _cbor_checked(value)


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


def encode_value(value: Any, encoding: Encoding, where: str = "output") -> bytes:
    """Check ``value`` against the value domain and encode it for the wire.

    Raises :class:`InvalidValue` naming the path from ``where``.
    """
    check_value(value, where)
    if encoding == "cbor":
        return _cbor_checked(value)
    return json_dumps(value).encode("utf-8")


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
    beyond what the decoder builds), and before decoding when its bytes hold
    more entries or nesting than the limits (:mod:`~django_rivet.prescan`).
    A message that decodes but carries values JSON cannot (NaN,
    ``undefined``, too deep, too many entries...) is returned with the
    refusal, so that a caller can still read, say, a frame's id to answer the
    right request. ``undefined=True`` admits CBOR ``undefined`` (the RivetKit
    client's convention).
    """
    if encoding == "cbor":
        if isinstance(data, str):
            raise MalformedRequest("CBOR must arrive as binary data")
        _refuse_excess(cbor_excess(data), encoding)
        value = _cbor_decode(data, strict=True)
    else:
        _refuse_excess(json_excess(data), encoding)
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


def _refuse_excess(excess: str | None, encoding: Encoding) -> None:
    if excess is not None:
        raise MalformedRequest(
            f"Malformed {encoding.upper()}: {excess}", metadata={"reason": excess}
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
    # The value walks of this thread pause now and then (domain.PACE_ITEMS).
    with paced():
        return decoder(*args, **kwargs)


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
