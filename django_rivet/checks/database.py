"""The database django-rivet's models are routed to (rivet.E401-E403, W401).

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

import sys
from typing import Any

from django.apps import apps
from django.core.checks import Tags, register
from django.core.management.commands.migrate import Command as MigrateCommand
from django.db import DatabaseError, connections, router
from django.db.migrations.executor import MigrationExecutor

from ..models import db, sql
from .base import message

# -- the database ----------------------------------------------------------------------
E401 = (
    "django-rivet's database {alias!r} uses the {vendor!r} backend, which it "
    "does not support."
)
E401_HINT = (
    "Use PostgreSQL (production) or SQLite (development and tests) for the "
    "alias DATABASE_ROUTERS give django_rivet's models."
)
E402 = (
    "django-rivet's database {alias!r} is SQLite {version}; django-rivet needs "
    "3.35 or later (UPDATE ... RETURNING)."
)
E402_HINT = (
    "Upgrade the SQLite library Python links against (or use a Python build "
    "that ships a newer one)."
)
E403 = "Database routers put django-rivet's models on several databases: {routes}."
E403_HINT = (
    "Route every django_rivet model to one alias, for reads and writes alike "
    "(no read replica): an invocation's lock, state, KV, schedules, events and "
    "workflow rows must share one transaction."
)
W401 = (
    "django-rivet's database {alias!r} lacks migrations {names}: its tables "
    "are missing or out of date, and every call will fail."
)
W401_HINT = "Run `manage.py migrate` (add --database {alias} for a routed alias)."


@register(Tags.compatibility)
def check_database(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check the database django-rivet's models are routed to."""
    errors: list[Any] = []
    routes = _model_routes()
    if len(set(routes.values())) > 1:
        described = ", ".join(
            f"{model} -> {alias}" for model, alias in sorted(routes.items())
        )
        text = E403.format(routes=described)
        errors.append(
            message("rivet.E403", text, E403_HINT, "settings.DATABASE_ROUTERS")
        )
    alias = db.alias()
    connection = connections[alias]
    where = f"settings.DATABASES[{alias!r}]"
    if not sql.supports(connection.vendor):
        text = E401.format(alias=alias, vendor=connection.vendor)
        errors.append(message("rivet.E401", text, E401_HINT, where))
    else:
        version = sql.dialect(connection).too_old()
        if version is not None:
            text = E402.format(alias=alias, version=".".join(str(n) for n in version))
            errors.append(message("rivet.E402", text, E402_HINT, where))
    return errors


def _model_routes() -> dict[str, str]:
    """Return ``"<model> read|write" -> alias`` for every django_rivet model."""
    routes: dict[str, str] = {}
    for model in apps.get_app_config("django_rivet").get_models():
        name = model._meta.label
        routes[f"{name} write"] = router.db_for_write(model)
        routes[f"{name} read"] = router.db_for_read(model)
    return routes


@register(Tags.database)
def check_migrations(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[Any]:
    """Warn when django-rivet's migrations are not all applied (``--database``)."""
    alias = db.alias()
    if not databases or alias not in databases or _run_by_migrate():
        return []
    try:
        executor = MigrationExecutor(connections[alias])
        targets = [
            node
            for node in executor.loader.graph.leaf_nodes()
            if node[0] == "django_rivet"
        ]
        plan = executor.migration_plan(targets)
    except DatabaseError:  # unreachable: other checks and commands say so
        return []
    missing = [migration.name for migration, backwards in plan if not backwards]
    if not missing:
        return []
    text = W401.format(alias=alias, names=", ".join(missing))
    hint = W401_HINT.format(alias=alias)
    return [message("rivet.W401", text, hint, f"settings.DATABASES[{alias!r}]")]


def _run_by_migrate() -> bool:
    """Tell whether the ``migrate`` command runs these checks.

    ``migrate`` runs the database checks before it applies the migrations
    (with the same arguments as ``check --database``), so on a new database
    rivet.W401 would tell people to run the very command they are running.
    Django passes checks no hint of the command, so look for it on the stack.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if isinstance(frame.f_locals.get("self"), MigrateCommand):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False
