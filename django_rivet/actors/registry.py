"""The actor registry: name -> Actor subclass.

Classes defined in an installed app's ``actors.py`` are registered by
autodiscovery; anything else is registered with :func:`register` (a
decorator or a plain call) or, in tests, :func:`register_temporarily`.
Conflicts found during autodiscovery are kept for the system checks
(``rivet.E101``) instead of crashing startup.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TypeVar

from ..exceptions import ActorNotFound, AlreadyRegistered, NotRegistered
from . import definition
from .definition import Actor

__all__ = [
    "all_actors",
    "conflicts",
    "get",
    "lookup",
    "register",
    "register_discovered",
    "register_temporarily",
    "unregister",
]

A = TypeVar("A", bound=type[Actor])

_registry: dict[str, type[Actor]] = {}
_lock = threading.Lock()
# (name, registered class, rejected class) found by autodiscovery.
conflicts: list[tuple[str, type[Actor], type[Actor]]] = []


def register(cls: A) -> A:
    """Register ``cls`` under ``cls.name``; usable as a class decorator."""
    if not (isinstance(cls, type) and issubclass(cls, Actor)):
        raise TypeError(f"{cls!r} is not an Actor subclass")
    if cls.abstract:
        raise TypeError(f"{cls.__qualname__} is abstract and cannot be registered")
    with _lock:
        existing = _registry.get(cls.name)
        if existing is not None and existing is not cls:
            raise AlreadyRegistered(
                f"Actor name {cls.name!r} is already registered by "
                f"{existing.__module__}.{existing.__qualname__}"
            )
        _registry[cls.name] = cls
    return cls


def unregister(name_or_cls: str | type[Actor]) -> None:
    """Remove a registration."""
    name = name_or_cls if isinstance(name_or_cls, str) else name_or_cls.name
    with _lock:
        if name not in _registry:
            raise NotRegistered(f"No actor is registered as {name!r}")
        del _registry[name]


def lookup(name: str) -> type[Actor]:
    """Return the class registered as ``name`` or raise :class:`NotRegistered`."""
    try:
        return _registry[name]
    except KeyError:
        raise NotRegistered(f"No actor is registered as {name!r}") from None


def get(name: str) -> type[Actor]:
    """Return the class registered as ``name`` or raise ``actor/not_found``."""
    try:
        return _registry[name]
    except KeyError:
        raise ActorNotFound(f"Unknown actor {name!r}") from None


def all_actors() -> dict[str, type[Actor]]:
    """Return a snapshot of the registry."""
    return dict(_registry)


def _is_actors_module(module_name: str) -> bool:
    return module_name == "actors" or module_name.endswith(".actors")


def register_discovered() -> None:
    """Register the concrete classes defined in discovered ``actors`` modules."""
    for cls in definition.defined_classes:
        if cls.abstract or not _is_actors_module(cls.__module__):
            continue
        try:
            register(cls)
        except AlreadyRegistered:
            pair = (cls.name, _registry[cls.name], cls)
            if pair not in conflicts:
                conflicts.append(pair)


@contextlib.contextmanager
def register_temporarily(*classes: type[Actor]) -> Iterator[None]:
    """Register ``classes`` for the duration of the block (tests).

    A class already registered under the same name is restored afterwards.
    """
    saved = {cls.name: _registry.get(cls.name) for cls in classes}
    with _lock:
        for cls in classes:
            _registry[cls.name] = cls
    try:
        yield
    finally:
        with _lock:
            for name, previous in saved.items():
                if previous is None:
                    _registry.pop(name, None)
                else:
                    _registry[name] = previous
