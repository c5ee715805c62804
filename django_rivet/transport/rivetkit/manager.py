"""The RivetKit client's "manager" REST API: metadata, finding and listing actors.

* ``GET metadata`` -- what the client fetches before its first call;
* ``GET/PUT/POST actors`` and ``DELETE actors/{id}`` -- the REST API it
  resolves, creates, lists and destroys actors with (always JSON).

Resolving and creating run through the invocation spine with ``on_auth``
(``info.kind == "actor"``). Listing (``GET actors?name=``) invokes nothing:
it reads the ``Actor`` table's indexes, and is answered to server-side
callers only unless ``RIVETKIT_LIST_FROM_BROWSERS`` (:func:`from_browser`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import wraps
from typing import Any, Literal

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from ... import __version__
from ...actors import client as actors_client
from ...actors import registry
from ...actors.calls import Origin
from ...actors.lanes import ainvoke
from ...actors.rows import ActorRef
from ...conf import rivet_settings
from ...encoding import json_loads, run_decoder
from ...exceptions import (
    ActorNotFound,
    Forbidden,
    InvalidEncoding,
    MalformedRequest,
    MethodNotAllowed,
)
from ..operations import Describe
from .addressing import decode_input, parse_actor_id, parse_key, serialize_key
from .cors import cors
from .http import View, _bearer, _error, _json, _origin, _read_body, gateway_view
from .operations import Destroy
from .protocol import WireEncoding

__all__ = ["actors_view", "destroy_or", "from_browser", "metadata_view"]

# The runtime the client logs; it reads nothing else from these fields.
RUNTIME = "django-rivet"
MAX_ACTOR_IDS = 100
# Actors one list call answers by default (RivetKit's engine: 100).
LIST_LIMIT = 100


def _millis(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def _actor_json(info: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Describe an actor the way the RivetKit REST API does."""
    created = _millis(info["created_at"])
    return {
        "actor_id": str(info["actor_id"]),
        "name": info["name"],
        "key": serialize_key(info["key"]),
        "namespace_id": namespace,
        "runner_name_selector": "default",
        "create_ts": created,
        # Actors load on demand: always started and connectable.
        "start_ts": created,
        "connectable_ts": created,
        "sleep_ts": None,
        "destroy_ts": None,
        "error": None,
    }


# -- metadata -----------------------------------------------------------------------
@csrf_exempt
@cors
async def metadata_view(request: HttpRequest) -> HttpResponseBase:
    """``GET metadata``: tell the client what it talks to."""
    if request.method not in ("GET", "HEAD"):
        return _error(MethodNotAllowed(metadata={"allowed": ["GET"]}))
    return _json(
        {
            "runtime": RUNTIME,
            "version": __version__,
            "envoyProtocolVersion": 1,
            # Server-only classes are not there for clients to find.
            "actorNames": {name: {"metadata": {}} for name in registry.public_actors()},
        }
    )


# -- the actor REST API -------------------------------------------------------------
@csrf_exempt
@cors
async def actors_view(request: HttpRequest) -> HttpResponseBase:
    """``GET`` (find), ``PUT`` (get-or-create) and ``POST`` (create) actors."""
    namespace = request.GET.get("namespace") or "default"
    try:
        origin = await _origin(request, _bearer(request), None)
        if request.method == "GET":
            return await _find_actors(request, origin, namespace)
        if request.method not in ("PUT", "POST"):
            raise MethodNotAllowed(metadata={"allowed": ["GET", "PUT", "POST"]})
        if request.content_type != "application/json":
            raise InvalidEncoding("The actors API takes JSON")
        body = await run_decoder(json_loads, _read_body(request))
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            raise MalformedRequest("The body needs a string 'name'")
        key = body.get("key")
        if key is not None and not isinstance(key, str):
            raise MalformedRequest("key must be a key string")
        mode: Literal["get_or_create", "create"] = (
            "get_or_create" if request.method == "PUT" else "create"
        )
        input_ = body.get("input")
        if input_ is not None and not isinstance(input_, str):
            raise MalformedRequest("input must be base64 of CBOR")
        ref = ActorRef.of(
            body["name"],
            parse_key(key),
            mode=mode,
            input=decode_input(input_, urlsafe=False),
        )
        info = await ainvoke(ref, Describe(), origin)
        actor = _actor_json(info, namespace)
        if request.method == "PUT":
            return _json({"actor": actor, "created": info["created"]})
        return _json({"actor": actor})
    except Exception as exc:
        return _error(exc)


async def _find_actors(
    request: HttpRequest, origin: Origin, namespace: str
) -> HttpResponse:
    found: list[dict[str, Any]] = []
    ids = request.GET.get("actor_ids")
    name = request.GET.get("name")
    if ids is not None:
        refs = []
        for value in [part for part in ids.split(",") if part][:MAX_ACTOR_IDS]:
            try:
                refs.append(ActorRef(actor_id=parse_actor_id(value)))
            except ActorNotFound:
                continue
    elif name is not None and "key" in request.GET:
        refs = [ActorRef.of(name, parse_key(request.GET["key"]), mode="get")]
    elif name is not None:
        return await _list_actors(request, name, namespace)
    else:
        raise MalformedRequest("Name is required when not using actor_ids")
    for ref in refs:
        try:
            info = await ainvoke(ref, Describe(), origin)
        except ActorNotFound:
            continue
        found.append(_actor_json(info, namespace))
    return _json({"actors": found})


async def _list_actors(request: HttpRequest, name: str, namespace: str) -> HttpResponse:
    """``GET actors?name=N[&limit=L][&cursor=C]``: the class's actors, newest first.

    What RivetKit's engine answers (``{actors, pagination: {cursor}}``, at
    most ``limit``, 100 by default), to callers that are not browsers
    unless ``RIVETKIT_LIST_FROM_BROWSERS``: a page could otherwise list
    them with its visitor's cookies. A ``server_only`` class, or an
    unknown one, has no actors to list. ``cursor`` is the creation time
    (microseconds) the next page starts before.
    """
    if from_browser(request) and not rivet_settings.RIVETKIT_LIST_FROM_BROWSERS:
        raise Forbidden(
            "Listing actors is not answered to browsers "
            "(RIVET['RIVETKIT_LIST_FROM_BROWSERS'])"
        )
    limit = _bounded_int(request.GET.get("limit"), "limit", LIST_LIMIT)
    cursor = request.GET.get("cursor")
    before = None
    if cursor:
        micros = _bounded_int(cursor, "cursor", None)
        before = datetime.fromtimestamp(micros / 1_000_000, UTC)
    if name not in registry.public_actors():
        return _json({"actors": [], "pagination": {"cursor": None}})
    handles = await actors_client.afilter(name, created_before=before, limit=limit)
    listed = [
        _actor_json(
            {
                "actor_id": handle.actor_id,
                "name": handle.name,
                "key": list(handle.key),
                "created_at": handle.created_at,
            },
            namespace,
        )
        for handle in handles
    ]
    last = handles[-1].created_at if len(handles) == limit else None
    next_cursor = None if last is None else str(int(last.timestamp() * 1_000_000))
    return _json({"actors": listed, "pagination": {"cursor": next_cursor}})


def _bounded_int(value: str | None, name: str, default: int | None) -> int:
    if value is None or value == "":
        if default is None:
            raise MalformedRequest(f"{name} is required")
        return default
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise MalformedRequest(f"{name} must be a non-negative integer")
    number = int(value)
    if name == "limit" and not 1 <= number <= actors_client.MAX_FILTER_LIMIT:
        raise MalformedRequest(
            f"limit must be from 1 to {actors_client.MAX_FILTER_LIMIT}"
        )
    return number


def from_browser(request: HttpRequest) -> bool:
    """Tell whether a request comes from a browser (a page's fetch).

    Browsers send ``Origin`` on cross-origin requests and the ``Sec-Fetch-*``
    headers on every request; server-side clients (Node, curl, Python) send
    neither unless told to.
    """
    headers = request.headers
    return any(
        name in headers for name in ("Origin", "Sec-Fetch-Mode", "Sec-Fetch-Site")
    )


def destroy_or(view: View) -> View:
    """Route ``DELETE actors/{id}`` here, anything else to ``view``.

    The RivetKit REST path ``actors/{actor_id}`` is also django-rivet's
    ``actors/{name}``; only ``DELETE`` with an actor id is the client's.
    """

    destroy = gateway_view("DELETE")(_destroy_view)

    @wraps(view)
    async def wrapper(
        request: HttpRequest, *args: Any, **kwargs: Any
    ) -> HttpResponseBase:
        segment = str(kwargs.get("name", ""))
        if request.method in ("DELETE", "OPTIONS") and _is_actor_id(segment):
            return await destroy(request, segment)
        return await view(request, *args, **kwargs)

    return csrf_exempt(wrapper)


def _is_actor_id(segment: str) -> bool:
    try:
        parse_actor_id(segment)
    except ActorNotFound:
        return False
    return True


async def _destroy_view(
    request: HttpRequest, encoding: WireEncoding, actor_id: str
) -> HttpResponseBase:
    origin = await _origin(request, _bearer(request), None)
    await ainvoke(ActorRef(actor_id=parse_actor_id(actor_id)), Destroy(), origin)
    return _json({})
