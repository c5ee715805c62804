"""CORS for the RivetKit-client endpoints: closed unless origins are listed.

A frontend served from another origin (a Vite dev server on
``http://localhost:5173`` talking to Django on ``:8000``) sends its calls
with ``credentials: "include"`` and ``x-rivet-*`` headers, so the browser
asks first (a preflight ``OPTIONS``). The origins in
``RIVET["CORS_ALLOWED_ORIGINS"]`` get an answer naming them (never ``*``:
credentials are allowed), ``Access-Control-Allow-Credentials: true`` and
the headers the client uses; every other origin gets no CORS header at all,
so the browser refuses to send the call. Same-origin pages need nothing.

WebSockets are not subject to CORS; :func:`websocket_origin_allowed` lets
the listed origins connect in addition to those the own protocol's Origin
check admits (same origin, ``CSRF_TRUSTED_ORIGINS``, ``ALLOWED_ORIGINS``:
:mod:`django_rivet.transport.origins`). Both use one origin normalization.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase

from ...conf import rivet_settings
from ..origins import normalize_origin, origin_allowed

__all__ = [
    "ALLOWED_METHODS",
    "cors",
    "cors_origin",
    "websocket_origin_allowed",
]

ALLOWED_METHODS = "GET, POST, PUT, DELETE, OPTIONS"
# Request headers the client sends besides the x-rivet-* family.
_PLAIN_HEADERS = frozenset(
    {"content-type", "user-agent", "authorization", "traceparent", "tracestate"}
)
# Response headers a page may read (the client reads the ray id of errors).
_EXPOSED_HEADERS = "x-rivet-ray-id, x-rivet-actor"
PREFLIGHT_MAX_AGE = 600

View = Callable[..., Coroutine[Any, Any, HttpResponseBase]]


def cors_origin(origin: str | None) -> str | None:
    """Return ``origin`` if ``CORS_ALLOWED_ORIGINS`` lists it, else ``None``."""
    if not origin:
        return None
    normalized = normalize_origin(origin)
    if normalized is None:
        return None
    listed = {normalize_origin(entry) for entry in rivet_settings.CORS_ALLOWED_ORIGINS}
    return origin if normalized in listed else None


def websocket_origin_allowed(origin: str | None, scope: dict[str, Any]) -> bool:
    """Tell whether a page from ``origin`` may open a RivetKit connection."""
    return origin_allowed(origin, scope, extra=rivet_settings.CORS_ALLOWED_ORIGINS)


def _allowed_request_headers(requested: str) -> list[str]:
    names = [name.strip().lower() for name in requested.split(",") if name.strip()]
    return [
        name for name in names if name in _PLAIN_HEADERS or name.startswith("x-rivet-")
    ]


def _add_headers(response: HttpResponseBase, origin: str) -> None:
    response["Access-Control-Allow-Origin"] = origin
    response["Access-Control-Allow-Credentials"] = "true"
    response["Access-Control-Expose-Headers"] = _EXPOSED_HEADERS
    _vary(response)


def _vary(response: HttpResponseBase) -> None:
    vary = response.get("Vary")
    if not vary:
        response["Vary"] = "Origin"
    elif "origin" not in vary.lower():
        response["Vary"] = f"{vary}, Origin"


def preflight(request: HttpRequest) -> HttpResponse:
    """Answer an ``OPTIONS`` preflight (403 without CORS headers if refused)."""
    origin = cors_origin(request.headers.get("Origin"))
    if origin is None:
        response = HttpResponse(status=403)
        _vary(response)
        return response
    response = HttpResponse(status=204)
    _add_headers(response, origin)
    response["Access-Control-Allow-Methods"] = ALLOWED_METHODS
    requested = request.headers.get("Access-Control-Request-Headers", "")
    allowed = _allowed_request_headers(requested)
    if allowed:
        response["Access-Control-Allow-Headers"] = ", ".join(allowed)
    response["Access-Control-Max-Age"] = str(PREFLIGHT_MAX_AGE)
    return response


def cors(view: View) -> View:
    """Answer preflights and add CORS headers for the listed origins."""

    @wraps(view)
    async def wrapper(
        request: HttpRequest, *args: object, **kwargs: object
    ) -> HttpResponseBase:
        if request.method == "OPTIONS" and "Access-Control-Request-Method" in (
            request.headers
        ):
            return preflight(request)
        response = await view(request, *args, **kwargs)
        origin = cors_origin(request.headers.get("Origin"))
        if origin is not None:
            _add_headers(response, origin)
        elif rivet_settings.CORS_ALLOWED_ORIGINS:
            _vary(response)
        return response

    return wrapper
