"""The HTTP transport (SPEC 4.1): decode, call the runtime, encode.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from ..actors import registry
from ..actors.definition import Actor
from ..actors.errors import public_error
from ..actors.invocation import AuthRequest, Operation, Origin
from ..actors.operations import ACTOR_AUTH, CallAction, EnsureActor
from ..actors.rows import ActorRef, Mode
from ..actors.spine import ainvoke
from ..conf import rivet_settings
from ..encoding import Encoding, adecode, decode, encode
from ..exceptions import (
    ActionNotFound,
    InvalidArgs,
    InvalidEncoding,
    MalformedRequest,
    MethodNotAllowed,
    RequestTooLarge,
    RivetError,
)
from ..models import Actor as ActorRow
from ..scheduling import queues
from .parsing import parse_actor_id, parse_bool

if TYPE_CHECKING:
    from ..actors.invocation import Invocation

logger = logging.getLogger("django_rivet.transport")

__all__ = [
    "action_view",
    "add_retry_after",
    "actor_view",
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
    limit = int(rivet_settings.MAX_OUTGOING_MESSAGE_BYTES)
    if len(data) > limit:
        return error_response(
            RequestTooLarge(
                f"The response is {len(data)} bytes; the limit is {limit}",
                metadata={"size": len(data), "limit": limit},
            ),
            encoding,
        )
    return HttpResponse(data, status=status, content_type=MEDIA_TYPES[encoding])


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
    limit = int(rivet_settings.MAX_HTTP_BODY_BYTES)
    length = _content_length(request)
    if length > limit:
        raise RequestTooLarge(
            f"The body is {length} bytes; the limit is {limit}",
            metadata={"size": length, "limit": limit},
        )


def _raw_body(request: HttpRequest) -> tuple[bytes, Encoding]:
    """Return the body's bytes and encoding, within the size limit."""
    encoding = CONTENT_TYPES.get(request.content_type or "")
    if encoding is None:
        raise InvalidEncoding(
            "Send the body as application/json or application/cbor",
            metadata={"content_type": request.content_type},
        )
    check_body_size(request)
    limit = int(rivet_settings.MAX_HTTP_BODY_BYTES)
    # Bounded even when Content-Length lies or is absent (chunked bodies).
    data = request.read(limit + 1)
    if len(data) > limit:
        raise RequestTooLarge(
            f"The body is over the limit of {limit} bytes", metadata={"limit": limit}
        )
    return data, encoding


def _body_map(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise MalformedRequest("The body must be a map")
    return body


def read_body(request: HttpRequest) -> dict[str, Any]:
    """Decode the JSON or CBOR map body (empty body: ``{}``)."""
    data, encoding = _raw_body(request)
    return _body_map(decode(data, encoding)) if data else {}


async def aread_body(request: HttpRequest) -> dict[str, Any]:
    """:func:`read_body`, decoding large bodies in a worker thread.

    Off the event loop, one slow body cannot stall the other connections.
    """
    data, encoding = _raw_body(request)
    return _body_map(await adecode(data, encoding)) if data else {}


# -- addressing -------------------------------------------------------------------
def actor_ref(
    request: HttpRequest, name: str, mode: Mode, input: Any = None
) -> ActorRef:
    """Address the actor by ``?actor_id=`` or by name and ``?key=``.

    By id, the name still counts: the runtime refuses an actor of another
    class with ``actor/not_found``.
    """
    actor_id = request.GET.get("actor_id")
    if actor_id:
        return ActorRef(name=name, actor_id=parse_actor_id(actor_id))
    return ActorRef.of(name, request.GET.getlist("key"), mode=mode, input=input)


async def http_origin(request: HttpRequest) -> Origin:
    """Describe the HTTP caller for the runtime (user resolved here)."""
    user = None
    if hasattr(request, "auser"):
        user = await request.auser()
    return Origin(transport="http", user=user, headers=request.headers, request=request)


# -- operations ---------------------------------------------------------------------
@dataclass(slots=True)
class Describe:
    """Return the actor's public description (after ``on_auth``)."""

    label: str | None = "describe"
    auth = ACTOR_AUTH

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check."""

    def run(self, invocation: Invocation) -> dict[str, Any]:
        """Describe the actor."""
        created_at = (
            ActorRow.objects.filter(pk=invocation.actor_id)
            .values_list("created_at", flat=True)
            .get()
        )
        return {
            "actor_id": str(invocation.actor_id),
            "name": invocation.definition.name,
            "key": list(invocation.key),
            "created_at": created_at.isoformat(),
        }


@dataclass(slots=True)
class HandleRequest:
    """Pass an ``HttpRequest`` to ``on_request`` (after ``on_auth``)."""

    request: HttpRequest
    label: str | None = "request"
    auth = AuthRequest("request")

    def prepare(self, definition: type[Actor]) -> None:
        """Refuse actors without ``on_request`` before any I/O."""
        if not definition.overrides("on_request"):
            raise ActionNotFound(
                f"Actor {definition.name!r} does not handle raw requests"
            )

    def run(self, invocation: Invocation) -> HttpResponseBase:
        """Let the actor answer."""
        response = invocation.call_hook("on_request", self.request)
        if not isinstance(response, HttpResponseBase):
            raise TypeError(
                f"on_request returned {type(response).__name__}, not an HttpResponse"
            )
        return response


async def _run(ref: ActorRef, operation: Operation, request: HttpRequest) -> Any:
    return await ainvoke(ref, operation, await http_origin(request))


# -- views ----------------------------------------------------------------------------
@csrf_exempt
async def actor_view(request: HttpRequest, name: str) -> HttpResponse:
    """``PUT`` get-or-create, ``POST`` create, ``GET`` describe."""
    encoding = response_encoding(request)
    try:
        if request.method == "GET":
            ref = actor_ref(request, name, "get")
            info = await _run(ref, Describe(), request)
            return encoded_response(info, encoding)
        if request.method not in ("PUT", "POST"):
            raise MethodNotAllowed(metadata={"allowed": ["GET", "PUT", "POST"]})
        body = await aread_body(request)
        if request.method == "POST" and request.GET.get("actor_id"):
            raise MalformedRequest("Create an actor by name and key, not actor_id")
        mode: Literal["get_or_create", "create"] = (
            "get_or_create" if request.method == "PUT" else "create"
        )
        ref = actor_ref(request, name, mode, body.get("input"))
        actor_id, created = await _run(ref, EnsureActor(), request)
        if request.method == "POST":
            return encoded_response({"actor_id": str(actor_id)}, encoding, 201)
        return encoded_response(
            {"actor_id": str(actor_id), "created": created}, encoding
        )
    except Exception as exc:
        return error_response(exc, encoding)


@csrf_exempt
async def action_view(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """``POST {args, input?}`` -> ``{output}``; get-or-create unless create=false."""
    encoding = response_encoding(request)
    try:
        if request.method != "POST":
            raise MethodNotAllowed(metadata={"allowed": ["POST"]})
        body = await aread_body(request)
        args = body.get("args", [])
        if not isinstance(args, list):
            raise InvalidArgs("args must be a list")
        create = parse_bool(request.GET.get("create"), "create", True)
        ref = actor_ref(
            request, name, "get_or_create" if create else "get", body.get("input")
        )
        output = await _run(ref, CallAction(action, args), request)
        return encoded_response({"output": output}, encoding)
    except Exception as exc:
        return error_response(exc, encoding)


@csrf_exempt
async def queue_view(request: HttpRequest, name: str, queue: str) -> HttpResponse:
    """``POST {body, wait?, timeout?}`` -> ``{status, response?}``."""
    encoding = response_encoding(request)
    try:
        if request.method != "POST":
            raise MethodNotAllowed(metadata={"allowed": ["POST"]})
        body = await aread_body(request)
        wait = body.get("wait", False)
        timeout = body.get("timeout")
        if not isinstance(wait, bool):
            raise MalformedRequest("wait must be true or false")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or timeout < 0
        ):
            raise MalformedRequest("timeout must be a non-negative number of seconds")
        ref = actor_ref(request, name, "get_or_create")
        # on_auth runs in the invocation that stores the message.
        result = await queues.asend(
            ref,
            queue,
            body.get("body"),
            wait=wait,
            timeout=timeout,
            origin=await http_origin(request),
        )
        return encoded_response(result, encoding)
    except Exception as exc:
        return error_response(exc, encoding)


@csrf_exempt
async def request_view(
    request: HttpRequest, name: str, path: str = ""
) -> HttpResponseBase:
    """Hand the request to the actor's ``on_request`` (any method)."""
    encoding = response_encoding(request)
    try:
        check_body_size(request)
        # A server-only class answers as an unknown name, before CSRF would.
        definition = registry.get_external(name)
        rejection = await _csrf_rejection(request, definition)
        if rejection is not None:
            return rejection
        create = parse_bool(request.GET.get("create"), "create", True)
        ref = actor_ref(request, name, "get_or_create" if create else "get")
        response: HttpResponseBase = await _run(ref, HandleRequest(request), request)
        return response
    except Exception as exc:
        return error_response(exc, encoding)


async def _csrf_rejection(
    request: HttpRequest, definition: type[Actor]
) -> HttpResponseBase | None:
    """Run Django's CSRF check unless the actor opted out."""
    if getattr(definition, "csrf_exempt", False):
        return None
    if "django.middleware.csrf.CsrfViewMiddleware" not in settings.MIDDLEWARE:
        return None
    middleware = CsrfViewMiddleware(lambda r: HttpResponse())
    # The check may read the session (CSRF_USE_SESSIONS): sync code.
    return await sync_to_async(middleware.process_view)(
        request, _protected_view, (), {}
    )


def _protected_view(request: HttpRequest) -> HttpResponse:  # pragma: no cover
    """Stand-in view for the CSRF check (it is not ``csrf_exempt``)."""
    raise NotImplementedError
