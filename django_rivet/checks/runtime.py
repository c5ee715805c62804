"""Dispatch, Channels, actor and workflow names, deployment (rivet.E002, E003,
E101, E102, E201, W001-W004; the dispatch backend's own check: W006, E903,
W903).

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import Tags, register

from .. import dispatch
from ..actors import registry
from ..actors.definition import NAME_MAX_LENGTH, NAME_PATTERN
from ..conf import docs_url, rivet_settings
from ..workflows import registry as workflow_registry
from .base import message


@register(Tags.compatibility)
def check_dispatch(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check the chosen dispatch backend, or warn when nothing dispatches."""
    if rivet_settings.raw("DISPATCH_BACKEND") is not None:
        if dispatch.overridden():
            return []
        try:
            chosen = dispatch.backend()
        except ImportError:
            return []  # rivet.E004 names the setting
        check = getattr(chosen, "check", None)  # older custom backends have none
        return list(check()) if check is not None else []
    if rivet_settings.valid("EMBEDDED_WORKER") is None:
        return []  # rivet.E004
    if dispatch.overridden():
        return []  # rivet_worker: this process runs the due work itself
    if dispatch.configured_name() != "none":
        return []
    package = _project_package()
    hint = W004_HINT.format(
        package=package, docs=docs_url("quickstart", "3-urls-asgi-and-celery")
    )
    return [message("rivet.W004", W004.format(cause=_no_dispatch_cause(package)), hint)]


def _no_dispatch_cause(package: str) -> str:
    """Say why Celery has no broker here: not configured, or its app not loaded."""
    if not getattr(settings, "CELERY_BROKER_URL", None):
        return W004_NO_BROKER
    module = package.replace("/", ".") + ".celery"
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return W004_NO_APP.format(package=package)
    return W004_NOT_LOADED.format(package=package)


def _project_package() -> str:
    """Return the folder of the project package (``mysite`` for mysite.settings)."""
    # override_settings hides SETTINGS_MODULE; the environment still has it.
    module = getattr(settings, "SETTINGS_MODULE", None) or os.environ.get(
        "DJANGO_SETTINGS_MODULE", ""
    )
    package, _, _ = module.rpartition(".")
    return package.replace(".", "/") or "<project package>"


@register(Tags.compatibility)
def check_channels(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check that channels is installed and the channel layer alias exists."""
    errors: list[Any] = []
    if not apps.is_installed("channels"):
        errors.append(message("rivet.E002", E002, E002_HINT, "settings.INSTALLED_APPS"))
    alias = rivet_settings.valid("CHANNEL_LAYER")
    layers = getattr(settings, "CHANNEL_LAYERS", None) or {}
    if alias is not None and alias not in layers:
        text = E003.format(alias=alias)
        hint = E003_HINT.format(alias=alias, docs=docs_url("quickstart", "2-settings"))
        errors.append(message("rivet.E003", text, hint, "settings.CHANNEL_LAYERS"))
    return errors


@register(Tags.compatibility)
def check_asgi_server(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Warn when runserver would be Django's WSGI server (no WebSockets).

    Only when this process is ``runserver``: a project served by daphne or
    uvicorn has no use for the warning on ``migrate`` or ``check``.
    """
    if apps.is_installed("daphne") or _command() != "runserver":
        return []
    hint = W005_HINT.format(docs=docs_url("troubleshooting", "websockets-get-404"))
    return [message("rivet.W005", W005, hint, "settings.INSTALLED_APPS")]


def _command() -> str | None:
    """Return the management command this process runs (None: not one)."""
    # Django's checks do not say which command runs them; argv does, for
    # `manage.py <command>`, `django-admin <command>` and `python -m django`.
    return sys.argv[1] if len(sys.argv) > 1 else None


@register(Tags.compatibility)
def check_actors(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check actor names: valid, and not defined twice."""

    errors: list[Any] = []
    for name, first, second in registry.actors.conflicts:
        text = E101.format(
            name=name,
            first=registry.describe(first),
            second=registry.describe(second),
        )
        errors.append(message("rivet.E101", text, E101_HINT, second))
    for name, cls in registry.all_actors().items():
        if (
            not isinstance(name, str)
            or len(name) > NAME_MAX_LENGTH
            or not NAME_PATTERN.match(name)
        ):
            text = E102.format(name=name, cls=registry.describe(cls))
            errors.append(message("rivet.E102", text, E102_HINT, cls))
    return errors


@register(Tags.compatibility, deploy=True)
def check_deployment(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Warn about development-only configuration in a deployment."""
    warnings: list[Any] = []
    alias = rivet_settings.valid("CHANNEL_LAYER")
    backend = (
        (getattr(settings, "CHANNEL_LAYERS", None) or {})
        .get(alias, {})
        .get("BACKEND", "")
    )
    if backend.endswith("InMemoryChannelLayer"):
        text = W001.format(alias=alias)
        warnings.append(
            message("rivet.W001", text, W001_HINT, "settings.CHANNEL_LAYERS")
        )
    if _celery_eager():
        warnings.append(message("rivet.W002", W002, W002_HINT, "celery"))
    if rivet_settings.valid("EMBEDDED_WORKER"):
        warnings.append(message("rivet.W003", W003, W003_HINT))
    return warnings


def _celery_eager() -> bool:
    if getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False):
        return True
    try:
        from celery import current_app
    except ImportError:  # pragma: no cover - celery is a dependency
        return False
    return bool(current_app.conf.task_always_eager)


E002 = "django-rivet needs 'channels' in INSTALLED_APPS."
E002_HINT = "Add 'daphne' and 'channels' to INSTALLED_APPS."
E003 = "RIVET['CHANNEL_LAYER'] names {alias!r}, which CHANNEL_LAYERS does not define."
E003_HINT = (
    "Define CHANNEL_LAYERS = {{{alias!r}: {{'BACKEND': "
    "'channels.layers.InMemoryChannelLayer'}}}} for development "
    "('channels_redis.core.RedisChannelLayer' with CONFIG hosts in production), "
    "or change RIVET['CHANNEL_LAYER']. See {docs}"
)
E101 = "Actor name {name!r} is defined by both {first} and {second}."
E101_HINT = "Give one of the classes a different `name`."
E102 = "Actor name {name!r} of {cls} is invalid."
E102_HINT = (
    "Names are 1-64 characters: a letter, then letters, digits, '_', '-' or '.'."
)
W001 = "The channel layer {alias!r} is in-memory: broadcasts do not cross processes."
W001_HINT = "Use channels_redis.core.RedisChannelLayer in production."
W002 = "Celery runs tasks eagerly: schedules and workflow sleeps ignore their ETA."
W002_HINT = "Unset CELERY_TASK_ALWAYS_EAGER in production."
W003 = "RIVET['EMBEDDED_WORKER'] is on: the web process runs schedules and workflows."
W003_HINT = "Run Celery workers (with beat for rivet.sweep) and turn it off."
W004 = "Nothing dispatches due work in this process: {cause}"
W004_NO_BROKER = (
    "Celery has no broker (CELERY_BROKER_URL is not set) and "
    "RIVET['EMBEDDED_WORKER'] is off."
)
W004_NO_APP = (
    "CELERY_BROKER_URL is set, but the project has no Celery app "
    "({package}/celery.py), so Celery's default app has no broker."
)
W004_NOT_LOADED = (
    "CELERY_BROKER_URL is set, but {package}/celery.py is not loaded in this "
    "process ({package}/__init__.py does not import it), so Celery's default "
    "app has no broker."
)
W004_HINT = (
    "For development set RIVET['EMBEDDED_WORKER'] = True. In production "
    "configure Celery: CELERY_BROKER_URL, a Celery app in {package}/celery.py, "
    "and import it in {package}/__init__.py (`from .celery import app as "
    "celery_app`) so that every process of the project loads it. Otherwise "
    "schedules, queues and workflows wait for a sweep by another process. Set "
    "RIVET['DISPATCH_BACKEND'] = 'none' to silence this. See {docs}"
)
W005 = (
    "'daphne' is not in INSTALLED_APPS: `manage.py runserver` is Django's "
    "WSGI server, which answers django-rivet's WebSocket routes with 404."
)
W005_HINT = (
    "Add 'daphne' at the top of INSTALLED_APPS (django-rivet installs it): its "
    "runserver serves ASGI_APPLICATION, HTTP and WebSockets. Production "
    "servers (daphne, uvicorn) do not need it; silence this check with "
    "SILENCED_SYSTEM_CHECKS = ['rivet.W005'] if you never use runserver. "
    "See {docs}"
)


# -- workflows (the workflow runtime) --------------------------------------------------
E201 = "Workflow name {name!r} is defined by both {first} and {second}."
E201_HINT = "Give one of the @workflow definitions a different name."


@register(Tags.compatibility)
def check_workflows(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check that no two discovered @workflow definitions share a name."""
    errors: list[Any] = []
    for name, first, second in workflow_registry.definitions.conflicts:
        where = workflow_registry.describe(second)
        text = E201.format(
            name=name, first=workflow_registry.describe(first), second=where
        )
        errors.append(message("rivet.E201", text, E201_HINT, where))
    return errors
