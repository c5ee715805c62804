"""What the RivetKit REST API adds to the operations both protocols share.

Everything that runs actor code goes through the invocation spine
(:func:`~django_rivet.actors.lanes.ainvoke`), with the same operations as
django-rivet's own protocol (``CallAction``, ``Connect``, ``ConnAction``,
``Disconnect``, the queue's, and :mod:`..operations`' ``Describe`` and
``HandleRequest``) plus :class:`Destroy`, which only this API exposes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...actors import registry
from ...actors.calls import AuthRequest
from ...exceptions import ActorNotFound, Forbidden
from ...models import Actor as ActorRow

if TYPE_CHECKING:
    from ...actors.definition import Actor
    from ...actors.invocation import Invocation
    from .addressing import GatewayTarget

__all__ = [
    "ALLOW_DESTROY_ATTRIBUTE",
    "DESTROY_AUTH",
    "Destroy",
    "addressed_definition",
]

# Actor classes opt in to DELETE actors/{id} with this attribute.
ALLOW_DESTROY_ATTRIBUTE = "rivetkit_allow_destroy"
# What on_auth is asked before a client destroys an actor.
DESTROY_AUTH = AuthRequest("destroy")


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
            raise Forbidden("The actor cannot be destroyed by clients")

    def run(self, invocation: Invocation) -> None:
        """Ask the spine to destroy the actor after this operation."""
        invocation.destroy_requested = True


async def addressed_definition(address: GatewayTarget) -> type[Actor]:
    """Return the class of the addressed actor (for checks before invoking).

    A server-only class, or an unknown id, answers ``actor/not_found``.
    """
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
