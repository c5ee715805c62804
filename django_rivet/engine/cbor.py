"""Safe CBOR: the encoding of every workflow value, and what it may hold.

Decoding is restricted: only the CBOR tags for datetimes (0, 1), bignums (2, 3)
and UUIDs (37) are accepted; anything else raises :class:`SchemaError`. User
values (step outputs, loop state, inputs, message bodies) must be made of
``None``, bools, ints, floats, str, bytes, lists, tuples, dicts, datetimes,
UUIDs and :class:`Message`; :func:`roundtrip` checks that and returns the value
as a replay will see it (tuples come back as lists, naive datetimes as aware
UTC ones, messages as ``{id, name, body, created_at}`` maps). The records
built from these values are defined in :mod:`.schema`, which re-exports
``dumps``, ``loads`` and ``roundtrip``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import cbor2

from ..domain import MAX_DEPTH, check_depth, refused_type
from ..encoding import READ_DEPTH
from .errors import SchemaError, StepOutputError
from .values import Message

__all__ = ["check_storable", "dumps", "loads", "roundtrip", "text_at", "uint_at"]

_ALLOWED_TAGS = frozenset({0, 1, 2, 3, 37})


def _rejecting(tag: int) -> Any:
    # cbor2 calls semantic decoders with the decoder and, in some versions,
    # more arguments: accept any so the refusal is always the one raised.
    def reject(*args: Any) -> Any:
        raise cbor2.CBORDecodeError(f"CBOR tag {tag} is not allowed")

    return reject


class _RestrictedTags(Mapping[int, Any]):
    """Semantic decoders that refuse every tag outside the allowed set."""

    def __getitem__(self, tag: int) -> Any:
        if tag in _ALLOWED_TAGS:
            raise KeyError(tag)
        return _rejecting(tag)

    def get(self, tag: Any, default: Any = None) -> Any:
        return default if tag in _ALLOWED_TAGS else _rejecting(tag)

    def __contains__(self, tag: object) -> bool:
        return tag not in _ALLOWED_TAGS

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _reject_unknown_tag(*args: Any) -> Any:
    # The hook's arguments changed across cbor2 versions; find the tag itself.
    tag = next((a.tag for a in args if isinstance(a, cbor2.CBORTag)), "?")
    raise cbor2.CBORDecodeError(f"CBOR tag {tag} is not allowed")


_RESTRICTED = _RestrictedTags()
_DECODING: dict[str, Any] = {"tag_hook": _reject_unknown_tag, "max_depth": READ_DEPTH}


def _encode_extra(encoder: Any, value: Any) -> None:
    # Messages are what ctx.messages hands out; they are stored as plain maps.
    if isinstance(value, Message):
        encoder.encode(_message_map(value))
        return
    raise cbor2.CBOREncodeTypeError(f"cannot store a {type(value).__name__}")


def _message_map(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "name": message.name,
        "body": message.body,
        "created_at": message.created_at,
    }


def dumps(value: Any) -> bytes:
    """Encode ``value`` as CBOR (naive datetimes are UTC, messages are maps).

    No depth check here (it cost half of every record's encoding): user
    values pass :func:`check_storable` when they are recorded, and records
    only wrap them a few levels deeper, well within ``READ_DEPTH``.
    """
    return cbor2.dumps(value, timezone=UTC, default=_encode_extra)


def loads(data: bytes) -> Any:
    """Decode CBOR, accepting only the datetime, bignum and UUID tags."""
    try:
        return cbor2.loads(data, semantic_decoders=_RESTRICTED, **_DECODING)
    except cbor2.CBORDecodeError as exc:
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""
        raise SchemaError(f"Undecodable CBOR: {exc}{cause}") from exc


def check_storable(value: Any, what: str = "value") -> None:
    """Raise ``TypeError`` unless ``value`` can be stored and read back.

    The nesting limit of actor state first (iteratively, so a bomb cannot
    recurse), then the types (:func:`_check_types`). The message names
    ``what`` once, then where and why, in the actors' wording:
    ``Output of step "price" cannot be stored: Decimal is not in the value
    domain (use str, or int cents)``.
    """
    try:
        check_depth(value, MAX_DEPTH)
        if not _storable(value):
            _check_types(value, "")  # says where, and why
    except TypeError as exc:
        reason = getattr(exc, "message", None) or str(exc)
        raise TypeError(f"{what} cannot be stored: {reason}") from None


def _storable(value: Any) -> bool:
    """Tell whether ``value`` is made of storable types only (no path kept).

    The common case, checked without building a path string per item;
    :func:`_check_types` walks again to say where a refused value is.
    """
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return True
    if isinstance(value, list | tuple):
        return all(map(_storable, value))
    if isinstance(value, dict):
        return all(
            (key is None or isinstance(key, str | int | bytes | float))
            and _storable(item)
            for key, item in value.items()
        )
    if isinstance(value, Message):
        return _storable(value.body)
    return isinstance(value, datetime | uuid.UUID)


def _check_types(value: Any, path: str) -> None:
    """Raise ``TypeError`` unless ``value`` is made of storable types only."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return
    if isinstance(value, datetime | uuid.UUID):
        return
    if isinstance(value, Message):
        _check_types(value.body, f"{path}.body")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_types(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not (key is None or isinstance(key, str | int | bytes | float)):
                raise TypeError(
                    f"{_at(path)}a map key of type {type(key).__name__} is not "
                    "in the value domain (use str)"
                )
            _check_types(item, f"{path}[{key!r}]")
        return
    raise TypeError(f"{_at(path)}{refused_type(value)}")


def _at(path: str) -> str:
    return f"at {path.lstrip('.')}, " if path else ""


def roundtrip(value: Any, what: str = "value") -> Any:
    """Return ``value`` as stored and read back; raise if it cannot be stored.

    Raises :class:`StepOutputError` for unstorable types (sizes are checked
    where the value is recorded, see ``limits.check_record``).
    """
    if value is None or type(value) in _SCALARS:
        return value  # stored and read back as itself
    try:
        check_storable(value, what)
    except TypeError as exc:
        raise StepOutputError(str(exc)) from exc
    try:
        encoded = dumps(value)
    except (TypeError, ValueError, cbor2.CBOREncodeError) as exc:
        raise StepOutputError(f"{what} cannot be stored: {exc}") from exc
    return loads(encoded)


# Types that CBOR always encodes and gives back unchanged (floats: NaN and
# infinities too; ints of any size, big ones as bignum tags). Not str: a
# lone surrogate cannot be encoded.
_SCALARS = frozenset({bool, int, float, bytes})


# Reading a CBOR head without a decoder: the hot paths that peek at a record.


def text_at(data: bytes, pos: int) -> tuple[str, int] | None:
    """Read a definite CBOR text string at ``pos``: ``(text, next pos)``."""
    head = data[pos]
    if 0x60 <= head <= 0x77:
        size, pos = head - 0x60, pos + 1
    elif head == 0x78 and pos + 1 < len(data):
        size, pos = data[pos + 1], pos + 2
    else:
        return None
    end = pos + size
    if end > len(data):
        return None
    try:
        return data[pos:end].decode("utf-8"), end
    except UnicodeDecodeError:
        return None


def uint_at(data: bytes, pos: int) -> tuple[int, int] | None:
    """Read a CBOR unsigned integer at ``pos``: ``(value, next pos)``."""
    head = data[pos]
    if head < 0x18:
        return head, pos + 1
    width = {0x18: 1, 0x19: 2, 0x1A: 4, 0x1B: 8}.get(head)
    if width is None or pos + 1 + width > len(data):
        return None
    return int.from_bytes(data[pos + 1 : pos + 1 + width], "big"), pos + 1 + width
