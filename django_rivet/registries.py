"""A name -> definition registry, shared by actors and workflows.

Definitions found by autodiscovery that clash with one already registered
are kept in :attr:`NameRegistry.conflicts` for a system check, instead of
crashing startup; explicit :meth:`NameRegistry.register` calls raise
:class:`~django_rivet.exceptions.AlreadyRegistered`. Pure Python.
"""

from __future__ import annotations

import contextlib
import difflib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, Protocol, TypeVar

from .exceptions import AlreadyRegistered, NotRegistered

__all__ = ["NameRegistry", "NotFound", "did_you_mean", "unknown_name"]

T = TypeVar("T")


class NotFound(Protocol):
    """Build the coded error for an unknown name (with a suggestion, if any)."""

    def __call__(self, name: str, suggestion: str | None = None) -> Exception: ...


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """Return the registered name ``name`` was probably meant to be, or None.

    The same name in another case first (the class name ``"Counter"`` for
    the actor ``"counter"``), then the same letters without ``_`` and ``-``
    (``"chat_room"`` for ``"chatRoom"``), then a close spelling.
    """
    names = sorted(candidates)
    for transform in (str.casefold, _squashed):
        wanted = transform(name)
        for candidate in names:
            if transform(candidate) == wanted:
                return candidate
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.8)
    return close[0] if close else None


def unknown_name(kind: str, name: str, suggestion: str | None) -> str:
    """Return the message for an unknown name, with its suggestion if any."""
    message = f"Unknown {kind} {name!r}"
    return f"{message}; did you mean {suggestion!r}?" if suggestion else message


def _squashed(name: str) -> str:
    return name.replace("_", "").replace("-", "").casefold()


class NameRegistry(Generic[T]):
    """Definitions by name, thread-safe, with conflicts kept for checks."""

    def __init__(
        self,
        kind: str,
        name_of: Callable[[T], str],
        describe: Callable[[T], str],
        not_found: NotFound,
    ) -> None:
        self.kind = kind
        self.name_of = name_of
        self.describe = describe
        self.not_found = not_found
        self.items: dict[str, T] = {}
        # (name, registered definition, rejected definition) from discovery.
        self.conflicts: list[tuple[str, T, T]] = []
        self._lock = threading.Lock()

    def register(self, item: T) -> T:
        """Register ``item`` under its name; the same item again is a no-op."""
        name = self.name_of(item)
        with self._lock:
            existing = self.items.get(name)
            if existing is not None and existing != item:
                raise AlreadyRegistered(
                    f"{self.kind} name {name!r} is already registered by "
                    f"{self.describe(existing)}"
                )
            self.items[name] = item
        return item

    def register_discovered(self, item: T) -> None:
        """Register ``item``, recording a clash in :attr:`conflicts`."""
        try:
            self.register(item)
        except AlreadyRegistered:
            name = self.name_of(item)
            conflict = (name, self.items[name], item)
            if conflict not in self.conflicts:
                self.conflicts.append(conflict)

    def unregister(self, name: str) -> None:
        """Remove the registration of ``name``."""
        with self._lock:
            if self.items.pop(name, None) is None:
                raise NotRegistered(f"No {self.kind.lower()} is registered as {name!r}")

    def lookup(self, name: str) -> T:
        """Return the item registered as ``name`` or raise NotRegistered."""
        try:
            return self.items[name]
        except KeyError:
            raise NotRegistered(
                f"No {self.kind.lower()} is registered as {name!r}"
            ) from None

    def get(self, name: str, *, visible: Callable[[T], bool] | None = None) -> T:
        """Return the item registered as ``name`` or raise the coded not-found.

        The error suggests a registered name close to ``name``, among the
        items ``visible`` accepts (all of them by default).
        """
        try:
            return self.items[name]
        except KeyError:
            pass
        candidates = [
            key
            for key, item in self.snapshot().items()
            if visible is None or visible(item)
        ]
        raise self.not_found(name, did_you_mean(name, candidates))

    def snapshot(self) -> dict[str, T]:
        """Return a copy of the registrations."""
        return dict(self.items)

    @contextlib.contextmanager
    def temporarily(self, *items: T) -> Iterator[None]:
        """Register ``items`` for the block; restore what they replaced (tests)."""
        saved = {
            self.name_of(item): self.items.get(self.name_of(item)) for item in items
        }
        with self._lock:
            for item in items:
                self.items[self.name_of(item)] = item
        try:
            yield
        finally:
            with self._lock:
                for name, previous in saved.items():
                    if previous is None:
                        self.items.pop(name, None)
                    else:
                        self.items[name] = previous
