"""The HTTP transport (docs/protocol.md): decode, call the runtime, encode.

Bodies are JSON or CBOR by ``Content-Type`` and answers use the same
encoding. The size limit is checked against ``Content-Length`` before the
body is read, and the read itself is bounded.

CSRF: the action API is not a form endpoint. Its views are ``csrf_exempt``
but only accept ``application/json`` or ``application/cbor`` bodies, which a
cross-site HTML form cannot send (forms send ``x-www-form-urlencoded``,
``multipart/form-data`` or ``text/plain``; anything else needs a CORS
preflight the browser makes first, and which this app does not grant).
``on_auth`` then decides who may call. The raw ``request/`` route hands an
``HttpRequest`` to ``on_request`` and keeps Django's CSRF check unless the
actor class sets ``csrf_exempt = True`` (webhooks).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from functools import wraps
from typing import Any, Literal, Protocol, TypeVar

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from ..actors import registry
from ..actors.calls import Origin
from ..actors.errors import public_error
from ..actors.invocation import Operation
from ..actors.lanes import ainvoke
from ..actors.operations import CallAction, EnsureActor, OutputEncoder
from ..actors.rows import ActorRef, Mode
from ..encoding import Encoding, adecode, decode, encode, encode_value
from ..exceptions import (
    InvalidArgs,
    MalformedRequest,
    MethodNotAllowed,
    RivetError,
)
from ..scheduling import queues
from ..splicing import Encoded, splice
from .limits import check_body_size, outgoing_too_large, read_body_bytes
from .operations import Describe, HandleRequest, csrf_rejection
from .parsing import parse_actor_id, parse_bool, query_params

E = TypeVar("E", bound=str)
E_contra = TypeVar("E_contra", bound=str, contravariant=True)


class View(Protocol[E_contra]):
    """An actor API view as :func:`api_view` calls it."""

    def __call__(
        self, request: HttpRequest, encoding: E_contra, /, *args: Any, **kwargs: Any
    ) -> Awaitable[HttpResponseBase]:
        """Answer the request."""
        ...


logger = logging.getLogger("django_rivet.transport")

__all__ = [
    "action_view",
    "actor_view",
    "add_retry_after",
    "api_view",
    "queue_view",
    "request_view",
]

CONTENT_TYPES: dict[str, Encoding] = {
    "application/json": "json",
    "application/cbor": "cbor",
}
MEDIA_TYPES: dict[Encoding, str] = {
    "json": "application/json",
    "cbor": "application/cbor",
}


# -- encoding ---------------------------------------------------------------------
def response_encoding(request: HttpRequest) -> Encoding:
    """Answer in the body's encoding; for bodiless requests, honour Accept."""
    encoding = CONTENT_TYPES.get(request.content_type or "")
    if encoding is not None:
        return encoding
    accept = request.headers.get("Accept", "")
    return "cbor" if "application/cbor" in accept else "json"


def encoded_response(value: Any, encoding: Encoding, status: int = 200) -> HttpResponse:
    """Encode ``value`` as a response, within the outgoing size limit."""
    try:
        data = encode(value, encoding)
    except (TypeError, ValueError) as exc:
        return error_response(exc, encoding)
    too_large = outgoing_too_large(data)
    if too_large is not None:
        return error_response(too_large, encoding)
    return HttpResponse(data, status=status, content_type=MEDIA_TYPES[encoding])


def output_encoder(encoding: Encoding) -> OutputEncoder:
    """Return the encoder an invocation uses for an action's output.

    It runs inside the invocation, before commit: a value outside the
    domain, or an answer over ``MAX_OUTGOING_MESSAGE_BYTES``, rolls the
    action back.
    """

    def encode_output(value: Any) -> bytes:
        data = encode_value(value, encoding)
        too_large = outgoing_too_large(data)
        if too_large is not None:
            raise too_large
        return data

    return encode_output


def spliced_response(
    head: dict[str, Any], name: str, value: Encoded, encoding: Encoding
) -> HttpResponse:
    """Answer ``head`` plus an already-encoded value, within the size limit."""
    data = splice(head, name, value.data, encoding)
    too_large = outgoing_too_large(data)
    if too_large is not None:
        return error_response(too_large, encoding)
    return HttpResponse(data, content_type=MEDIA_TYPES[encoding])


def error_response(exc: BaseException, encoding: Encoding = "json") -> HttpResponse:
    """Return ``{group, code, message, metadata}`` with the error's status."""
    error = public_error(exc)
    try:
        data = encode(error.to_dict(), encoding)
    except (TypeError, ValueError):  # metadata the codec refuses
        data = encode({**error.to_dict(), "metadata": None}, encoding)
    response = HttpResponse(
        data, status=error.http_status, content_type=MEDIA_TYPES[encoding]
    )
    add_retry_after(response, error)
    return response


def add_retry_after(response: HttpResponse, error: RivetError) -> None:
    """Copy a ``retry_after`` hint (busy, unavailable) into ``Retry-After``."""
    metadata = error.metadata
    if isinstance(metadata, dict):
        seconds = metadata.get("retry_after")
        if isinstance(seconds, int) and not isinstance(seconds, bool):
            response["Retry-After"] = str(seconds)


def _raw_body(request: HttpRequest) -> tuple[bytes, Encoding]:
    """Return the body's bytes and encoding, within the size limit."""
    data = read_body_bytes(request, CONTENT_TYPES)
    return data, CONTENT_TYPES[request.content_type or ""]


def body_map(body: Any, keys: Iterable[str] | None = None) -> dict[str, Any]:
    """Return the body as a map; refuse a key outside ``keys`` (if given).

    An unknown key (``{"by": 3}`` instead of ``{"args": [3]}``) is
    ``request/invalid_args`` naming it: ignoring it would run the action
    with its defaults.
    """
    if not isinstance(body, dict):
        raise MalformedRequest("The body must be a map")
    if keys is not None:
        allowed = sorted(keys)
        for key in body:
            if key not in allowed:
                raise InvalidArgs(
                    f"Unknown key {key[:64]!r} in the body; it takes "
                    + ", ".join(allowed),
                    metadata={"key": key[:64], "allowed": allowed},
                )
    return body


def read_body(
    request: HttpRequest, keys: Iterable[str] | None = None
) -> dict[str, Any]:
    """Decode the JSON or CBOR map body (empty body: ``{}``)."""
    data, encoding = _raw_body(request)
    return body_map(decode(data, encoding), keys) if data else {}


async def aread_body(
    request: HttpRequest, keys: Iterable[str] | None = None
) -> dict[str, Any]:
    """:func:`read_body`, decoding large bodies in a worker thread.

    Off the event loop, one slow body cannot stall the other connections.
    """
    data, encoding = _raw_body(request)
    return body_map(await adecode(data, encoding), keys) if data else {}


# -- addressing -------------------------------------------------------------------
def actor_ref(
    request: HttpRequest, name: str, mode: Mode, input: Any = None
) -> ActorRef:
    """Address the actor by ``?actor_id=`` or by name and ``?key=``.

    By id, the name still counts: the runtime refuses an actor of another
    class with ``actor/not_found``.
    """
    query = _query(request)
    actor_id = (query.get("actor_id") or [""])[-1]
    if actor_id:
        return ActorRef(name=name, actor_id=parse_actor_id(actor_id))
    return ActorRef.of(name, query.get("key", []), mode=mode, input=input)


def _query(request: HttpRequest) -> dict[str, list[str]]:
    # Not request.GET: it answers 500 past DATA_UPLOAD_MAX_NUMBER_FIELDS and
    # reads invalid UTF-8 leniently.
    return query_params(request.META.get("QUERY_STRING", ""))


def _single(request: HttpRequest, name: str) -> str | None:
    values = _query(request).get(name)
    return values[-1] if values else None


async def http_origin(request: HttpRequest) -> Origin:
    """Describe the HTTP caller for the runtime (user resolved here)."""
    user = None
    if hasattr(request, "auser"):
        user = await request.auser()
    return Origin(
        transport="http",
        user=user,
        headers=request.headers,
        request=request,
        http_request=request,
    )


# -- views ----------------------------------------------------------------------------
def api_view(
    methods: Iterable[str],
    read_encoding: Callable[[HttpRequest], E],
    error: Callable[[BaseException, E], HttpResponse],
    default: E,
) -> Callable[[View[E]], Callable[..., Coroutine[Any, Any, HttpResponseBase]]]:
    """Make a view of an actor API: the preamble every such view shares.

    The wrapped view is ``csrf_exempt`` (see the module docstring) and is
    called as ``view(request, encoding, *args)`` once the encoding is read
    and the method allowed (``methods`` empty: any); any exception it
    raises becomes ``error(exc, encoding)``, in the request's encoding when
    that could be read, else in ``default``.
    """
    allowed = list(methods)

    def decorate(view: View[E]) -> Callable[..., Coroutine[Any, Any, HttpResponseBase]]:
        @wraps(view)
        async def wrapper(
            request: HttpRequest, *args: Any, **kwargs: Any
        ) -> HttpResponseBase:
            encoding = default
            try:
                encoding = read_encoding(request)
                if allowed and request.method not in allowed:
                    raise MethodNotAllowed(metadata={"allowed": allowed})
                return await view(request, encoding, *args, **kwargs)
            except Exception as exc:
                return error(exc, encoding)

        return csrf_exempt(wrapper)

    return decorate


def rivet_api(*methods: str) -> Callable[[View[Encoding]], Callable[..., Any]]:
    """:func:`api_view` for django-rivet's own routes (JSON or CBOR)."""
    return api_view(methods, response_encoding, error_response, "json")


async def _run(ref: ActorRef, operation: Operation, request: HttpRequest) -> Any:
    return await ainvoke(ref, operation, await http_origin(request))


@rivet_api("GET", "PUT", "POST")
async def actor_view(
    request: HttpRequest, encoding: Encoding, name: str
) -> HttpResponse:
    """``PUT`` get-or-create, ``POST`` create, ``GET`` describe."""
    if request.method == "GET":
        info = await _run(actor_ref(request, name, "get"), Describe(), request)
        return encoded_response(
            {
                "actor_id": str(info["actor_id"]),
                "name": info["name"],
                "key": list(info["key"]),
                "created_at": info["created_at"].isoformat(),
            },
            encoding,
        )
    body = await aread_body(request, ("input",))
    if request.method == "POST" and _query(request).get("actor_id"):
        raise MalformedRequest("Create an actor by name and key, not actor_id")
    mode: Literal["get_or_create", "create"] = (
        "get_or_create" if request.method == "PUT" else "create"
    )
    ref = actor_ref(request, name, mode, body.get("input"))
    actor_id, created = await _run(ref, EnsureActor(), request)
    if request.method == "POST":
        return encoded_response({"actor_id": str(actor_id)}, encoding, 201)
    return encoded_response({"actor_id": str(actor_id), "created": created}, encoding)


@rivet_api("POST")
async def action_view(
    request: HttpRequest, encoding: Encoding, name: str, action: str
) -> HttpResponse:
    """``POST {args, input?}`` -> ``{output}``; get-or-create unless create=false."""
    body = await aread_body(request, ("args", "input"))
    args = body.get("args", [])
    if not isinstance(args, list):
        raise InvalidArgs("args must be a list")
    create = parse_bool(_single(request, "create"), "create", True)
    ref = actor_ref(
        request, name, "get_or_create" if create else "get", body.get("input")
    )
    call = CallAction(action, args, encoder=output_encoder(encoding), args_checked=True)
    output: Encoded = await _run(ref, call, request)
    return spliced_response({}, "output", output, encoding)


@rivet_api("POST")
async def queue_view(
    request: HttpRequest, encoding: Encoding, name: str, queue: str
) -> HttpResponse:
    """``POST {body, wait?, timeout?}`` -> ``{status, response?}``."""
    body = await aread_body(request, ("body", "wait", "timeout"))
    wait = body.get("wait", False)
    timeout = body.get("timeout")
    if not isinstance(wait, bool):
        raise MalformedRequest("wait must be true or false")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0
    ):
        raise MalformedRequest("timeout must be a non-negative number of seconds")
    # on_auth runs in the invocation that stores the message.
    result = await queues.asend(
        actor_ref(request, name, "get_or_create"),
        queue,
        body.get("body"),
        wait=wait,
        timeout=timeout,
        origin=await http_origin(request),
    )
    return encoded_response(result, encoding)


@rivet_api()
async def request_view(
    request: HttpRequest, encoding: Encoding, name: str, path: str = ""
) -> HttpResponseBase:
    """Hand the request to the actor's ``on_request`` (any method)."""
    check_body_size(request)
    # A server-only class answers as an unknown name, before CSRF would.
    definition = registry.get_external(name)
    rejection = await csrf_rejection(request, definition)
    if rejection is not None:
        return rejection
    create = parse_bool(_single(request, "create"), "create", True)
    ref = actor_ref(request, name, "get_or_create" if create else "get")
    response: HttpResponseBase = await _run(ref, HandleRequest(request), request)
    return response
