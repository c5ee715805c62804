"""Which browser pages may open a WebSocket to the actors (the Origin check)."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host

from ..conf import rivet_settings

__all__ = ["origin_allowed"]

_DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}


def _normalize_origin(origin: str) -> str | None:
    parts = urlsplit(origin.strip().lower())
    if not parts.scheme or not parts.netloc:
        return None
    host, port = split_domain_port(parts.netloc)
    if not host:
        return None
    if port and port != _DEFAULT_PORTS.get(parts.scheme):
        return f"{parts.scheme}://{host}:{port}"
    return f"{parts.scheme}://{host}"


def origin_allowed(origin: str | None) -> bool:
    """Tell whether a browser page from ``origin`` may open a socket.

    ``RIVET["ALLOWED_ORIGINS"]`` lists full origins (``"*"`` allows any);
    when it is None the origin's host must match ``ALLOWED_HOSTS``. A missing
    Origin header means a non-browser client, which could send any header it
    likes, so checking it would protect nothing: it is allowed, and
    ``on_auth`` decides.
    """
    if origin is None:
        return True
    allowed = rivet_settings.ALLOWED_ORIGINS
    normalized = _normalize_origin(origin)
    if allowed is not None:
        if "*" in allowed:
            return True
        return normalized is not None and normalized in {
            _normalize_origin(entry) for entry in allowed
        }
    if normalized is None:
        return False
    host, _ = split_domain_port(urlsplit(normalized).netloc)
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:
        # Django's own default for DEBUG with empty ALLOWED_HOSTS.
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return validate_host(host, hosts)
