"""CBOR and JSON codecs for values crossing the wire and for storage.

Decoding untrusted bytes is safe by construction: CBOR tags are limited to an
allow-list (date/time, bignums, UUID) and anything else, including cbor2's
other built-in tags (regular expressions, MIME messages, sets, shared
references...), is refused, so decoding never builds arbitrary objects.
Nesting depth is bounded and trailing bytes are refused. Every decoding
failure is :class:`~django_rivet.exceptions.MalformedRequest`.

This module imports nothing from Django.
"""

from __future__ import annotations

import base64
import decimal
import email.message
import fractions
import io
import ipaddress
import json
import re
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, date, datetime
from typing import Any, Literal

import cbor2

from .exceptions import InvalidEncoding, MalformedRequest

__all__ = [
    "ALLOWED_CBOR_TAGS",
    "Encoding",
    "cbor_dumps",
    "cbor_loads",
    "decode",
    "encode",
    "json_dumps",
    "json_loads",
    "parse_encoding",
]

Encoding = Literal["json", "cbor"]

# 0/1: date/time, 2/3: bignums, 37: UUID, 64: bytes tagged as a Uint8Array
# (what JavaScript encoders such as cbor-x write; decoded as bytes).
ALLOWED_CBOR_TAGS = frozenset({0, 1, 2, 3, 37, 64})
UINT8_ARRAY_TAG = 64
# Deep enough for real state, shallow enough to refuse nesting bombs quickly.
MAX_DEPTH = 128


def _refuse_tag(decoder: Any, tag: Any = None) -> Any:
    raise ValueError("CBOR tag not allowed")


def _tag_hook(*args: Any) -> Any:
    # cbor2 5 calls tag_hook(decoder, tag), cbor2 6 tag_hook(tag, immutable).
    tag = next((a for a in args if isinstance(a, cbor2.CBORTag)), None)
    if tag is not None and tag.tag == UINT8_ARRAY_TAG and isinstance(tag.value, bytes):
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


def _refuse_type(encoder: Any, value: Any) -> None:
    raise TypeError(f"{type(value).__name__} values cannot be stored or sent")


# cbor2 encodes these natively with tags that decoding refuses; refusing them
# on the way in keeps every stored value readable.
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


def cbor_dumps(value: Any) -> bytes:
    """Encode ``value`` as CBOR; naive datetimes are taken as UTC."""
    try:
        return cbor2.dumps(
            value, timezone=UTC, date_as_datetime=True, encoders=_REFUSED_ENCODERS
        )
    except (cbor2.CBOREncodeError, TypeError, ValueError) as exc:
        raise TypeError(f"Value is not CBOR-serializable: {exc}") from exc


def cbor_loads(
    data: bytes | bytearray | memoryview, *, max_depth: int = MAX_DEPTH
) -> Any:
    """Decode one CBOR item from untrusted bytes, refusing trailing data."""
    buffer = io.BytesIO(bytes(data))
    try:
        value = cbor2.CBORDecoder(
            buffer,
            semantic_decoders=_TAG_POLICY,
            tag_hook=_tag_hook,
            max_depth=max_depth,
            read_size=1,
            str_errors="strict",
        ).decode()
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError) as exc:
        raise MalformedRequest(f"Malformed CBOR: {exc}") from exc
    if buffer.tell() != buffer.getbuffer().nbytes:
        raise MalformedRequest("Malformed CBOR: trailing bytes after the value")
    return value


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
    if isinstance(value, set | frozenset | tuple):
        return list(value)
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


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def json_loads(data: str | bytes | bytearray | memoryview) -> Any:
    """Decode JSON from untrusted text or UTF-8 bytes."""
    try:
        if not isinstance(data, str):
            data = bytes(data).decode("utf-8")
        return json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise MalformedRequest(f"Malformed JSON: {exc}") from exc


def parse_encoding(value: str | None) -> Encoding:
    """Validate an ``encoding`` parameter (default ``json``)."""
    if value in (None, "", "json"):
        return "json"
    if value == "cbor":
        return "cbor"
    raise InvalidEncoding(f"Unsupported encoding {value!r}; use 'json' or 'cbor'.")


def encode(value: Any, encoding: Encoding) -> bytes:
    """Encode ``value`` for the wire in ``encoding``."""
    if encoding == "cbor":
        return cbor_dumps(value)
    return json_dumps(value).encode("utf-8")


def decode(data: bytes | str, encoding: Encoding) -> Any:
    """Decode wire data in ``encoding``."""
    if encoding == "cbor":
        if isinstance(data, str):
            raise MalformedRequest("CBOR must arrive as binary data")
        return cbor_loads(data)
    return json_loads(data)
