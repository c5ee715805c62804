"""HTTP endpoints the official RivetKit client calls: the gateway.

Mounted under the same prefix as django-rivet's own routes, so that
``createClient("http://host/rivet")`` works (the REST API it resolves,
creates and lists actors with is :mod:`.manager`):

* ``gateway/{target}/action/{name}``, ``.../queue/{name}``,
  ``.../request/{path}`` -- calls to one actor, by id or by name (see
  :mod:`.addressing`), in the encoding the client names in
  ``x-rivet-encoding`` (JSON, CBOR or BARE; errors come back in the same
  encoding, which is what the client decodes them with).

Every call runs through the invocation spine (``ainvoke``) with ``on_auth``,
the same operations, limits and error codes as django-rivet's own routes.
Bodies are size-checked before they are read. CSRF: as for the own routes,
the action and queue endpoints only take ``application/json`` or
``application/octet-stream`` bodies plus an ``x-rivet-encoding`` header,
which a cross-site form cannot send without a CORS preflight
(:mod:`.cors`); raw ``request/`` calls keep Django's CSRF check unless the
actor class sets ``csrf_exempt = True``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from functools import wraps
from typing import Any, TypeVar

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.utils.datastructures import CaseInsensitiveMapping
from django.views.decorators.csrf import csrf_exempt

from ...actors.calls import Origin
from ...actors.errors import public_error
from ...actors.lanes import ainvoke
from ...actors.operations import CallAction, OutputEncoder
from ...actors.rows import ActorRef
from ...encoding import json_dumps, run_decoder
from ...exceptions import MalformedRequest, error_from_dict
from ...scheduling import queues
from ...splicing import Encoded
from ...tokens import mask_tokens
from ..http import add_retry_after, api_view
from ..limits import check_body_size, outgoing_too_large, read_body_bytes
from ..operations import HandleRequest, csrf_rejection
from ..parsing import masked_request, query_params
from . import protocol
from .addressing import (
    TOKEN_HEADER,
    GatewayTarget,
    decode_conn_params,
    gateway_target,
)
from .cors import cors
from .operations import addressed_definition
from .protocol import WireEncoding

logger = logging.getLogger("django_rivet.transport")
# Where Django logs refused requests; the gateway logs its own, masked.
request_logger = logging.getLogger("django.request")

__all__ = [
    "View",
    "gateway_action_view",
    "gateway_queue_view",
    "gateway_request_view",
    "gateway_view",
]

OCTET_STREAM = "application/octet-stream"
MEDIA_TYPES: dict[WireEncoding, str] = {
    "json": "application/json",
    "cbor": OCTET_STREAM,
    "bare": OCTET_STREAM,
}
BODY_TYPES = frozenset({"application/json", OCTET_STREAM})
QUEUE_STATUS = {
    "completed": "completed",
    "queued": "completed",
    "timed_out": "timedOut",
}

View = Callable[..., Coroutine[Any, Any, HttpResponseBase]]
T = TypeVar("T")


# -- plumbing ---------------------------------------------------------------------
def _encoding(request: HttpRequest) -> WireEncoding:
    return protocol.parse_encoding(request.headers.get("x-rivet-encoding"))


def _error(exc: BaseException, encoding: WireEncoding = "json") -> HttpResponse:
    error = public_error(exc)
    response = HttpResponse(
        protocol.encode_http_error(error, encoding),
        status=error.http_status,
        content_type=MEDIA_TYPES[encoding],
    )
    add_retry_after(response, error)
    return response


def _response(data: bytes, encoding: WireEncoding, status: int = 200) -> HttpResponse:
    too_large = outgoing_too_large(data)
    if too_large is not None:
        return _error(too_large, encoding)
    return HttpResponse(data, status=status, content_type=MEDIA_TYPES[encoding])


def _json(value: Any, status: int = 200) -> HttpResponse:
    return _response(json_dumps(value).encode("utf-8"), "json", status)


def _output_encoder(encoding: WireEncoding) -> OutputEncoder:
    # Runs inside the invocation, before commit (see CallAction.encoder).
    def encode_output(value: Any) -> bytes:
        data = protocol.encode_output_value(value, encoding)
        too_large = outgoing_too_large(data)
        if too_large is not None:
            raise too_large
        return data

    return encode_output


def _read_body(request: HttpRequest) -> bytes:
    return read_body_bytes(request, BODY_TYPES)


def gateway_view(*methods: str) -> Callable[[Any], View]:
    """:func:`~..http.api_view` for the client's routes (CORS, wire encodings)."""

    default: WireEncoding = "json"

    def decorate(view: Any) -> View:
        return csrf_exempt(
            cors(_masked_logging(api_view(methods, _encoding, _error, default)(view)))
        )

    return decorate


def _masked_logging(view: View) -> View:
    """Log refused gateway calls with the token of their path masked.

    Django logs every 4xx/5xx answer with its path (``Forbidden: /rivet/
    gateway/{id}@{token}/...``): the client's token would end up in the logs.
    """

    @wraps(view)
    async def wrapper(
        request: HttpRequest, *args: Any, **kwargs: Any
    ) -> HttpResponseBase:
        response = await view(request, *args, **kwargs)
        if response.status_code >= 400 and "@" in request.path:
            response._has_been_logged = True  # type: ignore[attr-defined]
            level = logging.ERROR if response.status_code >= 500 else logging.WARNING
            request_logger.log(
                level,
                "%s: %s",
                response.reason_phrase,
                mask_tokens(request.path),
                extra={"status_code": response.status_code},
            )
        return response

    return wrapper


def _query(request: HttpRequest) -> dict[str, list[str]]:
    # Strict: two keys differing in invalid UTF-8 must not be one actor.
    return query_params(request.META.get("QUERY_STRING", ""))


async def _origin(request: HttpRequest, token: str | None, params: Any) -> Origin:
    """Describe the caller; the client's token is shown to on_auth as a header."""
    user = await request.auser() if hasattr(request, "auser") else None
    headers = dict(request.headers)
    if token is not None and TOKEN_HEADER not in request.headers:
        headers[TOKEN_HEADER] = token
    masked = masked_request(request)  # the token is in headers, not the path
    return Origin(
        transport="http",
        user=user,
        headers=CaseInsensitiveMapping(headers),
        request=masked,
        params=params,
        http_request=masked,
    )


def _bearer(request: HttpRequest) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _ref(target: GatewayTarget) -> ActorRef:
    if target.actor_id is not None:
        return ActorRef(actor_id=target.actor_id)
    assert target.name is not None
    create = target.mode == "get_or_create"
    return ActorRef.of(
        target.name,
        list(target.key),
        mode="get_or_create" if create else "get",
        input=target.input if create else None,
    )


# -- the gateway --------------------------------------------------------------------
async def _gateway_origin(request: HttpRequest, target: GatewayTarget) -> Origin:
    token = target.token or request.headers.get(TOKEN_HEADER)
    params = decode_conn_params(request.headers.get("x-rivet-conn-params"))
    return await _origin(request, token, params)


async def _gateway_call(
    request: HttpRequest,
    target: str,
    decoder: Callable[[bytes, WireEncoding], T],
    encoding: WireEncoding,
) -> tuple[GatewayTarget, T, Origin]:
    """Read a gateway call: its target, its decoded body and its caller."""
    address = gateway_target(target, _query(request))
    value = await run_decoder(decoder, _read_body(request), encoding)
    return address, value, await _gateway_origin(request, address)


@gateway_view("POST")
async def gateway_action_view(
    request: HttpRequest, encoding: WireEncoding, target: str, action: str
) -> HttpResponseBase:
    """``POST gateway/{target}/action/{name}``: run an action, return ``{output}``."""
    address, args, origin = await _gateway_call(
        request, target, protocol.decode_action_args, encoding
    )
    call = CallAction(
        action, args, encoder=_output_encoder(encoding), args_checked=True
    )
    output: Encoded = await ainvoke(_ref(address), call, origin)
    return _response(protocol.encode_action_output(output.data, encoding), encoding)


@gateway_view("POST")
async def gateway_queue_view(
    request: HttpRequest, encoding: WireEncoding, target: str, queue: str
) -> HttpResponseBase:
    """``POST gateway/{target}/queue/{name}``: enqueue, maybe wait for the reply."""
    address, send, origin = await _gateway_call(
        request, target, protocol.decode_queue_send, encoding
    )
    # on_auth runs in the invocation that stores the message.
    result = await queues.asend(
        _ref(address),
        queue,
        send.body,
        wait=send.wait,
        timeout=None if send.timeout is None else send.timeout / 1000,
        origin=origin,
    )
    if result.get("status") == "failed":
        # RivetKit's queue result has no failed status: its client raises
        # the handler's error, as for an action.
        raise error_from_dict(result["error"])
    status = QUEUE_STATUS.get(result.get("status", ""), "completed")
    data = protocol.encode_queue_result(
        status, result.get("response"), "response" in result, encoding
    )
    return _response(data, encoding)


@gateway_view()
async def gateway_request_view(
    request: HttpRequest, encoding: WireEncoding, target: str, path: str = ""
) -> HttpResponseBase:
    """``ANY gateway/{target}/request/{path}``: the actor's ``on_request``."""
    check_body_size(request)
    address = gateway_target(target, _strip_rvt(request))
    rejection = await csrf_rejection(request, await addressed_definition(address))
    if rejection is not None:
        return rejection
    # One masked copy for ctx.request and on_request (they share its body).
    request = masked_request(request)
    origin = await _gateway_origin(request, address)
    response: HttpResponseBase = await ainvoke(
        _ref(address), HandleRequest(request), origin
    )
    return response


def _strip_rvt(request: HttpRequest) -> dict[str, list[str]]:
    """The ``rvt-*`` parameters (the rest of the query is the actor's)."""
    query = query_params(request.META.get("QUERY_STRING", ""))
    return {key: value for key, value in query.items() if key.startswith("rvt-")}


@csrf_exempt
@cors
async def gateway_unknown_view(
    request: HttpRequest, target: str, rest: str = ""
) -> HttpResponseBase:
    """Any other gateway path (raw WebSockets over HTTP, inspector...)."""
    return _error(
        MalformedRequest(
            "This gateway path is not supported", metadata={"path": rest[:128]}
        )
    )
