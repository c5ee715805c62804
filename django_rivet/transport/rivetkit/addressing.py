"""How the RivetKit client names actors: key strings and gateway targets.

* The actor REST API carries a key as one string: parts joined by ``/``,
  with ``\\`` escaping ``\\`` and ``/``, ``\\0`` marking an empty part, and
  ``/`` alone the empty key (``rivetkit/src/actor/keys.ts``).
* The gateway addresses one actor either by id -- ``gateway/{id}[@token]``
  -- or by name with ``rvt-*`` query parameters: ``rvt-method`` (``get`` or
  ``getOrCreate``), ``rvt-key`` (parts joined by commas, unescaped: a key
  part containing a comma cannot be addressed this way), ``rvt-input``
  (base64url CBOR), ``rvt-token``, ``rvt-namespace``...
* The client's ``token`` travels in several places depending on the call;
  :func:`gateway_token` finds it so ``on_auth`` sees it in one header.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...encoding import decode, json_loads
from ...exceptions import ActorNotFound, MalformedRequest, RequestTooLarge
from .values import revive

__all__ = [
    "MAX_CONN_PARAMS_BYTES",
    "TOKEN_HEADER",
    "GatewayTarget",
    "decode_conn_params",
    "decode_input",
    "gateway_target",
    "parse_actor_id",
    "parse_key",
    "serialize_key",
]

EMPTY_KEY = "/"
# The header on_auth reads the client's token from (the client sends it as
# such on gateway HTTP requests; other places are folded into it).
TOKEN_HEADER = "X-Rivet-Token"
MAX_CONN_PARAMS_BYTES = 4096
# rvt-input is base64url of CBOR; the client's own default limit is 4 KiB.
MAX_QUERY_INPUT_BYTES = 16384


# -- key strings ------------------------------------------------------------------
def serialize_key(parts: tuple[str, ...] | list[str]) -> str:
    """Return the client's string form of a key."""
    if not parts:
        return EMPTY_KEY
    escaped = []
    for part in parts:
        if part == "":
            escaped.append("\\0")
        else:
            escaped.append(part.replace("\\", "\\\\").replace("/", "\\/"))
    return "/".join(escaped)


def parse_key(text: str | None) -> list[str]:
    """Parse the client's string form of a key (inverse of serialize_key)."""
    if text is None or text == EMPTY_KEY:
        return []
    parts: list[str] = []
    current: list[str] = []
    escaping = False
    empty_marker = False
    for char in text:
        if escaping:
            if char == "0":
                empty_marker = True
            else:
                current.append(char)
            escaping = False
        elif char == "\\":
            escaping = True
        elif char == "/":
            parts.append("" if empty_marker else "".join(current))
            current, empty_marker = [], False
        else:
            current.append(char)
    if escaping:
        parts.append("".join(current) + "\\")
    elif empty_marker:
        parts.append("")
    elif current or parts:
        parts.append("".join(current))
    return parts


# -- values in URLs and headers ---------------------------------------------------
def parse_actor_id(value: str) -> uuid.UUID:
    """Parse an actor id; anything that is not one names no actor."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ActorNotFound(
            "Actor not found", metadata={"actor_id": value[:64]}
        ) from None


def decode_input(text: str | None, *, urlsafe: bool) -> Any:
    """Decode ``input``: base64 (REST) or base64url (``rvt-input``) of CBOR."""
    if text is None or text == "":
        return None
    if len(text) > 4 * MAX_QUERY_INPUT_BYTES // 3 + 4 and urlsafe:
        raise RequestTooLarge(
            f"rvt-input is limited to {MAX_QUERY_INPUT_BYTES} bytes",
            metadata={"limit": MAX_QUERY_INPUT_BYTES},
        )
    padded = text + "=" * (-len(text) % 4)
    try:
        raw = (
            base64.urlsafe_b64decode(padded)
            if urlsafe
            else base64.b64decode(padded, validate=True)
        )
    except (binascii.Error, ValueError) as exc:
        raise MalformedRequest("input must be base64-encoded CBOR") from exc
    return revive(decode(raw, "cbor", undefined=True))


def decode_conn_params(text: str | None) -> Any:
    """Decode connection params: JSON from a header or a subprotocol."""
    if text is None:
        return None
    size = len(text.encode("utf-8"))
    if size > MAX_CONN_PARAMS_BYTES:
        raise RequestTooLarge(
            f"Connection params are limited to {MAX_CONN_PARAMS_BYTES} bytes",
            metadata={"size": size, "limit": MAX_CONN_PARAMS_BYTES},
        )
    return revive(json_loads(text))


# -- gateway targets --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GatewayTarget:
    """The actor a gateway request addresses."""

    actor_id: uuid.UUID | None = None
    name: str | None = None
    key: tuple[str, ...] = ()
    # "get" | "get_or_create"; by-id targets never create.
    mode: str = "get"
    input: Any = None
    token: str | None = None


def _single(query: Mapping[str, list[str]], name: str) -> str | None:
    values = query.get(name) or []
    if len(values) > 1:
        raise MalformedRequest(f"Query parameter {name!r} given more than once")
    return values[0] if values else None


def gateway_target(segment: str, query: Mapping[str, list[str]]) -> GatewayTarget:
    """Parse the target segment after ``gateway/`` and the ``rvt-*`` params.

    ``segment`` is the decoded path segment (Django decodes the path).
    """
    method = _single(query, "rvt-method")
    if method is None:
        actor_id, _, token = segment.partition("@")
        return GatewayTarget(
            actor_id=parse_actor_id(actor_id),
            token=token or None,
        )
    if method not in ("get", "getOrCreate"):
        raise MalformedRequest(
            "rvt-method must be get or getOrCreate", metadata={"method": method[:32]}
        )
    key = _single(query, "rvt-key")
    return GatewayTarget(
        name=segment,
        # Absent: the empty key; present but empty: the key [""].
        key=tuple(key.split(",")) if key is not None else (),
        mode="get_or_create" if method == "getOrCreate" else "get",
        input=decode_input(_single(query, "rvt-input"), urlsafe=True),
        token=_single(query, "rvt-token"),
    )
