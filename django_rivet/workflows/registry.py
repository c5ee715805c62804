"""The workflow registry: name -> :class:`~django_rivet.engine.WorkflowDefinition`.

``@workflow`` objects defined at module level in an installed app's
``workflows.py`` (or ``actors.py``) are registered by :func:`discover`, which
``AppConfig.ready()`` calls after autodiscovery; anything else is registered
with :func:`register` or, in tests, :func:`register_temporarily`. Two
different definitions with one name are kept in ``definitions.conflicts`` for the
system check ``rivet.E201`` instead of crashing startup.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from typing import Any

from django.conf import settings

from ..engine import WorkflowDefinition
from ..engine import values as engine_values
from ..engine.shapes import workflow_shapes
from ..exceptions import WorkflowNotFound
from ..registries import NameRegistry, unknown_name

__all__ = [
    "all_workflows",
    "discover",
    "get",
    "register",
    "register_temporarily",
    "unregister",
    "unregistered",
]

DISCOVERED_MODULES = ("workflows", "actors")


def describe(definition: WorkflowDefinition) -> str:
    """Return ``module.function`` of a definition, for messages."""
    fn = definition.fn
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"


definitions: NameRegistry[WorkflowDefinition] = NameRegistry(
    "Workflow",
    name_of=lambda definition: definition.name,
    describe=describe,
    not_found=lambda name, suggestion=None: WorkflowNotFound(
        unknown_name("workflow", name, suggestion) + _unregistered_hint(name)
    ),
)


def unregistered(name: str | None = None) -> list[WorkflowDefinition]:
    """Return the ``@workflow`` definitions made in this process but not registered.

    With ``name``, only those of that name.
    """
    registered = definitions.snapshot()
    return [
        definition
        for definition in engine_values.defined
        if (name is None or definition.name == name)
        and definition.name not in registered
    ]


def _unregistered_hint(name: str) -> str:
    """Say why ``name`` is unknown when a definition of it exists (DEBUG only)."""
    if not getattr(settings, "DEBUG", False):
        return ""
    found = unregistered(name)
    if not found:
        return (
            ". Workflows are discovered at module level in the workflows.py "
            "(or actors.py) of each installed app (and registered with "
            "django_rivet.workflows.registry.register)"
        )
    return (
        f". {describe(found[0])} is named {name!r} but is not registered: "
        "django-rivet registers the @workflow definitions found at module "
        "level in an installed app's workflows.py or actors.py. Import it "
        "there, or call django_rivet.workflows.registry.register on it"
    )


def register(definition: WorkflowDefinition) -> WorkflowDefinition:
    """Register ``definition`` under its name; return it.

    Raises :class:`~django_rivet.exceptions.AlreadyRegistered` (a
    ``ValueError``) when another definition already has the name.
    """
    if not isinstance(definition, WorkflowDefinition):
        raise TypeError(f"{definition!r} is not a @workflow definition")
    return definitions.register(definition)


def unregister(name: str) -> None:
    """Remove the definition registered as ``name``."""
    definitions.unregister(name)


def get(name: str) -> WorkflowDefinition:
    """Return the definition registered as ``name`` or raise ``workflow/not_found``."""
    return definitions.get(name)


def typed_output(name: str, output: Any) -> Any:
    """Return a stored output as workflow ``name``'s return annotation declares it."""
    try:
        definition = get(name)
    except WorkflowNotFound:  # not registered here: as stored
        return output
    return workflow_shapes(definition.fn).load_output(output)


def all_workflows() -> dict[str, WorkflowDefinition]:
    """Return a snapshot of the registry."""
    return definitions.snapshot()


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
                    definitions.register_discovered(value)


def register_temporarily(
    *items: WorkflowDefinition,
) -> AbstractContextManager[None]:
    """Register ``items`` for the duration of a ``with`` block (tests).

    A definition already registered under the same name is restored afterwards.
    """
    return definitions.temporarily(*items)
