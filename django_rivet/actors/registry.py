"""The actor registry: name -> Actor subclass.

Classes defined in an installed app's ``actors.py`` are registered by
autodiscovery; anything else is registered with :func:`register` (a
decorator or a plain call) or, in tests, :func:`register_temporarily`.
Conflicts found during autodiscovery are kept for the system checks
(``rivet.E101``) instead of crashing startup.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TypeVar

from ..exceptions import ActorNotFound
from ..registries import NameRegistry, did_you_mean, unknown_name
from . import definition
from .definition import Actor

__all__ = [
    "all_actors",
    "get",
    "get_external",
    "public_actors",
    "lookup",
    "register",
    "register_discovered",
    "register_temporarily",
    "unregister",
]

A = TypeVar("A", bound=type[Actor])


def describe(cls: type[Actor]) -> str:
    """Return ``module.Class`` of an actor class, for messages."""
    return f"{cls.__module__}.{cls.__qualname__}"


actors: NameRegistry[type[Actor]] = NameRegistry(
    "Actor",
    name_of=lambda cls: cls.name,
    describe=describe,
    not_found=lambda name, suggestion=None: ActorNotFound(
        unknown_name("actor", name, suggestion)
    ),
)


def register(cls: A) -> A:
    """Register ``cls`` under ``cls.name``; usable as a class decorator."""
    if not (isinstance(cls, type) and issubclass(cls, Actor)):
        raise TypeError(f"{cls!r} is not an Actor subclass")
    if cls.abstract:
        raise TypeError(f"{cls.__qualname__} is abstract and cannot be registered")
    actors.register(cls)
    return cls


def unregister(name_or_cls: str | type[Actor]) -> None:
    """Remove a registration."""
    actors.unregister(name_or_cls if isinstance(name_or_cls, str) else name_or_cls.name)


def lookup(name: str) -> type[Actor]:
    """Return the class registered as ``name`` or raise ``NotRegistered``."""
    return actors.lookup(name)


def get(name: str, *, external: bool = False) -> type[Actor]:
    """Return the class registered as ``name`` or raise ``actor/not_found``.

    ``external``: the caller came over HTTP or a WebSocket, so the error
    suggests no ``server_only`` name.
    """
    return actors.get(name, visible=_is_public if external else None)


def _is_public(cls: type[Actor]) -> bool:
    return not cls.server_only


def all_actors() -> dict[str, type[Actor]]:
    """Return a snapshot of the registry."""
    return actors.snapshot()


def get_external(name: str) -> type[Actor]:
    """Return the class serving ``name`` to the transports.

    A ``server_only`` class is refused with the very error an unknown name
    gets, so HTTP, WebSocket and RivetKit callers cannot tell it exists.
    """
    cls = get(name, external=True)
    if cls.server_only:
        raise unknown_external(name)
    return cls


def unknown_external(name: str) -> ActorNotFound:
    """Return what an external caller gets for an unknown or server-only name.

    Both get the same message, suggestion included (among public names).
    """
    public = [n for n, cls in actors.snapshot().items() if not cls.server_only]
    return ActorNotFound(unknown_name("actor", name, did_you_mean(name, public)))


def public_actors() -> dict[str, type[Actor]]:
    """Return the classes the transports serve (no ``server_only`` ones)."""
    return {name: cls for name, cls in actors.snapshot().items() if not cls.server_only}


def _is_actors_module(module_name: str) -> bool:
    return module_name == "actors" or module_name.endswith(".actors")


def register_discovered() -> None:
    """Register the concrete classes defined in discovered ``actors`` modules."""
    for cls in definition.defined_classes:
        if not cls.abstract and _is_actors_module(cls.__module__):
            actors.register_discovered(cls)


def register_temporarily(*classes: type[Actor]) -> AbstractContextManager[None]:
    """Register ``classes`` for the duration of a ``with`` block (tests).

    A class already registered under the same name is restored afterwards.
    """
    return actors.temporarily(*classes)
