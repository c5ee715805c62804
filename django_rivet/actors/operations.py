"""The built-in operations every entry point shares.

An operation is what :func:`~django_rivet.actors.spine.invoke` runs once the
actor is locked and loaded (see :class:`~.invocation.Operation`). The
scheduler, the queues and the transport add their own next to their code;
these are the ones the server-side client and the transport both use.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..domain import check_value
from ..exceptions import (
    ActionNotFound,
    InvalidArgs,
    InvalidOutput,
    InvalidValue,
    RivetError,
)
from ..registries import did_you_mean
from ..splicing import Encoded
from .calls import AuthRequest
from .definition import Actor, HandlerSpec

if TYPE_CHECKING:
    from .invocation import Invocation

__all__ = [
    "ACTOR_AUTH",
    "CallAction",
    "EnsureActor",
    "Load",
    "OutputEncoder",
    "RunHook",
    "check_arguments",
    "checked_output",
]

#: Encodes an action's output for the caller (its transport and encoding):
#: checks the value domain and the outgoing size limit, returns the bytes.
OutputEncoder = Callable[[Any], bytes]

# What on_auth is asked when a caller creates, resolves or describes an actor.
ACTOR_AUTH = AuthRequest("actor")


@dataclass(slots=True)
class CallAction:
    """Run an action with wire arguments."""

    action: str
    args: Any = ()
    label: str | None = None
    spec: HandlerSpec | None = None
    #: The caller's encoder: the output is encoded inside the invocation,
    #: before its transaction commits, and handed back as :class:`Encoded`.
    #: ``None`` (the server-side client): the output is checked against the
    #: value domain and returned as it is.
    encoder: OutputEncoder | None = None
    #: The arguments were decoded from the wire, under the same rule.
    args_checked: bool = False

    @property
    def auth(self) -> AuthRequest:
        """Ask ``on_auth`` about this action."""
        return _action_auth(self.action)

    @property
    def readonly(self) -> bool:
        """Whether the action is read-only (known once prepared)."""
        return self.spec is not None and self.spec.readonly

    def prepare(self, definition: type[Actor]) -> None:
        """Find the action and check the arguments against its signature."""
        spec = definition.actions.get(self.action)
        if spec is None:
            # Checked before on_auth: the class is not named, so a caller
            # holding only an actor id does not learn it (the suggestion is
            # one of the actions any caller of this actor may call).
            message = f"The actor has no action {self.action!r}"
            suggestion = did_you_mean(str(self.action), definition.actions)
            if suggestion is not None:
                message += f"; did you mean {suggestion!r}?"
            raise ActionNotFound(message, metadata={"action": self.action})
        if not self.args_checked:
            # A caller in this process: typed values go as the wire would
            # carry them (the handler gets a copy), under the same rule.
            self.args = spec.wire_args(self.args)
            check_arguments(self.args)
        self.args = spec.arguments(self.args)
        self.spec = spec
        self.label = f"action {self.action}"

    def run(self, invocation: Invocation) -> Any:
        """Run the action; its output is checked (and encoded) before commit.

        An annotated result is converted to the domain first; a caller in
        this process (no encoder) gets it back as the annotated type.
        """
        spec = self.spec
        assert spec is not None
        output = invocation.run_handler(spec, self.args)
        types = spec.types
        if types is None or types.result is None:
            return checked_output(self.action, output, self.encoder)
        domain, typed = types.dump_result(output, self.action)
        encoded = checked_output(self.action, domain, self.encoder)
        return typed if self.encoder is None else encoded


@functools.lru_cache(maxsize=1024)
def _action_auth(action: str) -> AuthRequest:
    # Asked twice per call (observability, the spine); the request is frozen,
    # and an actor's actions are few.
    return AuthRequest("action", action=action)


def check_arguments(args: Any, where: str = "args") -> None:
    """Refuse arguments outside the value domain (``request/invalid_args``).

    What the wire refuses when it decodes a call, the server-side client
    refuses here, naming the path (``args[0].price``).
    """
    try:
        check_value(args, where)
    except InvalidValue as exc:
        raise InvalidArgs(exc.message, metadata=exc.metadata) from exc


def checked_output(action: str, output: Any, encoder: OutputEncoder | None) -> Any:
    """Return ``output`` checked against the value domain (encoded if asked).

    Raises ``actor/invalid_output`` naming the action and the path: the
    invocation rolls back, so nothing a caller cannot read is committed. The
    encoder's own coded errors (the outgoing size limit) pass unchanged.
    """
    try:
        if encoder is None:
            check_value(output, "output")
            return output
        return Encoded(encoder(output))
    except RivetError as exc:
        if not isinstance(exc, InvalidValue):
            raise
        metadata = {"action": action, **(exc.metadata or {})}
        raise InvalidOutput(
            f"Action {action!r} returned a value outside the value domain: "
            f"{exc.message}",
            metadata=metadata,
        ) from exc
    except (TypeError, ValueError) as exc:
        raise InvalidOutput(
            f"Action {action!r} returned a value that cannot be encoded: {exc}",
            metadata={"action": action},
        ) from exc


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
class Load:
    """Load an actor under its lock for a read-only call, creating it if asked.

    A read-only call's first step in a process that has not loaded the
    actor (:mod:`.reads`): ``on_auth`` is asked about the read itself, then
    the actor is created (per the call's mode) and woken, as for any call.
    """

    read: Any
    label: str | None = "load"

    @property
    def auth(self) -> AuthRequest | None:
        """Ask ``on_auth`` about the read this load is for."""
        auth: AuthRequest | None = self.read.auth
        return auth

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check: the read was prepared."""

    def run(self, invocation: Invocation) -> None:
        """Nothing to run: loading was the point."""


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
