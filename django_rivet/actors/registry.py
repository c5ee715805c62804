"""The actor registry: name -> Actor subclass.

Classes defined in an installed app's ``actors.py``, or imported into it,
are registered by autodiscovery; anything else is registered with
:func:`register` (a decorator or a plain call) or, in tests,
:func:`register_temporarily`. A class that was defined but never
registered is named by the "unknown actor" error (when ``DEBUG`` is on) and
by the system check ``rivet.W103``.
Conflicts found during autodiscovery are kept for the system checks
(``rivet.E101``) instead of crashing startup.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from typing import TypeVar

from django.conf import settings

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
    "unregistered",
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
        unknown_name("actor", name, suggestion) + _unregistered_hint(name)
    ),
)

DISCOVERED_MODULE = "actors"


def unregistered(name: str | None = None) -> list[type[Actor]]:
    """Return the concrete classes defined in this process but not registered.

    With ``name``, only those of that name. (A class is found once its module
    has been imported: by ``actors.py``, a view, a test...)
    """
    registered = actors.snapshot()
    return [
        cls
        for cls in definition.defined_classes
        if not cls.abstract
        and (name is None or cls.name == name)
        and registered.get(cls.name) is not cls
        and not _replaced(cls, registered)
    ]


def _replaced(cls: type[Actor], registered: dict[str, type[Actor]]) -> bool:
    # A subclass registered under the same name stands in for its parent
    # (or a test re-registered another class under that name): not a mistake.
    current = registered.get(cls.name)
    return current is not None and (
        issubclass(current, cls) or issubclass(cls, current)
    )


def _unregistered_hint(name: str) -> str:
    """Say why ``name`` is unknown when a class of that name exists (DEBUG only).

    Only in development: module paths are no business of a production client.
    """
    if not getattr(settings, "DEBUG", False):
        return ""
    found = unregistered(name)
    if not found:
        return (
            ". Actors are discovered in the actors.py module of each installed "
            "app (and registered with django_rivet.actors.registry.register)"
        )
    return (
        f". {describe(found[0])} is named {name!r} but is not registered: "
        "django-rivet registers the Actor classes defined in or imported into "
        "an installed app's actors.py. Import it there, or decorate it with "
        "@django_rivet.actors.registry.register"
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
    return ActorNotFound(
        unknown_name("actor", name, did_you_mean(name, public))
        + _unregistered_hint(name)
    )


def public_actors() -> dict[str, type[Actor]]:
    """Return the classes the transports serve (no ``server_only`` ones)."""
    return {name: cls for name, cls in actors.snapshot().items() if not cls.server_only}


def _is_actors_module(module_name: str) -> bool:
    return module_name == "actors" or module_name.endswith(".actors")


def register_discovered() -> None:
    """Register the concrete classes of discovered ``actors`` modules.

    Those defined in a module named ``actors``, and those an installed app's
    ``actors.py`` imports (a class kept in ``presence.py`` and imported into
    ``actors.py`` counts, as ``admin.py`` imports count for the admin).
    """
    from django.apps import apps

    for cls in definition.defined_classes:
        if not cls.abstract and _is_actors_module(cls.__module__):
            actors.register_discovered(cls)
    for app_config in apps.get_app_configs():
        module = sys.modules.get(f"{app_config.name}.{DISCOVERED_MODULE}")
        if module is None:
            continue
        for value in list(vars(module).values()):
            if (
                isinstance(value, type)
                and issubclass(value, Actor)
                and value is not Actor
                and not value.abstract
            ):
                actors.register_discovered(value)


def register_temporarily(*classes: type[Actor]) -> AbstractContextManager[None]:
    """Register ``classes`` for the duration of a ``with`` block (tests).

    A class already registered under the same name is restored afterwards.
    """
    return actors.temporarily(*classes)
