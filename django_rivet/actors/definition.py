"""How users define actors: :class:`Actor`, :func:`action`, :func:`queue_handler`.

Nothing here touches Django's settings or models, so actor modules import
cheaply. A class is checked as it is defined: a mistake that would
otherwise surface as a crash far from it (an action named ``name``, two
actions with one wire name, a lifecycle hook marked as an action) raises
:class:`ActorDefinitionError`, naming the class and the method.
"""

from __future__ import annotations

import copy
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, overload

from django.core.exceptions import ImproperlyConfigured

from ..exceptions import ActionNotFound, InvalidArgs
from .annotations import HandlerTypes, describe, matches, mismatch, positional

if TYPE_CHECKING:
    from django.http import HttpRequest

    from .calls import AuthInfo
    from .context import ActorContext, Conn
    from .websockets import WebSocket

__all__ = ["Actor", "ActorDefinitionError", "HandlerSpec", "action", "queue_handler"]

F = TypeVar("F", bound=Callable[..., Any])

_ACTION_MARK = "_rivet_action_name"
_QUEUE_MARK = "_rivet_queue_name"
_TIMEOUT_MARK = "_rivet_timeout"
_RETRIES_MARK = "_rivet_max_retries"
_READONLY_MARK = "_rivet_readonly"
NAME_MAX_LENGTH = 64
NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*$")

# Class attributes that override a project-wide limit for one actor class.
_LIMIT_OPTIONS = ("action_timeout", "queue_max_pending", "queue_max_message_bytes")

# Every Actor subclass, in definition order; autodiscovery registers the ones
# defined in an app's actors.py.
defined_classes: list[type[Actor]] = []


class ActorDefinitionError(ImproperlyConfigured):
    """An Actor subclass is defined in a way that cannot work."""


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """An action or queue handler, with what argument checks need."""

    wire_name: str
    attribute: str
    signature: inspect.Signature
    is_async: bool
    hints: dict[str, Any]
    # Seconds this handler may run, overriding the class and ACTION_TIMEOUT.
    timeout: float | None = None
    # Queue handlers: retries of a failing message (None: the setting).
    max_retries: int | None = None
    # Actions: runs without the actor's lock, and may not write (see action()).
    readonly: bool = False
    # (name, hint) of each argument after ``self, ctx`` when all of them are
    # plain positional parameters without defaults: then a call fits exactly
    # when it has that many arguments, checked without binding (which costs
    # more than the rest of an invocation's argument handling).
    positional: tuple[tuple[str, Any], ...] | None = None
    # What the annotations convert (None, or ``plain``: nothing).
    types: HandlerTypes | None = None

    def arguments(self, args: Any) -> Any:
        """Check the wire's ``args``; return them as the handler takes them.

        Annotated types (docs/types.md) are converted, ``request/invalid_args``
        naming the path of a value that does not fit.
        """
        self.check_args(args)
        types = self.types
        if types is None or types.plain:
            return args
        return types.load_args(args)

    def wire_args(self, args: Any) -> Any:
        """Return ``args`` given in this process (typed) as the wire carries them."""
        types = self.types
        if types is None or types.plain:
            return args
        return types.dump_args(args)

    def check_args(self, args: Any) -> None:
        """Raise ``request/invalid_args`` unless ``args`` fit the signature."""
        if not isinstance(args, list | tuple):
            raise InvalidArgs("args must be a list")
        positional = self.positional
        if positional is not None and len(args) == len(positional):
            for (name, hint), value in zip(positional, args, strict=True):
                if hint is not None and not matches(value, hint):
                    raise mismatch(self.wire_name, name, hint)
            return
        try:
            bound = self.signature.bind(None, None, *args)
        except TypeError as exc:
            low, high = self.arity()
            raise InvalidArgs(
                f"Invalid arguments for {self.wire_name!r}: {exc}. It takes "
                f"{self.describe_arguments()}; the call gave {len(args)}.",
                metadata={
                    "expected_min": low,
                    "expected_max": high,
                    "given": len(args),
                },
            ) from exc
        for name, value in list(bound.arguments.items())[2:]:
            hint = self.hints.get(name)
            if hint is not None and not matches(value, hint):
                raise mismatch(self.wire_name, name, hint)

    def arity(self) -> tuple[int, int | None]:
        """Return how many arguments a call takes: (at least, at most or None)."""
        low, high = 0, 0
        for parameter in list(self.signature.parameters.values())[2:]:
            if parameter.kind == inspect.Parameter.VAR_POSITIONAL:
                return low, None
            if parameter.kind not in _PLAIN:
                continue  # keyword-only: not reachable from the wire
            high += 1
            if parameter.default is inspect.Parameter.empty:
                low += 1
        return low, high

    def describe_arguments(self) -> str:
        """Say what a call takes, e.g. ``1 argument (sku: str)``."""
        low, high = self.arity()
        if high is None:
            count = f"{low} or more arguments"
        elif low == high:
            count = f"{low} argument{'' if low == 1 else 's'}"
        else:
            count = f"{low} to {high} arguments"
        names = []
        for parameter in list(self.signature.parameters.values())[2:]:
            if parameter.kind not in _PLAIN + (inspect.Parameter.VAR_POSITIONAL,):
                continue
            hint = self.hints.get(parameter.name)
            text = "*" if parameter.kind == inspect.Parameter.VAR_POSITIONAL else ""
            text += parameter.name
            if hint is not None:
                text += f": {describe(hint)}"
            if parameter.default is not inspect.Parameter.empty:
                text += " = ..."
            names.append(text)
        return f"{count} ({', '.join(names)})" if names else count


_PLAIN = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@overload
def action(func: F, /) -> F: ...
@overload
def action(
    *, name: str | None = None, timeout: float | None = None, readonly: bool = False
) -> Callable[[F], F]: ...
def action(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    timeout: float | None = None,
    readonly: bool = False,
) -> Any:
    """Mark a method as an action.

    ``name`` overrides its wire name; ``timeout`` (seconds) bounds its
    invocation instead of the class's ``action_timeout`` or ``ACTION_TIMEOUT``.
    ``readonly=True`` runs it without the actor's lock, concurrently with
    other reads and with a running write, on the latest committed state;
    any write it tries is refused with ``actor/readonly`` (docs/actors.md,
    "Read-only actions").
    """
    _check_positive("timeout", timeout)
    if not isinstance(readonly, bool):
        raise TypeError(f"readonly must be True or False, not {readonly!r}")

    def mark(function: F) -> F:
        setattr(function, _ACTION_MARK, name or function.__name__)
        setattr(function, _TIMEOUT_MARK, timeout)
        setattr(function, _READONLY_MARK, readonly)
        return function

    return mark(func) if func is not None else mark


def queue_handler(queue: str, *, max_retries: int | None = None) -> Callable[[F], F]:
    """Mark a method as the handler of the actor's queue ``queue``.

    A message whose handler raises is retried up to ``max_retries`` times
    (default ``RIVET["SCHEDULE_MAX_RETRIES"]``; 0: never) before it is
    marked failed; a ``UserError`` is never retried.
    """
    if max_retries is not None and (
        isinstance(max_retries, bool)
        or not isinstance(max_retries, int)
        or max_retries < 0
    ):
        raise ValueError(f"max_retries must be an integer >= 0, not {max_retries!r}")

    def mark(function: F) -> F:
        setattr(function, _QUEUE_MARK, queue)
        setattr(function, _RETRIES_MARK, max_retries)
        return function

    return mark


def _check_positive(option: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{option} must be a positive number, not {value!r}")


def _spec(attribute: str, function: Callable[..., Any], wire_name: str) -> HandlerSpec:
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # unresolvable forward references: skip type checks
        hints = {}
    hints.pop("return", None)
    signature = inspect.signature(function)
    return HandlerSpec(
        wire_name=wire_name,
        attribute=attribute,
        signature=signature,
        is_async=inspect.iscoroutinefunction(function),
        hints=hints,
        timeout=getattr(function, _TIMEOUT_MARK, None),
        max_retries=getattr(function, _RETRIES_MARK, None),
        positional=positional(signature, hints),
        readonly=bool(getattr(function, _READONLY_MARK, False)),
        types=HandlerTypes(function),
    )


def default_name(cls: type) -> str:
    """Return the default registry name: class name, first letter lowercased."""
    return cls.__name__[:1].lower() + cls.__name__[1:]


class Actor:
    """Base class of actors; subclass it in an app's ``actors.py``.

    Attributes set on ``self`` are ephemeral (per process); persisted data
    lives in ``ctx.state`` and ``ctx.kv``. Every hook may be sync or async.
    """

    name: ClassVar[str] = "actor"
    abstract: ClassVar[bool] = True
    initial_state: ClassVar[Any] = None
    #: True: reachable only from server-side code (``django_rivet.actors``,
    #: ``ctx.actors``, schedules, queues, workflows); HTTP, WebSocket and
    #: RivetKit routes answer as if no such actor existed.
    server_only: ClassVar[bool] = False
    #: False: HTTP, WebSocket and RivetKit clients may call actors of this
    #: class that exist but never create one (``actor/forbidden``); only
    #: server-side code does. For actors whose creation sets up recurring
    #: work (cron jobs, schedules) or costs storage: otherwise each new key
    #: an anonymous client names creates one.
    create_from_clients: ClassVar[bool] = True

    # Per-actor limits; None keeps the project-wide default.
    #: Seconds an invocation may run (default ``ACTION_TIMEOUT``).
    action_timeout: ClassVar[float | None] = None
    #: Unprocessed queue messages the actor may hold (default 1000).
    queue_max_pending: ClassVar[int | None] = None
    #: Bytes of one queue message body, CBOR-encoded (default 64 KiB).
    queue_max_message_bytes: ClassVar[int | None] = None

    # Typed, versioned state (docs/types.md).
    #: The class of ``ctx.state`` (a dataclass or pydantic model), stored as
    #: its fields; None: any value of the domain, as it is.
    state_type: ClassVar[Any] = None
    #: The version of the state's shape; raise it with a ``migrate_state``.
    state_version: ClassVar[int] = 1
    #: Declared events, ``{"message": Message}`` (a tuple of types for several
    #: arguments): broadcast arguments are converted, clients get the types.
    events: ClassVar[dict[str, Any]] = {}

    actions: ClassVar[dict[str, HandlerSpec]] = {}
    queue_handlers: ClassVar[dict[str, HandlerSpec]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "abstract" not in cls.__dict__:
            cls.abstract = False
        if "name" not in cls.__dict__:
            cls.name = default_name(cls)
        for option in _LIMIT_OPTIONS:
            _check_positive(f"{cls.__name__}.{option}", getattr(cls, option))
        _check_definition(cls)
        actions: dict[str, HandlerSpec] = {}
        queues: dict[str, HandlerSpec] = {}
        for klass in reversed(cls.__mro__):
            for attribute, value in vars(klass).items():
                function = value
                if isinstance(value, staticmethod | classmethod):
                    continue
                if hasattr(function, _ACTION_MARK):
                    wire = getattr(function, _ACTION_MARK)
                    actions = {
                        k: v for k, v in actions.items() if v.attribute != attribute
                    }
                    actions[wire] = _spec(attribute, function, wire)
                if hasattr(function, _QUEUE_MARK):
                    queue = getattr(function, _QUEUE_MARK)
                    queues[queue] = _spec(attribute, function, queue)
        cls.actions = actions
        cls.queue_handlers = queues
        defined_classes.append(cls)

    # -- state ------------------------------------------------------------
    def create_state(self, ctx: ActorContext, input: Any) -> Any:
        """Return the initial state (default: a deep copy of initial_state)."""
        return copy.deepcopy(self.initial_state)

    def migrate_state(self, ctx: ActorContext, state: Any, from_version: int) -> Any:
        """Return ``state``, stored by version ``from_version``, in today's shape.

        Runs once per actor, when an invocation first loads a state older
        than ``state_version``, in that invocation's transaction. ``state``
        is the stored value as it is (maps, lists...); return a
        ``state_type`` instance or a value that converts to one.
        """
        raise NotImplementedError(
            f"{type(self).__name__} stores version {self.state_version} states "
            f"but has no migrate_state for version {from_version}"
        )

    # -- lifecycle hooks (no-ops unless overridden) -----------------------
    def on_create(self, ctx: ActorContext, input: Any) -> object:
        """Run once, after the state exists."""

    def on_wake(self, ctx: ActorContext) -> object:
        """Run each time a process loads the actor."""

    def on_sleep(self, ctx: ActorContext) -> object:
        """Run (best effort) when a process evicts the actor."""

    def on_destroy(self, ctx: ActorContext) -> object:
        """Run when the actor is destroyed."""

    def on_state_change(self, ctx: ActorContext, state: Any) -> object:
        """Run after an invocation changed the state."""

    def on_auth(self, ctx: ActorContext, info: AuthInfo) -> object:
        """Allow (None/True) or refuse (False, or raise) an external call.

        Runs for every HTTP and WebSocket action, connect, queue send, raw
        request and actor lookup, before the actor is created or woken
        (``ctx.state`` is None for an actor that does not exist yet).
        """

    def on_before_connect(self, ctx: ActorContext, params: Any) -> object:
        """Raise to refuse a WebSocket connection."""

    def can_subscribe(self, ctx: ActorContext, event: str) -> object:
        """Return False or raise to refuse a connection's subscription to ``event``."""
        return True

    def create_conn_state(self, ctx: ActorContext, params: Any) -> Any:
        """Return the initial persisted state of a new connection."""
        return None

    def on_connect(self, ctx: ActorContext, conn: Conn) -> object:
        """Run after a connection is accepted."""

    def on_disconnect(self, ctx: ActorContext, conn: Conn) -> object:
        """Run after a connection went away."""

    def on_request(self, ctx: ActorContext, request: HttpRequest) -> object:
        """Answer a raw HTTP request with an ``HttpResponse``."""
        raise ActionNotFound("This actor does not handle raw requests")

    def on_websocket(self, ctx: ActorContext, websocket: WebSocket) -> object:
        """Take a raw WebSocket: add its message listeners (docs/actors.md).

        Runs once the socket is admitted (``on_auth``, ``on_before_connect``,
        ``create_conn_state``, ``on_connect``), in the same invocation.
        """
        raise ActionNotFound("This actor does not handle raw WebSockets")

    @classmethod
    def overrides(cls, hook: str) -> bool:
        """Tell whether the class overrides the hook ``hook`` of Actor."""
        return getattr(cls, hook) is not getattr(Actor, hook)


# What a subclass must not shadow with an action or a queue handler: every
# attribute Actor defines (``name``, ``actions``, the lifecycle hooks...).
# A method named ``name`` replaces the registered name with a function; a
# hook marked as an action would run both as the hook and for any client.
_RESERVED = frozenset(
    attribute for attribute in vars(Actor) if not attribute.startswith("_")
)
# Wire names that read like a hook: a client calling "on_wake" should never
# be able to believe it runs the hook.
_HOOKS = frozenset(
    attribute
    for attribute, value in vars(Actor).items()
    if callable(value) and not attribute.startswith("_") and attribute != "overrides"
)


def _check_definition(cls: type[Actor]) -> None:
    """Raise :class:`ActorDefinitionError` for what cannot work in ``cls``."""
    where = f"{cls.__module__}.{cls.__qualname__}"
    for kind, mark, decorator in (
        ("action", _ACTION_MARK, "action"),
        ("queue handler", _QUEUE_MARK, "queue_handler"),
    ):
        seen: dict[str, str] = {}
        for attribute, value in vars(cls).items():
            wire = getattr(value, mark, None)
            if wire is None:
                continue
            if attribute in _HOOKS:
                raise ActorDefinitionError(
                    f"{where}.{attribute} is the lifecycle hook "
                    f"Actor.{attribute} and is marked @{decorator}: clients "
                    "could call the hook. Remove the decorator, or move the "
                    f"{kind} to a method of its own."
                )
            if attribute in _RESERVED:
                raise ActorDefinitionError(
                    f"The {kind} {where}.{attribute} replaces Actor.{attribute}, "
                    "which django-rivet needs. Give the method another name; "
                    "clients can keep calling it by this one: "
                    f"`@{decorator}({_wire_argument(mark, attribute)}) "
                    f"def {attribute}_(self, ctx, ...)`."
                )
            if mark == _ACTION_MARK and wire in _HOOKS:
                raise ActorDefinitionError(
                    f"The action {where}.{attribute} is named {wire!r}, the "
                    "name of a lifecycle hook: a client calling it would seem "
                    "to run the hook. Give the action another name."
                )
            if wire in seen:
                raise ActorDefinitionError(
                    f"The {kind}s {where}.{seen[wire]} and {where}.{attribute} "
                    f"both have the name {wire!r}: the second would silently "
                    "replace the first. Give one of them another name."
                )
            seen[wire] = attribute
    if not isinstance(cls.name, str):
        raise ActorDefinitionError(
            f"{where}.name is {cls.name!r}, not a string. An actor's `name` is "
            "the name it is registered and called by; did a method or an "
            "attribute named `name` replace it?"
        )


def _wire_argument(mark: str, wire: str) -> str:
    return f"name={wire!r}" if mark == _ACTION_MARK else repr(wire)
