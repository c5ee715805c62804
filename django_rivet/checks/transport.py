"""Origins, the actor list, connection limits and the channel layer
(rivet.E501, W501, W502, E601, W601-W603).

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from channels.layers import channel_layers
from django.conf import settings
from django.core.checks import Tags, register

from ..conf import docs_url, rivet_settings
from ..transport.origins import normalize_origin
from .base import message

# -- the edges: origins, limits, dispatch (transport/origins.py, docs/security.md)
E501 = "RIVET['ALLOWED_ORIGINS'] entry {origin!r} is not an origin."
E501_HINT = (
    "List each page origin as scheme://host[:port] (no path, no wildcard "
    "subdomains: put those in CSRF_TRUSTED_ORIGINS, e.g. 'https://*.example.com')."
)
W501 = (
    "RIVET['ALLOWED_ORIGINS'] contains '*': a page on any site can open "
    "WebSockets to your actors with the visitor's cookies."
)
W501_HINT = (
    "Remove '*'. Same-origin pages and CSRF_TRUSTED_ORIGINS are allowed "
    "already; list other frontends' origins explicitly. See {docs}"
)


@register(Tags.security)
def check_origins(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check RIVET['ALLOWED_ORIGINS'] (its types are rivet.E004's)."""
    messages: list[Any] = []
    origins = rivet_settings.valid("ALLOWED_ORIGINS")
    if origins is None:
        return messages  # None, or a wrong type (rivet.E004)
    for origin in origins:
        if origin == "*":
            hint = W501_HINT.format(docs=docs_url("security", "websocket-origins"))
            messages.append(message("rivet.W501", W501, hint))
        elif normalize_origin(origin) is None or "*" in origin or _has_path(origin):
            text = E501.format(origin=origin)
            messages.append(message("rivet.E501", text, E501_HINT))
    return messages


W502 = "Any page can list your actors' ids and keys (RIVETKIT_LIST_FROM_BROWSERS)."
W502_HINT = "List them in server code (actors.filter) and turn it off. See {docs}"


@register(Tags.security)
def check_actor_list(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Warn when browsers may list actors through the RivetKit REST API."""
    if rivet_settings.valid("RIVETKIT_LIST_FROM_BROWSERS") is not True:
        return []
    hint = W502_HINT.format(docs=docs_url("rivetkit-client", "listing-actors"))
    return [message("rivet.W502", W502, hint)]


def _has_path(origin: str) -> bool:
    parts = urlsplit(origin)
    return parts.path not in ("", "/") or bool(parts.query or parts.fragment)


# -- the channel layer under load (realtime) ------------------------------------------
E601 = "The channel layer {alias!r} cannot be created: {error}"
E601_HINT = (
    "Fix CHANNEL_LAYERS[{alias!r}] (BACKEND path, CONFIG keys). Without a "
    "working layer, events reach other processes' sockets only through the "
    "event log check (EVENT_CHECK_INTERVAL) and conn.send() never arrives."
)
W601 = (
    "The Redis channel layer {alias!r} reads with a socket timeout of {timeout}s, "
    "not above channels_redis' blocking read ({blocking}s)."
)
W601_HINT = (
    "redis-py's default socket_timeout (5 s) equals channels_redis' blocking "
    "read, so idle reads end in timeouts and reconnects. Pass it per host: "
    "'hosts': [{{'address': REDIS_URL, 'socket_timeout': 10}}] ({docs})."
)
W602 = (
    "The Redis channel layer {alias!r} has capacity {capacity}, below "
    "RIVET['CONNECTIONS_PER_PROCESS'] ({expected})."
)
W602_HINT = (
    "channels_redis' capacity is per process: all sockets of one web process "
    "share one Redis list, so a burst of conn.send() or disconnects to more "
    "sockets than the capacity drops the rest. Set CONFIG 'capacity' to at "
    "least the connections one process holds ({docs})."
)
W603 = (
    "RIVET['MAX_EVENT_BYTES'] ({events}) is above "
    "RIVET['MAX_OUTGOING_MESSAGE_BYTES'] ({outgoing}): such events are "
    "accepted but can never be sent."
)
W603_HINT = "Keep MAX_EVENT_BYTES at most MAX_OUTGOING_MESSAGE_BYTES."

REDIS_LAYER = "channels_redis.core.RedisChannelLayer"
# redis-py's socket_timeout default and channels_redis' blocking read.
REDIS_DEFAULT_SOCKET_TIMEOUT = 5.0
REDIS_BLOCKING_READ = 5.0


def _socket_timeouts(hosts: Any) -> list[float | None]:
    """Return the socket timeout each channels_redis host entry reads with."""
    found: list[float | None] = []
    for host in hosts or ["redis://localhost:6379"]:
        value: Any = REDIS_DEFAULT_SOCKET_TIMEOUT
        url = None
        if isinstance(host, str):
            url = host
        elif isinstance(host, dict):
            url = host.get("address")
            if "socket_timeout" in host:
                url, value = None, host["socket_timeout"]
        if isinstance(url, str):
            query = parse_qs(urlsplit(url).query)
            if "socket_timeout" in query:
                value = query["socket_timeout"][-1]
        try:
            found.append(None if value is None else float(value))
        except (TypeError, ValueError):
            found.append(REDIS_DEFAULT_SOCKET_TIMEOUT)
    return found


@register(Tags.compatibility)
def check_channel_layer(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check that the channel layer can be created and is sized for load."""
    errors: list[Any] = []
    event_limit = rivet_settings.valid("MAX_EVENT_BYTES")
    outgoing = rivet_settings.valid("MAX_OUTGOING_MESSAGE_BYTES")
    if event_limit is not None and outgoing is not None:
        if event_limit > outgoing:
            text = W603.format(events=event_limit, outgoing=outgoing)
            errors.append(message("rivet.W603", text, W603_HINT))
    alias = rivet_settings.valid("CHANNEL_LAYER")
    layers = getattr(settings, "CHANNEL_LAYERS", None) or {}
    if alias not in layers:
        return errors  # rivet.E003 (or E004)
    try:
        channel_layers.make_backend(alias)
    except Exception as exc:
        text = E601.format(alias=alias, error=f"{type(exc).__name__}: {exc}")
        hint = E601_HINT.format(alias=alias)
        errors.append(message("rivet.E601", text, hint, "settings.CHANNEL_LAYERS"))
        return errors
    layer = layers[alias]
    if layer.get("BACKEND") != REDIS_LAYER:
        return errors
    config = layer.get("CONFIG") or {}
    docs = docs_url("production", "the-channel-layer")
    for timeout in _socket_timeouts(config.get("hosts")):
        if timeout is not None and timeout <= REDIS_BLOCKING_READ:
            text = W601.format(
                alias=alias, timeout=timeout, blocking=REDIS_BLOCKING_READ
            )
            hint = W601_HINT.format(docs=docs)
            errors.append(message("rivet.W601", text, hint, "settings.CHANNEL_LAYERS"))
            break
    capacity = config.get("capacity", 100)
    expected = rivet_settings.valid("CONNECTIONS_PER_PROCESS")
    if isinstance(capacity, int) and expected is not None and capacity < expected:
        text = W602.format(alias=alias, capacity=capacity, expected=expected)
        hint = W602_HINT.format(docs=docs)
        errors.append(message("rivet.W602", text, hint, "settings.CHANNEL_LAYERS"))
    return errors
