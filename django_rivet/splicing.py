"""Frames assembled from values encoded once: an action's output, a history blob.

An action's output is checked and encoded before its transaction commits
(:class:`Encoded`); the frame or response that carries it is assembled
around those bytes (:func:`splice`) instead of decoding and encoding them
again. The engine writes its history blobs' heads the same way
(:func:`cbor_head`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .encoding import Encoding, encode, json_dumps

__all__ = ["Encoded", "cbor_head", "cbor_map", "splice"]


@dataclass(frozen=True, slots=True)
class Encoded:
    """A value checked against the domain and encoded for one encoding.

    What an action's invocation hands the transport that called it (the
    output is encoded before the transaction commits); frames embed
    ``data`` as it is (:func:`splice`).
    """

    data: bytes


def cbor_head(major: int, length: int) -> bytes:
    """The head of a CBOR item of major type ``major`` and ``length``.

    The shortest form, as cbor2 writes it (for strings, arrays and maps whose
    bodies are assembled by hand).
    """
    if length < 24:
        return bytes((major << 5 | length,))
    if length < 0x100:
        return bytes((major << 5 | 24, length))
    if length < 0x10000:
        return bytes((major << 5 | 25,)) + length.to_bytes(2, "big")
    if length < 0x100000000:
        return bytes((major << 5 | 26,)) + length.to_bytes(4, "big")
    return bytes((major << 5 | 27,)) + length.to_bytes(8, "big")


def cbor_map(items: list[tuple[str, bytes]]) -> bytes:
    """Assemble a CBOR map from string keys and already-encoded values."""
    return cbor_head(5, len(items)) + b"".join(
        encode(key, "cbor") + value for key, value in items
    )


def splice(head: dict[str, Any], name: str, data: bytes, encoding: Encoding) -> bytes:
    """Encode the map ``head`` plus ``name``: an already-encoded value, last.

    Frames carry an action's output as :class:`Encoded` bytes; this puts
    them in their envelope without decoding or encoding them again.
    """
    if encoding == "cbor":
        items = [(key, encode(value, "cbor")) for key, value in head.items()]
        return cbor_map([*items, (name, data)])
    start = json_dumps(head).encode("utf-8")[:-1]
    separator = b"," if head else b""
    return start + separator + json.dumps(name).encode("ascii") + b":" + data + b"}"
