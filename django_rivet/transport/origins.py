"""Which browser pages may open a WebSocket to the actors (the Origin check).

Browsers send ``Origin`` with every WebSocket handshake and send the site's
cookies along, so without a check any page on the web could open a socket
as the visitor (cross-site WebSocket hijacking). The rule is Django's CSRF
origin check (``CsrfViewMiddleware``):

* **same origin**: the page's origin is the server's own -- scheme, host and
  port, the host taken like ``request.get_host()`` (``Host``, or
  ``X-Forwarded-Host`` with ``USE_X_FORWARDED_HOST``; it must be in
  ``ALLOWED_HOSTS``) and the scheme like ``request.is_secure()`` (``wss``,
  or ``SECURE_PROXY_SSL_HEADER``);
* origins in ``CSRF_TRUSTED_ORIGINS`` (``https://*.example.com`` matches
  subdomains, as it does for Django);
* origins listed in ``RIVET["ALLOWED_ORIGINS"]`` (full origins; ``"*"`` admits
  any page, which the system check ``rivet.W501`` warns about).

A handshake without ``Origin`` does not come from a browser; such a client
could send any header it likes, so checking it would protect nothing: it is
allowed, and ``on_auth`` decides.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest
from django.utils.http import is_same_domain

from ..conf import rivet_settings
from .parsing import scope_headers

__all__ = ["normalize_origin", "origin_allowed", "server_origin"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_origin(origin: str) -> str | None:
    """Return ``scheme://host[:port]`` in lower case without a default port.

    ``None`` for anything that is not an http(s) origin (``"null"`` included).
    """
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if (
        parts.scheme not in _DEFAULT_PORTS
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
    ):
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    if port is None or port == _DEFAULT_PORTS[parts.scheme]:
        return f"{parts.scheme}://{host}"
    return f"{parts.scheme}://{host}:{port}"


class _ScopeRequest(HttpRequest):
    """An ``HttpRequest`` made of a WebSocket scope's headers.

    Only so that Django's own ``get_host()`` and ``is_secure()`` decide the
    server's origin (ALLOWED_HOSTS, USE_X_FORWARDED_HOST,
    SECURE_PROXY_SSL_HEADER) exactly as they do for views.
    """

    def __init__(self, scope: dict[str, Any]) -> None:
        super().__init__()
        for name, value in scope_headers(scope).items():
            if "_" in name:  # as Django's handlers: no x_forwarded_host spoofing
                continue
            self.META["HTTP_" + name.upper().replace("-", "_")] = value
        server = scope.get("server")
        if server and server[0] is not None:
            self.META["SERVER_NAME"] = str(server[0])
            self.META["SERVER_PORT"] = str(server[1] or "")
        self._secure = scope.get("scheme") in ("wss", "https")

    def _get_scheme(self) -> str:
        return "https" if self._secure else "http"


def server_origin(scope: dict[str, Any]) -> str | None:
    """Return the origin the client addressed this server as, or ``None``.

    ``None`` when the host is missing or not in ``ALLOWED_HOSTS``.
    """
    request = _ScopeRequest(scope)
    meta = set(request.META)
    forwarded = settings.USE_X_FORWARDED_HOST and "HTTP_X_FORWARDED_HOST" in meta
    if not forwarded and not {"HTTP_HOST", "SERVER_NAME"} & meta:
        return None
    try:
        host = request.get_host()
    except DisallowedHost:
        return None
    return normalize_origin(f"{'https' if request.is_secure() else 'http'}://{host}")


def _csrf_trusted(origin: str, normalized: str) -> bool:
    """Tell whether ``CSRF_TRUSTED_ORIGINS`` admits ``origin`` (Django's rule)."""
    for trusted in getattr(settings, "CSRF_TRUSTED_ORIGINS", ()):
        if "*" not in trusted:
            if normalize_origin(trusted) == normalized:
                return True
            continue
        parts = urlsplit(trusted)
        requested = urlsplit(origin)
        if requested.scheme == parts.scheme and is_same_domain(
            requested.netloc.lower(), parts.netloc.lstrip("*")
        ):
            return True
    return False


def origin_allowed(
    origin: str | None, scope: dict[str, Any], extra: Iterable[str] = ()
) -> bool:
    """Tell whether a page from ``origin`` may open a socket (module docstring).

    ``extra`` lists more admitted origins (the RivetKit flavour's
    ``CORS_ALLOWED_ORIGINS``).
    """
    if origin is None:
        return True
    allowed = list(rivet_settings.ALLOWED_ORIGINS or ())
    if "*" in allowed:
        return True
    normalized = normalize_origin(origin)
    if normalized is None:
        return False
    if normalized == server_origin(scope):
        return True
    if normalized in {normalize_origin(entry) for entry in [*allowed, *extra]}:
        return True
    return _csrf_trusted(origin, normalized)
