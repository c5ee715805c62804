"""The workflow registry: name -> :class:`~django_rivet.workflow.WorkflowDefinition`.

``@workflow`` objects defined at module level in an installed app's
``workflows.py`` (or ``actors.py``) are registered by :func:`discover`, which
``AppConfig.ready()`` calls after autodiscovery; anything else is registered
with :func:`register` or, in tests, :func:`register_temporarily`. Two
different definitions with one name are kept in :data:`conflicts` for the
system check ``rivet.E201`` instead of crashing startup.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

from ..exceptions import WorkflowNotFound
from ..workflow import WorkflowDefinition

__all__ = [
    "all_workflows",
    "conflicts",
    "discover",
    "get",
    "register",
    "register_temporarily",
    "unregister",
]

DISCOVERED_MODULES = ("workflows", "actors")

_registry: dict[str, WorkflowDefinition] = {}
_lock = threading.Lock()
# (name, registered definition, rejected definition) found by discovery.
conflicts: list[tuple[str, WorkflowDefinition, WorkflowDefinition]] = []


def describe(definition: WorkflowDefinition) -> str:
    """Return ``module.function`` of a definition, for messages."""
    fn = definition.fn
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"


def register(definition: WorkflowDefinition) -> WorkflowDefinition:
    """Register ``definition`` under its name; return it.

    Raises ``ValueError`` when another definition already has the name.
    """
    if not isinstance(definition, WorkflowDefinition):
        raise TypeError(f"{definition!r} is not a @workflow definition")
    with _lock:
        existing = _registry.get(definition.name)
        if existing is not None and existing != definition:
            raise ValueError(
                f"Workflow name {definition.name!r} is already registered by "
                f"{describe(existing)}"
            )
        _registry[definition.name] = definition
    return definition


def unregister(name: str) -> None:
    """Remove the definition registered as ``name`` (no error when absent)."""
    with _lock:
        _registry.pop(name, None)


def get(name: str) -> WorkflowDefinition:
    """Return the definition registered as ``name`` or raise ``workflow/not_found``."""
    try:
        return _registry[name]
    except KeyError:
        raise WorkflowNotFound(f"Unknown workflow {name!r}") from None


def all_workflows() -> dict[str, WorkflowDefinition]:
    """Return a snapshot of the registry."""
    return dict(_registry)


def discover() -> None:
    """Register the definitions found in installed apps' discovered modules.

    Safe to call twice: finding the same definition again is a no-op.
    """
    from django.apps import apps

    for app_config in apps.get_app_configs():
        for module_name in DISCOVERED_MODULES:
            module = sys.modules.get(f"{app_config.name}.{module_name}")
            if module is None:
                continue
            for value in list(vars(module).values()):
                if isinstance(value, WorkflowDefinition):
                    _register_discovered(value)


def _register_discovered(definition: WorkflowDefinition) -> None:
    try:
        register(definition)
    except ValueError:
        pair = (definition.name, _registry[definition.name], definition)
        if pair not in conflicts:
            conflicts.append(pair)


@contextlib.contextmanager
def register_temporarily(*definitions: WorkflowDefinition) -> Iterator[None]:
    """Register ``definitions`` for the duration of the block (tests).

    A definition already registered under the same name is restored afterwards.
    """
    saved = {d.name: _registry.get(d.name) for d in definitions}
    with _lock:
        for definition in definitions:
            _registry[definition.name] = definition
    try:
        yield
    finally:
        with _lock:
            for name, previous in saved.items():
                if previous is None:
                    _registry.pop(name, None)
                else:
                    _registry[name] = previous
