"""What the RivetKit flavour uses from the rest of django-rivet, in one place.

Everything that runs actor code goes through the invocation spine
(``ainvoke``), with the same operations as django-rivet's own protocol
(``CallAction``, ``EnsureActor``, ``Connect``, ``ConnAction``,
``Disconnect``) plus the few below, which only combine ``on_auth`` with
what the RivetKit REST API needs. This module is the only one of the
package that imports from the runtime, the connection lifecycle, the queue
API and the models, so moving those modules means editing these imports.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import events
from ...actors import queue as queues
from ...actors import registry
from ...actors.runtime import (
    ActorRef,
    CallAction,
    Origin,
    ainvoke,
    public_error,
)
from ...connections import ConnAction, Connect, ConnectResult, Disconnect, heartbeat
from ...consumers import origin_allowed
from ...exceptions import Forbidden
from ...models import Actor as ActorRow
from ...models import ActorEvent, Connection

if TYPE_CHECKING:
    from ...actors.definition import Actor
    from ...actors.runtime import Invocation

__all__ = [
    "ActorEvent",
    "ActorRef",
    "Authorize",
    "CallAction",
    "ConnAction",
    "Connect",
    "ConnectResult",
    "Connection",
    "Describe",
    "Destroy",
    "Disconnect",
    "Origin",
    "ainvoke",
    "events",
    "heartbeat",
    "origin_allowed",
    "public_error",
    "queues",
    "registry",
]

# Actor classes opt in to DELETE actors/{id} with this attribute.
ALLOW_DESTROY_ATTRIBUTE = "rivetkit_allow_destroy"


@dataclass(slots=True)
class Describe:
    """Authorize, then return the row the REST API describes.

    Run with a ``get``/``get_or_create``/``create`` reference, it is also how
    the REST API resolves and creates actors: one invocation, ``on_auth``
    included.
    """

    label: str | None = "describe"

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check."""

    def run(self, invocation: Invocation) -> dict[str, Any]:
        """Return ``{actor_id, name, key, created_at, created}``."""
        invocation.authorize(None)
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
class Authorize:
    """Run ``on_auth`` only (before a queue send, whose API has no origin)."""

    label: str | None = "authorize"

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check."""

    def run(self, invocation: Invocation) -> uuid.UUID:
        """Authorize the caller; return the actor id."""
        invocation.authorize(None)
        return invocation.actor_id


@dataclass(slots=True)
class Destroy:
    """Destroy an actor for a client, if its class allows it at all.

    Destroying is refused (``actor/forbidden``) unless the class sets
    ``rivetkit_allow_destroy = True``; then ``on_auth`` decides, called with
    ``info.action=None`` (as for a connect) and ``info.request.method ==
    "DELETE"``.
    """

    label: str | None = "destroy"

    def prepare(self, definition: type[Actor]) -> None:
        """Refuse classes that did not opt in, before any I/O."""
        if not getattr(definition, ALLOW_DESTROY_ATTRIBUTE, False):
            raise Forbidden(
                f"Actor {definition.name!r} cannot be destroyed by clients",
                metadata={"name": definition.name},
            )

    def run(self, invocation: Invocation) -> None:
        """Authorize, then ask invoke() to destroy after this operation."""
        invocation.authorize(None)
        invocation.destroy_requested = True
