"""The built-in operations every entry point shares.

An operation is what :func:`~django_rivet.actors.spine.invoke` runs once the
actor is locked and loaded (see :class:`~.invocation.Operation`). The
scheduler, the queues and the transport add their own next to their code;
these are the ones the server-side client and the transport both use.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..exceptions import ActionNotFound
from .definition import Actor, HandlerSpec
from .invocation import AuthRequest

if TYPE_CHECKING:
    from .invocation import Invocation

__all__ = ["ACTOR_AUTH", "CallAction", "EnsureActor", "RunHook"]

# What on_auth is asked when a caller creates, resolves or describes an actor.
ACTOR_AUTH = AuthRequest("actor")


@dataclass(slots=True)
class CallAction:
    """Run an action with wire arguments."""

    action: str
    args: Any = ()
    label: str | None = None
    spec: HandlerSpec | None = None

    @property
    def auth(self) -> AuthRequest:
        """Ask ``on_auth`` about this action."""
        return AuthRequest("action", action=self.action)

    def prepare(self, definition: type[Actor]) -> None:
        """Find the action and check the arguments against its signature."""
        spec = definition.actions.get(self.action)
        if spec is None:
            raise ActionNotFound(
                f"Actor {definition.name!r} has no action {self.action!r}",
                metadata={"action": self.action},
            )
        spec.check_args(self.args)
        self.spec = spec
        self.label = f"action {self.action}"

    def run(self, invocation: Invocation) -> Any:
        """Run the action."""
        assert self.spec is not None
        return invocation.run_handler(self.spec, self.args)


@dataclass(slots=True)
class EnsureActor:
    """Create or load an actor without running an action."""

    label: str | None = "ensure"
    auth = ACTOR_AUTH

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check."""

    def run(self, invocation: Invocation) -> tuple[uuid.UUID, bool]:
        """Return ``(actor_id, created)``."""
        return invocation.actor_id, invocation.created


@dataclass(slots=True)
class RunHook:
    """Run one lifecycle hook (destroy, sleep)."""

    hook: Literal["destroy", "sleep"]
    label: str | None = None
    # Internal callers only (the server-side client, idle eviction).
    auth = None

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check."""

    def run(self, invocation: Invocation) -> None:
        """Request the hook's effect; invoke() carries it out."""
        if self.hook == "destroy":
            invocation.destroy_requested = True
        else:
            invocation.sleep_requested = True
