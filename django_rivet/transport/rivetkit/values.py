"""Value conventions of the RivetKit client, both ways.

JSON has no bigints, bytes, ``undefined`` or sets, so the client writes them
as two-element arrays tagged with a ``$`` string: ``["$BigInt", "12"]``,
``["$Uint8Array", base64]``, ``["$ArrayBuffer", base64]``,
``["$Undefined", 0]``, ``["$Set", [...]]``; an array whose first element is a
string starting with ``$`` is escaped by doubling it (``["$$x", 1]`` is the
value ``["$x", 1]``). The client applies the same conventions to the CBOR it
nests in BARE payloads, and it revives them when decoding plain CBOR too, so
this module applies them in every encoding:

* :func:`revive` turns a decoded client value into Python: ``$BigInt`` ->
  ``int``, ``$Uint8Array``/``$ArrayBuffer`` -> ``bytes``, ``$Undefined`` and
  CBOR ``undefined`` -> ``None``, ``$Set`` -> ``list`` (stored state has no
  sets). JavaScript numbers have no integer type: past 32 bits the client's
  CBOR encoder writes integers as floats, so integral floats come back as
  ``int``, as they would from JSON.
* :func:`prepare` turns a Python value into what the client expects:
  integers outside JavaScript's safe range become bigints (``$BigInt`` in
  JSON, an 8-byte CBOR integer otherwise), integers between 2**32 and
  2**53 become CBOR floats (so the client sees a ``number``, as it would for
  its own values), ``bytes`` become ``Uint8Array``, tuples and sets lists,
  and ``$``-tagged arrays are escaped.

Unknown ``$`` tags are refused with ``request/malformed``, as the client
refuses them.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import cbor2

from ...domain import INT_MAX, INT_MIN
from ...exceptions import MalformedRequest

__all__ = ["MAX_SAFE_INTEGER", "prepare", "revive"]

MAX_SAFE_INTEGER = 2**53 - 1
_UINT32 = 2**32

_BIGINT = "$BigInt"
_UINT8_ARRAY = "$Uint8Array"
_ARRAY_BUFFER = "$ArrayBuffer"
_UNDEFINED = "$Undefined"
_SET = "$Set"


def _is_tagged(value: list[Any]) -> bool:
    return len(value) == 2 and isinstance(value[0], str) and value[0].startswith("$")


def _b64(value: Any, tag: str) -> bytes:
    if not isinstance(value, str):
        raise MalformedRequest(f"{tag} needs a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedRequest(f"{tag} needs a base64 string") from exc


def _revive_tagged(tag: str, payload: Any) -> Any:
    if tag == _BIGINT:
        text = payload if isinstance(payload, str) else ""
        digits = text[1:] if text.startswith("-") else text
        if not digits.isascii() or not digits.isdigit():
            raise MalformedRequest("$BigInt needs a decimal string")
        # Past 20 digits it cannot be 64-bit: refused before int() parses it.
        if len(digits) > 20 or not INT_MIN <= int(text) <= INT_MAX:
            # The value domain's integers are 64-bit (docs/values.md).
            raise MalformedRequest(
                "$BigInt is past 64 bits", metadata={"reason": "integers are 64-bit"}
            )
        return int(text)
    if tag in (_UINT8_ARRAY, _ARRAY_BUFFER):
        return _b64(payload, tag)
    if tag == _UNDEFINED:
        return None
    if tag == _SET:
        if not isinstance(payload, list):
            raise MalformedRequest("$Set needs a list")
        return [revive(item) for item in payload]
    if tag.startswith("$$"):
        return [tag[1:], revive(payload)]
    raise MalformedRequest(
        f"Unknown value type {tag[:64]!r}", metadata={"type": tag[:64]}
    )


def revive(value: Any) -> Any:
    """Return the Python value of a decoded client value (see module doc)."""
    if isinstance(value, list):
        if _is_tagged(value):
            return _revive_tagged(value[0], value[1])
        return [revive(item) for item in value]
    if isinstance(value, dict):
        return {key: revive(item) for key, item in value.items()}
    if isinstance(value, float):
        if value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
            return int(value)
        return value
    if value is cbor2.undefined:
        return None
    return value


def prepare(value: Any, *, json: bool) -> Any:
    """Return ``value`` shaped for the client, for JSON or for CBOR."""
    if value is None or isinstance(value, bool | str | float):
        return value
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            return [_BIGINT, str(value)] if json else value
        if not json and abs(value) >= _UINT32:
            # cbor2 would write 8 bytes, which the client reads as a bigint.
            return float(value)
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        if json:
            return [_UINT8_ARRAY, base64.b64encode(bytes(value)).decode("ascii")]
        return bytes(value)
    if isinstance(value, dict):
        return {key: prepare(item, json=json) for key, item in value.items()}
    if isinstance(value, set | frozenset):
        return [_SET, [prepare(item, json=json) for item in value]]
    if isinstance(value, list | tuple):
        items = [prepare(item, json=json) for item in value]
        if _is_tagged(items):
            items[0] = "$" + items[0]
        return items
    return value  # datetimes, UUIDs...: the codec's own rules
