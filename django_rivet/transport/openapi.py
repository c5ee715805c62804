"""The OpenAPI document of the HTTP routes, and the route that serves it.

:func:`document` describes django-rivet's own HTTP routes for the
registered actor classes (``server_only`` ones are left out, as the routes
answer for them as for unknown names): one operation per action
(``POST .../actions/{action}``, its ``args`` a tuple of the parameters'
JSON Schemas, its ``output`` the result's), per queue handler (``POST
.../queue/{queue}``) and the actor routes (``PUT``/``POST``/``GET
.../actors/{name}``), with the error body every route answers with. The
schemas come from the annotations (:mod:`django_rivet.actors.schemas`);
what is not annotated is any value. OpenAPI 3.1, whose schemas are JSON
Schema 2020-12.

``manage.py rivet_openapi`` writes it; ``GET <prefix>/openapi.json``
serves it when ``RIVET["OPENAPI"]`` is ``"staff"`` (active staff users) or
``"public"``; it is off (404) by default.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET

from ..actors import registry
from ..actors.definition import Actor
from ..actors.schemas import describe
from ..conf import rivet_settings
from ..typed.api import ActionAPI, ActorAPI, QueueAPI
from ..typed.jsonschema import Schemas

__all__ = ["document", "dumps", "mounted_prefix", "openapi_view"]

REF = "#/components/schemas/"
MEDIA = ("application/json", "application/cbor")
ERROR = {
    "type": "object",
    "properties": {
        "group": {"type": "string"},
        "code": {"type": "string"},
        "message": {"type": "string"},
        "metadata": {},
    },
    "required": ["group", "code", "message"],
}
PARAMETERS: dict[str, Any] = {
    "key": {
        "name": "key",
        "in": "query",
        "description": "The actor's key, one parameter per part (none: the empty key).",
        "schema": {"type": "array", "items": {"type": "string"}},
        "style": "form",
        "explode": True,
    },
    "actor_id": {
        "name": "actor_id",
        "in": "query",
        "description": "Address the actor by id instead of its key.",
        "schema": {"type": "string", "format": "uuid"},
    },
    "create": {
        "name": "create",
        "in": "query",
        "description": "false: answer actor/not_found instead of creating it.",
        "schema": {"type": "string", "enum": ["true", "false"]},
    },
}


def mounted_prefix() -> str:
    """Return where ``django_rivet.urls`` is mounted (``/rivet/``), if it is."""
    try:
        return reverse("django_rivet:actor", kwargs={"name": "_"})[: -len("actors/_")]
    except NoReverseMatch:
        return "/rivet/"


def document(
    classes: Iterable[type[Actor]] | None = None, prefix: str | None = None
) -> dict[str, Any]:
    """Return the OpenAPI document of the routes for ``classes`` (the registry's)."""
    if classes is None:
        classes = registry.all_actors().values()
    prefix = (mounted_prefix() if prefix is None else prefix).rstrip("/")
    schemas = Schemas(REF)
    actors = describe((c for c in classes if not c.server_only), schemas)
    paths: dict[str, Any] = {}
    for actor in actors:
        base = f"{prefix}/actors/{actor.name}"
        paths[base] = _actor_routes(actor)
        for action in actor.actions:
            paths[f"{base}/actions/{action.name}"] = {"post": _action(actor, action)}
        for queue in actor.queues:
            paths[f"{base}/queue/{queue.name}"] = {"post": _queue(actor, queue)}
    components = {**schemas.finish(), "RivetError": ERROR}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "django-rivet actors",
            "version": _version(),
            "description": "The HTTP routes of the project's actors; bodies "
            "may also be CBOR (application/cbor).",
        },
        "paths": paths,
        "components": {"schemas": components, "parameters": PARAMETERS},
    }


def _version() -> str:
    try:
        return version("django-rivet")
    except PackageNotFoundError:  # running from a source tree
        return "0.0.0"


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {m: {"schema": schema} for m in MEDIA}}


def _answers(ok: dict[str, Any], status: str = "200") -> dict[str, Any]:
    error = {m: {"schema": {"$ref": REF + "RivetError"}} for m in MEDIA}
    return {
        status: {
            "description": "Success",
            "content": {m: {"schema": ok} for m in MEDIA},
        },
        "default": {
            "description": "An error: {group, code, message, metadata}",
            "content": error,
        },
    }


def _parameters(*names: str) -> list[dict[str, str]]:
    return [{"$ref": f"#/components/parameters/{name}"} for name in names]


def _args(action: ActionAPI) -> dict[str, Any]:
    args: dict[str, Any] = {
        "type": "array",
        "prefixItems": [p.schema for p in action.params],
        "minItems": sum(p.required for p in action.params),
    }
    if action.rest is None:
        args["maxItems"] = len(action.params)
        args["items"] = False
    else:
        args["items"] = action.rest
    return args


def _action(actor: ActorAPI, action: ActionAPI) -> dict[str, Any]:
    request = {
        "type": "object",
        "properties": {"args": _args(action), "input": actor.input},
        "additionalProperties": False,
    }
    answer = {
        "type": "object",
        "properties": {"output": action.result},
        "required": ["output"],
    }
    return {
        "operationId": f"{actor.name}.{action.name}",
        "summary": action.doc.split("\n", 1)[0] or f"Run the action {action.name}",
        "tags": [actor.name],
        "parameters": _parameters("key", "actor_id", "create"),
        "requestBody": _body(request),
        "responses": _answers(answer),
    }


def _queue(actor: ActorAPI, queue: QueueAPI) -> dict[str, Any]:
    request = {
        "type": "object",
        "properties": {
            "body": queue.body,
            "wait": {"type": "boolean"},
            "timeout": {"type": ["number", "null"], "minimum": 0},
        },
        "additionalProperties": False,
    }
    answer = {
        "type": "object",
        "properties": {
            "status": {"enum": ["queued", "completed", "failed", "timed_out"]},
            "response": queue.reply,
            "error": {"$ref": REF + "RivetError"},
        },
        "required": ["status"],
    }
    return {
        "operationId": f"{actor.name}.queue.{queue.name}",
        "summary": queue.doc.split("\n", 1)[0] or f"Send to the queue {queue.name}",
        "tags": [actor.name],
        "parameters": _parameters("key", "actor_id"),
        "requestBody": _body(request),
        "responses": _answers(answer),
    }


def _actor_routes(actor: ActorAPI) -> dict[str, Any]:
    create = {
        "type": "object",
        "properties": {"input": actor.input},
        "additionalProperties": False,
    }
    actor_id = {"type": "string", "format": "uuid"}
    return {
        "put": {
            "operationId": f"{actor.name}.getOrCreate",
            "summary": "Get or create the actor",
            "tags": [actor.name],
            "parameters": _parameters("key"),
            "requestBody": _body(create),
            "responses": _answers(
                {
                    "type": "object",
                    "properties": {
                        "actor_id": actor_id,
                        "created": {"type": "boolean"},
                    },
                    "required": ["actor_id", "created"],
                }
            ),
        },
        "post": {
            "operationId": f"{actor.name}.create",
            "summary": "Create the actor (actor/already_exists if it exists)",
            "tags": [actor.name],
            "parameters": _parameters("key"),
            "requestBody": _body(create),
            "responses": _answers(
                {
                    "type": "object",
                    "properties": {"actor_id": actor_id},
                    "required": ["actor_id"],
                },
                "201",
            ),
        },
        "get": {
            "operationId": f"{actor.name}.get",
            "summary": "Describe the actor",
            "tags": [actor.name],
            "parameters": _parameters("key", "actor_id"),
            "responses": _answers(
                {
                    "type": "object",
                    "properties": {
                        "actor_id": actor_id,
                        "name": {"type": "string"},
                        "key": {"type": "array", "items": {"type": "string"}},
                        "created_at": {"type": "string", "format": "date-time"},
                    },
                    "required": ["actor_id", "name", "key", "created_at"],
                }
            ),
        },
    }


@require_GET
def openapi_view(request: HttpRequest) -> HttpResponse:
    """Serve :func:`document` as ``openapi.json`` (``RIVET["OPENAPI"]``)."""
    access = rivet_settings.OPENAPI
    user = getattr(request, "user", None)
    staff = user is not None and user.is_active and user.is_staff
    if access is None or (access == "staff" and not staff):
        # Off, or not for this caller: as if there were no such route.
        return HttpResponse(status=404)
    prefix = request.path[: -len("openapi.json")]
    return JsonResponse(
        document(prefix=prefix), json_dumps_params={"ensure_ascii": False}
    )


def dumps(doc: dict[str, Any]) -> str:
    """Return the document as indented JSON."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
