"""Request body limits: refused before Django reads them, and read bounded.

Django's ASGI handler reads a whole request body into memory (or a temporary
file) before any view runs, so the views' own ``MAX_HTTP_BODY_BYTES`` check
comes after the upload. :class:`BodyLimitMiddleware` wraps the project's
HTTP application in ``asgi.py`` and answers 413 ``request/too_large`` for
django-rivet's routes

* from ``Content-Length``, without reading the body at all;
* for bodies without a length (chunked uploads), once more than the limit
  has arrived, reading no further.

Other routes of the project are passed through untouched. Servers may still
receive the bytes (daphne buffers a request before the application sees
it), so a body size limit in the proxy in front stays advised
(docs/security.md). The views of both protocols then read bodies through
:func:`read_body_bytes`, the one bounded read.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from django.http import HttpRequest
from django.urls import Resolver404, resolve

from ..conf import rivet_settings
from ..encoding import encode
from ..exceptions import InvalidEncoding, MalformedRequest, RequestTooLarge
from ..tokens import mask_tokens
from .sse import SSE_ROUTES, BoundedSend

__all__ = [
    "BodyLimitMiddleware",
    "check_body_size",
    "outgoing_too_large",
    "read_body_bytes",
]

logger = logging.getLogger("django_rivet.transport")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

APP_NAME = "django_rivet"


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {name.lower(): value for name, value in scope.get("headers", [])}


def _rivet_route(scope: Scope) -> str | None:
    """Return the URL name of the django-rivet view the request goes to, if any."""
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    try:
        match = resolve(path or "/")
    except Resolver404:
        return None
    return (match.url_name or "") if APP_NAME in match.app_names else None


class BodyLimitMiddleware:
    """Answer 413 for django-rivet request bodies over ``MAX_HTTP_BODY_BYTES``.

    It also bounds what the server buffers for a reader of the Server-Sent
    Events routes (:class:`~.sse.BoundedSend`).

    ::

        application = ProtocolTypeRouter({
            "http": BodyLimitMiddleware(django_asgi_app),
            "websocket": ...,
        })
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, unless its body is too large for the route."""
        route = _rivet_route(scope) if scope.get("type") == "http" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        if route in SSE_ROUTES:
            # An event stream: its unsent data is bounded like a socket's.
            bounded = BoundedSend(send)
            try:
                await self._limit(scope, receive, bounded)
            finally:
                bounded.close()
            return
        await self._limit(scope, receive, send)

    async def _limit(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = rivet_settings.MAX_HTTP_BODY_BYTES
        headers = _headers(scope)
        raw_length = headers.get(b"content-length")
        if raw_length is not None:
            try:
                length = int(raw_length)
            except ValueError:
                length = -1  # the view answers request/malformed
            if length > limit:
                await self._refuse(scope, send, headers, length, limit)
                return
            await self.app(scope, receive, send)
            return
        # No length (chunked): read at most limit + 1 bytes, then replay them.
        buffered: list[Message] = []
        size = 0
        while True:
            message = await receive()
            buffered.append(message)
            if message.get("type") != "http.request":
                break
            size += len(message.get("body", b""))
            if size > limit:
                await self._refuse(scope, send, headers, None, limit)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            if buffered:
                return buffered.pop(0)
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(
        scope: Scope,
        send: Send,
        headers: dict[bytes, bytes],
        length: int | None,
        limit: int,
    ) -> None:
        if length is None:
            error = RequestTooLarge(
                f"The body is over the limit of {limit} bytes",
                metadata={"limit": limit},
            )
        else:
            error = RequestTooLarge(
                f"The body is {length} bytes; the limit is {limit}",
                metadata={"size": length, "limit": limit},
            )
        logger.info(
            "body refused before reading path=%r size=%s limit=%s",
            mask_tokens(str(scope.get("path", ""))),
            length,
            limit,
        )
        cbor = headers.get(b"content-type", b"").split(b";")[0].strip() == (
            b"application/cbor"
        )
        body = encode(error.to_dict(), "cbor" if cbor else "json")
        media = b"application/cbor" if cbor else b"application/json"
        await send(
            {
                "type": "http.response.start",
                "status": error.http_status,
                "headers": [
                    (b"content-type", media),
                    (b"content-length", str(len(body)).encode("ascii")),
                    # The body was not read: the connection cannot be reused.
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


# -- in the views -------------------------------------------------------------------
def _content_length(request: HttpRequest) -> int:
    raw = request.META.get("CONTENT_LENGTH") or "0"
    try:
        length = int(raw)
    except ValueError:
        raise MalformedRequest("Invalid Content-Length") from None
    if length < 0:
        raise MalformedRequest("Invalid Content-Length")
    return length


def check_body_size(request: HttpRequest) -> None:
    """Refuse a body announced larger than ``MAX_HTTP_BODY_BYTES``."""
    limit = rivet_settings.MAX_HTTP_BODY_BYTES
    length = _content_length(request)
    if length > limit:
        raise RequestTooLarge(
            f"The body is {length} bytes; the limit is {limit}",
            metadata={"size": length, "limit": limit},
        )


def read_body_bytes(request: HttpRequest, media_types: Iterable[str]) -> bytes:
    """Return the body, refusing other media types and more than the limit.

    Bounded even when ``Content-Length`` lies or is absent (chunked bodies).
    """
    accepted = sorted(media_types)
    if request.content_type not in accepted:
        raise InvalidEncoding(
            f"Send the body as {' or '.join(accepted)}",
            metadata={"content_type": request.content_type},
        )
    check_body_size(request)
    limit = rivet_settings.MAX_HTTP_BODY_BYTES
    data = request.read(limit + 1)
    if len(data) > limit:
        raise RequestTooLarge(
            f"The body is over the limit of {limit} bytes", metadata={"limit": limit}
        )
    return data


def outgoing_too_large(data: bytes) -> RequestTooLarge | None:
    """Return the error for a response or frame over ``MAX_OUTGOING_MESSAGE_BYTES``."""
    limit = rivet_settings.MAX_OUTGOING_MESSAGE_BYTES
    if len(data) <= limit:
        return None
    return RequestTooLarge(
        f"The response is {len(data)} bytes; the limit is {limit}",
        metadata={"size": len(data), "limit": limit},
    )
