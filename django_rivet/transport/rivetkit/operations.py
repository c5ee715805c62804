"""The operations the RivetKit REST API and gateway add to the spine's.

Everything that runs actor code goes through the invocation spine
(:func:`~django_rivet.actors.spine.ainvoke`), with the same operations as
django-rivet's own protocol (``CallAction``, ``Connect``, ``ConnAction``,
``Disconnect``, the queue's ``EnqueueMessage``) plus the three below. Each
states what ``on_auth`` is asked (``auth``); the spine runs the check before
any actor code, as for every other external call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpResponse
from django.http.response import HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware

from ...actors import registry
from ...actors.invocation import AuthRequest
from ...actors.operations import ACTOR_AUTH
from ...exceptions import ActionNotFound, ActorNotFound, Forbidden
from ...models import Actor as ActorRow

if TYPE_CHECKING:
    from django.http import HttpRequest

    from ...actors.definition import Actor
    from ...actors.invocation import Invocation
    from .addressing import GatewayTarget

__all__ = [
    "ALLOW_DESTROY_ATTRIBUTE",
    "DESTROY_AUTH",
    "Describe",
    "Destroy",
    "HandleRequest",
    "csrf_rejection",
]

# Actor classes opt in to DELETE actors/{id} with this attribute.
ALLOW_DESTROY_ATTRIBUTE = "rivetkit_allow_destroy"
# What on_auth is asked before a client destroys an actor.
DESTROY_AUTH = AuthRequest("destroy")


@dataclass(slots=True)
class Describe:
    """Return the row the REST API describes (after ``on_auth``).

    Run with a ``get``/``get_or_create``/``create`` reference, it is also how
    the REST API resolves and creates actors: one invocation, ``on_auth``
    (``info.kind == "actor"``) included.
    """

    label: str | None = "describe"
    auth = ACTOR_AUTH

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check."""

    def run(self, invocation: Invocation) -> dict[str, Any]:
        """Return ``{actor_id, name, key, created_at, created}``."""
        created_at = (
            ActorRow.objects.filter(pk=invocation.actor_id)
            .values_list("created_at", flat=True)
            .get()
        )
        return {
            "actor_id": invocation.actor_id,
            "name": invocation.definition.name,
            "key": tuple(invocation.key),
            "created_at": created_at,
            "created": invocation.created,
        }


@dataclass(slots=True)
class Destroy:
    """Destroy an actor for a client, if its class allows it at all.

    Destroying is refused (``actor/forbidden``) unless the class sets
    ``rivetkit_allow_destroy = True``; then ``on_auth`` decides, asked with
    ``info.kind == "destroy"`` (and ``info.request.method == "DELETE"``).
    """

    label: str | None = "destroy"
    auth = DESTROY_AUTH

    def prepare(self, definition: type[Actor]) -> None:
        """Refuse classes that did not opt in, before any I/O."""
        if not getattr(definition, ALLOW_DESTROY_ATTRIBUTE, False):
            raise Forbidden(
                f"Actor {definition.name!r} cannot be destroyed by clients",
                metadata={"name": definition.name},
            )

    def run(self, invocation: Invocation) -> None:
        """Ask the spine to destroy the actor after this operation."""
        invocation.destroy_requested = True


@dataclass(slots=True)
class HandleRequest:
    """Pass an ``HttpRequest`` to ``on_request`` (after ``on_auth``).

    The gateway checks CSRF before invoking (:func:`csrf_rejection`).
    """

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


# -- CSRF, checked before invoking ---------------------------------------------------
async def csrf_rejection(
    request: HttpRequest, address: GatewayTarget
) -> HttpResponseBase | None:
    """Run Django's CSRF check unless the addressed actor's class opted out.

    Checked before the invocation, so a forged request creates no actor and
    runs no actor code.
    """
    definition = await _definition(address)
    if getattr(definition, "csrf_exempt", False):
        return None
    if "django.middleware.csrf.CsrfViewMiddleware" not in settings.MIDDLEWARE:
        return None
    middleware = CsrfViewMiddleware(lambda r: HttpResponse())
    # The check may read the session (CSRF_USE_SESSIONS): sync code.
    return await sync_to_async(middleware.process_view)(
        request, _protected_view, (), {}
    )


async def _definition(address: GatewayTarget) -> type[Actor]:
    if address.name is not None:
        return registry.get_external(address.name)
    assert address.actor_id is not None
    name = (
        await ActorRow.objects.filter(pk=address.actor_id)
        .values_list("name", flat=True)
        .afirst()
    )
    if name is None:
        raise ActorNotFound(
            "Actor not found", metadata={"actor_id": str(address.actor_id)}
        )
    definition = registry.get(name)
    if definition.server_only:
        # As for an unknown id: clients cannot tell it exists.
        raise ActorNotFound(
            "Actor not found", metadata={"actor_id": str(address.actor_id)}
        )
    return definition


def _protected_view(request: HttpRequest) -> HttpResponse:  # pragma: no cover
    """Stand-in view for the CSRF check (it is not ``csrf_exempt``)."""
    raise NotImplementedError
