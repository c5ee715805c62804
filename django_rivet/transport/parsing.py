"""Reading what clients send: query parameters, keys, ids, conn params.

Shared by the HTTP views and the WebSocket consumer (and any other flavour of
the protocol), so a parameter means the same thing on every route.
"""

from __future__ import annotations

import base64
import binascii
import copy
import io
import re
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, QueryDict
from django.utils.datastructures import CaseInsensitiveMapping

from ..actors.rows import ActorRef, Mode
from ..encoding import Encoding, decode, parse_encoding
from ..exceptions import (
    ActorNotFound,
    MalformedRequest,
    NoChannelLayer,
    RequestTooLarge,
)
from ..tokens import MASK, mask_query, mask_tokens

__all__ = [
    "MAX_CONN_PARAMS_BYTES",
    "MAX_EVENT_NAME_LENGTH",
    "MAX_SUBSCRIPTIONS",
    "PARAMS_PREFIX",
    "SUBPROTOCOL",
    "ConnectRequest",
    "event_name",
    "handshake_request",
    "masked_request",
    "masked_scope",
    "parse_actor_id",
    "parse_bool",
    "parse_conn_params",
    "required_channel",
    "parse_connect_request",
    "query_params",
    "scope_headers",
]

SUBPROTOCOL = "rivet"
PARAMS_PREFIX = "rivet_conn_params."
MAX_CONN_PARAMS_BYTES = 4096
# Base64 of MAX_CONN_PARAMS_BYTES, so oversized params are refused unread.
MAX_CONN_PARAMS_ENCODED = 4 * -(-MAX_CONN_PARAMS_BYTES // 3)
MAX_EVENT_NAME_LENGTH = 255  # ActorEvent.name
MAX_SUBSCRIPTIONS = 256
# ASCII digits only (str.isdigit() admits "²", which int() refuses), few
# enough to fit the 64-bit seq column.
_SINCE = re.compile(r"[0-9]{1,18}")


@dataclass(slots=True)
class ConnectRequest:
    """What a client asks for in the URL and the subprotocol list."""

    name: str
    key: list[str] = field(default_factory=list)
    actor_id: uuid.UUID | None = None
    encoding: Encoding = "json"
    since: int | None = None
    wildcard: bool = False
    subscriptions: list[str] = field(default_factory=list)
    create: bool = True
    params: Any = None
    offered_rivet: bool = False

    def ref(self) -> ActorRef:
        """Return the runtime reference of the addressed actor."""
        if self.actor_id is not None:
            return ActorRef(name=self.name, actor_id=self.actor_id)
        mode: Mode = "get_or_create" if self.create else "get"
        return ActorRef.of(self.name, self.key, mode=mode)


def query_params(query_string: str) -> dict[str, list[str]]:
    """Parse a query string; percent-escapes must decode as UTF-8.

    The lenient default (``errors="replace"``) would read ``?key=%FF`` and
    ``?key=%FE`` as the same key, one actor for two different names. More
    than ``DATA_UPLOAD_MAX_NUMBER_FIELDS`` parameters is ``request/malformed``.
    """
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    try:
        return parse_qs(
            query_string, keep_blank_values=True, errors="strict", max_num_fields=limit
        )
    except UnicodeDecodeError as exc:
        raise MalformedRequest(
            "The query string is not UTF-8 once percent-decoded"
        ) from exc
    except ValueError as exc:  # past max_num_fields (Django's request.GET: a 500)
        raise MalformedRequest(
            f"The query string has more than {limit} parameters",
            metadata={"limit": limit},
        ) from exc


def _single(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise MalformedRequest(f"Query parameter {name!r} given more than once")
    return values[0]


def parse_bool(value: str | None, name: str, default: bool) -> bool:
    """Parse ``true/false/1/0`` query values."""
    if value is None or value == "":
        return default
    lowered = value.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise MalformedRequest(f"Query parameter {name!r} must be true or false")


def parse_actor_id(value: str) -> uuid.UUID:
    """Parse ``?actor_id=``; an invalid id names no actor."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ActorNotFound(
            f"Invalid actor id {value!r}", metadata={"actor_id": value}
        ) from None


def parse_conn_params(subprotocols: list[str]) -> tuple[Any, bool]:
    """Return ``(params, rivet offered)`` from the subprotocol list."""
    encoded = [p for p in subprotocols if p.startswith(PARAMS_PREFIX)]
    if len(encoded) > 1:
        raise MalformedRequest("More than one rivet_conn_params subprotocol")
    params = None
    if encoded:
        text = encoded[0][len(PARAMS_PREFIX) :]
        if len(text) > MAX_CONN_PARAMS_ENCODED:
            raise RequestTooLarge(
                f"Connection params are limited to {MAX_CONN_PARAMS_BYTES} bytes",
                metadata={"limit": MAX_CONN_PARAMS_BYTES},
            )
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError) as exc:
            raise MalformedRequest(
                "Connection params are not base64url-encoded JSON"
            ) from exc
        if len(raw) > MAX_CONN_PARAMS_BYTES:
            raise RequestTooLarge(
                f"Connection params are limited to {MAX_CONN_PARAMS_BYTES} bytes",
                metadata={"size": len(raw), "limit": MAX_CONN_PARAMS_BYTES},
            )
        params = decode(raw, "json")
    return params, SUBPROTOCOL in subprotocols


def parse_connect_request(scope: dict[str, Any]) -> ConnectRequest:
    """Read the actor, encoding, replay options and params from the scope."""
    kwargs = scope.get("url_route", {}).get("kwargs", {})
    try:
        query = query_params(scope.get("query_string", b"").decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise MalformedRequest("The query string is not UTF-8") from exc
    request = ConnectRequest(name=str(kwargs.get("name", "")))
    request.encoding = parse_encoding(_single(query, "encoding"))
    request.key = query.get("key", [])
    actor_id = _single(query, "actor_id")
    if actor_id:
        request.actor_id = parse_actor_id(actor_id)
    request.create = parse_bool(_single(query, "create"), "create", True)
    since = _single(query, "since")
    if since is not None and since != "":
        if not _SINCE.fullmatch(since):
            raise MalformedRequest(
                "since must be a non-negative integer of at most 18 digits",
                metadata={"since": since[:32]},
            )
        request.since = int(since)
    for value in query.get("subscribe", []):
        for event in value.split(","):
            if event == "*":
                request.wildcard = True
            elif event:
                request.subscriptions.append(event_name(event))
    if len(request.subscriptions) > MAX_SUBSCRIPTIONS:
        raise MalformedRequest(f"At most {MAX_SUBSCRIPTIONS} subscriptions")
    request.params, request.offered_rivet = parse_conn_params(
        list(scope.get("subprotocols") or [])
    )
    return request


def event_name(value: Any) -> str:
    """Validate an event name from a client (stored, so no NUL)."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise MalformedRequest("An event name is a non-empty string without NUL")
    if len(value) > MAX_EVENT_NAME_LENGTH:
        raise MalformedRequest(
            f"Event names are at most {MAX_EVENT_NAME_LENGTH} characters"
        )
    return value


def scope_headers(scope: dict[str, Any]) -> CaseInsensitiveMapping[str]:
    """Return the scope's headers (repeated ones joined with ", ")."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return CaseInsensitiveMapping(headers)


_HTTP_SCHEMES = {"ws": "http", "wss": "https"}


def handshake_request(scope: dict[str, Any]) -> HttpRequest:
    """Return the WebSocket handshake as an ``HttpRequest`` (for ``ctx.request``).

    A ``GET`` with the handshake's path, query (``GET``), headers, client
    (``META["REMOTE_ADDR"]``) and scheme (``ws``/``wss`` read as
    ``http``/``https``), and the ``user`` and ``session`` that Channels'
    ``AuthMiddlewareStack`` put in the scope; a gateway token in the path or
    query is masked (:func:`masked_scope`).
    """
    http_scope = {
        **scope,
        "type": "http",
        "method": "GET",
        "scheme": _HTTP_SCHEMES.get(str(scope.get("scheme") or "ws"), "http"),
    }
    request = ASGIRequest(masked_scope(http_scope), io.BytesIO())
    for name in ("user", "session"):
        if name in scope:
            setattr(request, name, scope[name])
    return request


def masked_scope(scope: dict[str, Any]) -> dict[str, Any]:
    """``scope``, or a copy with a gateway token masked in its path and query.

    What actor code is handed (``ctx.request``, ``info.request``): the
    client's token reaches ``on_auth`` as a header, never in a path that
    code may log.
    """
    path = str(scope.get("path", ""))
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    masked_path, masked = mask_tokens(path), mask_query(query)
    if masked_path == path and masked == query:
        return scope
    masked_copy: dict[str, Any] = {
        **scope,
        "path": masked_path,
        "query_string": masked.encode("latin-1"),
    }
    raw_path = scope.get("raw_path")
    if raw_path is not None:
        raw = mask_tokens(bytes(raw_path).decode("latin-1"))
        masked_copy["raw_path"] = raw.encode("latin-1")
    route = scope.get("url_route")
    if isinstance(route, dict) and isinstance(route.get("kwargs"), dict):
        masked_copy["url_route"] = {**route, "kwargs": _masked_route(route["kwargs"])}
    return masked_copy


def masked_request(request: HttpRequest) -> HttpRequest:
    """``request``, or a copy with a gateway token masked in its path and query.

    The copy shares everything else (headers, body, user, session).
    """
    query = request.META.get("QUERY_STRING", "")
    path, masked = mask_tokens(request.path), mask_query(query)
    if path == request.path and masked == query:
        return request
    clone = copy.copy(request)
    clone.path = path
    clone.path_info = mask_tokens(request.path_info)
    clone.META = {
        **request.META,
        # What servers put there of the request line (uWSGI's REQUEST_URI,
        # gunicorn's RAW_URI), too.
        **{
            key: mask_tokens(request.META[key])
            for key in ("PATH_INFO", "REQUEST_URI", "RAW_URI")
            if isinstance(request.META.get(key), str)
        },
        "QUERY_STRING": masked,
    }
    clone.GET = QueryDict(masked, encoding=request.encoding)
    if isinstance(getattr(request, "scope", None), dict):
        clone.scope = masked_scope(request.scope)  # type: ignore[attr-defined]
    match = request.resolver_match
    if match is not None:
        # A ResolverMatch refuses copy.copy (it cannot be pickled).
        clone.resolver_match = object.__new__(type(match))
        clone.resolver_match.__dict__.update(
            vars(match),
            kwargs=_masked_route(match.kwargs),
            captured_kwargs=_masked_route(getattr(match, "captured_kwargs", {})),
        )
    return clone


def _masked_route(kwargs: dict[str, Any]) -> dict[str, Any]:
    # The gateway routes' target: "{actor_id}@{token}".
    target = kwargs.get("target")
    if not isinstance(target, str) or "@" not in target:
        return kwargs
    return {**kwargs, "target": target.partition("@")[0] + "@" + MASK}


def required_channel(consumer: Any) -> str:
    """Return the consumer's channel name, or refuse: no channel layer.

    Without one (no ``CHANNEL_LAYERS``, under any server) the connection is
    refused with ``rivet/no_channel_layer``, which names the setting,
    instead of failing inside the runtime.
    """
    name = getattr(consumer, "channel_name", None)
    if not isinstance(name, str):
        raise NoChannelLayer()
    return name
