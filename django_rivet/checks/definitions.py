"""Actor and workflow definitions, checked at start-up (rivet.E103, E104, W101,
W102, W103, E202, E203, E204, E205, W201, W202).

Mistakes that otherwise surface only when the code is first called, with an
error that does not point at the definition: an action that cannot take
``ctx``, a workflow written as ``def`` instead of ``async def``, and two
names that differ only by case. Messages are module constants so tests
compare them by equality.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from django.apps import apps
from django.core.checks import Tags, register

from ..actors import registry
from ..actors.definition import HandlerSpec
from ..conf import docs_url
from ..workflows import registry as workflow_registry
from .base import message

E103 = "{kind} {name!r} of {cls} cannot take the context: {signature}."
E103_HINT = (
    "django-rivet calls it as {attribute}(self, ctx, *args): add `ctx` as its "
    "first parameter after `self`. See {docs}"
)
W102 = (
    "{kind} {name!r} of {cls} names its second parameter {param!r}; "
    "django-rivet passes the context there: {signature}."
)
W102_HINT = (
    "Add `ctx` after `self` ({attribute}(self, ctx, ...)), or name the "
    "parameter `ctx` if it is the context. See {docs}"
)
W101 = "Actor names {names} differ only by case."
W101_HINT = (
    "Names are case-sensitive: a caller using one gets the other's actor or "
    "actor/not_found. Rename one of {classes}."
)
E202 = "Workflow {name!r} ({function}) is not an async function."
E202_HINT = (
    "Write it as `async def {short}(ctx, input):`: the engine awaits it and "
    "each ctx.step/sleep/messages call. See {docs}"
)
E203 = "Workflow {name!r} ({function}) cannot be called as (ctx, input): {signature}."
E203_HINT = "Give it the parameters (ctx, input). See {docs}"
E205 = (
    "The can_read_stream of workflow {name!r} ({function}) cannot be called as "
    "(request, workflow_id, key): {signature}."
)
E205_HINT = (
    "Every reader of its streams over HTTP would be refused (403). Give it the "
    "parameters (request, workflow_id, key). See {docs}"
)
E104 = "Actor {cls} could not be checked: {error}"
E104_HINT = (
    "django-rivet could not read this class's definition; its actions would "
    "fail the same way when called. See {docs}"
)
W103 = (
    "Actor class {cls} is defined but not registered: calls to {name!r} "
    "answer actor/not_found."
)
W103_HINT = (
    "django-rivet registers the Actor classes defined in or imported into an "
    "installed app's actors.py: import it there, or decorate it with "
    "@django_rivet.actors.registry.register. See {docs}"
)
W202 = (
    "Workflow {name!r} ({function}) is defined but not registered: starting it "
    "answers workflow/not_found."
)
W202_HINT = (
    "django-rivet registers the @workflow definitions found at module level in "
    "an installed app's workflows.py or actors.py: import it there, or call "
    "django_rivet.workflows.registry.register on it. See {docs}"
)
E204 = "Workflow {name!r} could not be checked: {error}"
E204_HINT = "Define it with @workflow on an `async def name(ctx, input)`. See {docs}"
W201 = "Workflow names {names} differ only by case."
W201_HINT = "Names are case-sensitive: rename one of {functions}."

# Names a context parameter goes by; anything else in that place is most
# likely an argument that slid into it (a forgotten `ctx`).
CONTEXT_NAMES = frozenset({"ctx", "context", "_ctx", "_"})
_POSITIONAL = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
)


@register(Tags.compatibility)
def check_actor_definitions(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check actions and queue handlers take ``ctx``, and names clash by case."""
    messages: list[Any] = []
    classes = registry.all_actors()
    docs = docs_url("actors")
    for cls in classes.values():
        try:
            messages += _check_actor(cls, docs)
        except Exception as error:  # a check reports; it never crashes
            text = E104.format(cls=_describe(registry.describe, cls), error=error)
            hint = E104_HINT.format(docs=docs)
            messages.append(message("rivet.E104", text, hint, cls))
    for names in _case_clashes(classes):
        text = W101.format(names=_quoted(names))
        described = ", ".join(registry.describe(classes[n]) for n in names)
        hint = W101_HINT.format(classes=described)
        messages.append(message("rivet.W101", text, hint, classes[names[-1]]))
    return messages


@register(Tags.compatibility)
def check_unregistered(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Warn about actors and workflows of the project's apps nobody registered."""
    messages: list[Any] = []
    for cls in registry.unregistered():
        if _in_installed_app(cls.__module__):
            text = W103.format(cls=registry.describe(cls), name=cls.name)
            hint = W103_HINT.format(docs=docs_url("actors"))
            messages.append(message("rivet.W103", text, hint, cls))
    for definition in workflow_registry.unregistered():
        function = workflow_registry.describe(definition)
        if _in_installed_app(getattr(definition.fn, "__module__", "")):
            text = W202.format(name=definition.name, function=function)
            hint = W202_HINT.format(docs=docs_url("workflows"))
            messages.append(message("rivet.W202", text, hint, function))
    return messages


def _in_installed_app(module: str) -> bool:
    # Definitions of test modules and libraries are registered by hand (or
    # temporarily); those of the project's own apps are meant to be found.
    return any(
        module == config.name or module.startswith(config.name + ".")
        for config in apps.get_app_configs()
        if config.name != "django_rivet"
    )


def _check_actor(cls: Any, docs: str) -> list[Any]:
    handlers = [("Action", spec) for spec in cls.actions.values()]
    handlers += [("Queue handler", spec) for spec in cls.queue_handlers.values()]
    messages: list[Any] = []
    for kind, spec in handlers:
        messages += _check_handler(kind, spec, registry.describe(cls), docs)
    return messages


def _describe(describe: Callable[[Any], str], item: Any) -> str:
    try:
        return describe(item)
    except Exception:
        return repr(item)


def _check_handler(kind: str, spec: HandlerSpec, cls: str, docs: str) -> list[Any]:
    parameters = list(spec.signature.parameters.values())
    positional = [p for p in parameters if p.kind in _POSITIONAL]
    takes_more = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters)
    fields = {
        "kind": kind,
        "name": spec.wire_name,
        "cls": cls,
        "signature": f"{spec.attribute}{spec.signature}",
    }
    hint_fields = {"attribute": spec.attribute, "docs": docs}
    obj = f"{cls}.{spec.attribute}"
    if len(positional) < 2 and not takes_more:
        text = E103.format(**fields)
        return [message("rivet.E103", text, E103_HINT.format(**hint_fields), obj)]
    if len(positional) >= 2 and positional[1].name not in CONTEXT_NAMES:
        text = W102.format(param=positional[1].name, **fields)
        return [message("rivet.W102", text, W102_HINT.format(**hint_fields), obj)]
    return []


@register(Tags.compatibility)
def check_workflow_definitions(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check workflow functions are ``async def (ctx, input)``; names by case."""
    messages: list[Any] = []
    definitions = workflow_registry.all_workflows()
    docs = docs_url("workflows")
    for name, definition in definitions.items():
        try:
            messages += _check_workflow(name, definition, docs)
        except Exception as error:  # a check reports; it never crashes
            text = E204.format(name=name, error=error)
            where = _describe(workflow_registry.describe, definition)
            messages.append(
                message("rivet.E204", text, E204_HINT.format(docs=docs), where)
            )
    for names in _case_clashes(definitions):
        text = W201.format(names=_quoted(names))
        functions = [workflow_registry.describe(definitions[n]) for n in names]
        hint = W201_HINT.format(functions=", ".join(functions))
        messages.append(message("rivet.W201", text, hint, functions[-1]))
    return messages


def _check_workflow(name: str, definition: Any, docs: str) -> list[Any]:
    messages: list[Any] = []
    function = workflow_registry.describe(definition)
    fn = definition.fn
    if not _is_async(fn):
        short = getattr(fn, "__name__", name)
        text = E202.format(name=name, function=function)
        hint = E202_HINT.format(short=short, docs=docs)
        messages.append(message("rivet.E202", text, hint, function))
        return messages
    signature = _signature(fn)
    if signature is not None and not _accepts(signature, 2):
        text = E203.format(name=name, function=function, signature=signature)
        hint = E203_HINT.format(docs=docs)
        messages.append(message("rivet.E203", text, hint, function))
    hook = getattr(definition, "can_read_stream", None)
    hook_signature = None if hook is None else _signature(hook)
    if hook_signature is not None and not _accepts(hook_signature, 3):
        text = E205.format(name=name, function=function, signature=hook_signature)
        hint = E205_HINT.format(docs=docs)
        messages.append(message("rivet.E205", text, hint, function))
    return messages


def _is_async(fn: Callable[..., Any]) -> bool:
    # A callable object counts when its __call__ is a coroutine function.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004
    )


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # builtins and some C callables
        return None


def _accepts(signature: inspect.Signature, count: int) -> bool:
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(repr(name) for name in names)


def _case_clashes(names: Iterable[str]) -> list[list[str]]:
    """Return the groups of names equal but for case, each sorted."""
    groups: dict[str, list[str]] = defaultdict(list)
    for name in names:
        if isinstance(name, str):  # anything else is reported by another check
            groups[name.casefold()].append(name)
    return sorted(sorted(group) for group in groups.values() if len(group) > 1)
