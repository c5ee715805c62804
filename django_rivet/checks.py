"""System checks of django-rivet (documented in docs/checks.md).

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

from channels.layers import channel_layers
from django.apps import apps
from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import DatabaseError, connections, router
from django.db.migrations.executor import MigrationExecutor
from django.utils.module_loading import import_string

from . import dispatch
from .actors import registry
from .actors.definition import NAME_MAX_LENGTH, NAME_PATTERN
from .conf import DEFAULTS, rivet_settings
from .models import db
from .scheduling.cron import MAX_HISTORY_LIMIT
from .transport.origins import normalize_origin
from .workflow_runtime import registry as workflow_registry

E001 = "Unknown RIVET setting {key!r}."
E001_HINT = "Valid settings: {valid}."
E002 = "django-rivet needs 'channels' in INSTALLED_APPS."
E002_HINT = "Add 'daphne' and 'channels' to INSTALLED_APPS."
E003 = "RIVET['CHANNEL_LAYER'] names {alias!r}, which CHANNEL_LAYERS does not define."
E003_HINT = (
    "Define CHANNEL_LAYERS = {{{alias!r}: {{'BACKEND': "
    "'channels.layers.InMemoryChannelLayer'}}}} for development "
    "('channels_redis.core.RedisChannelLayer' with CONFIG hosts in production), "
    "or change RIVET['CHANNEL_LAYER']. See docs/quickstart.md."
)
E004 = "RIVET[{key!r}] must be {expected}."
E004_HINT = "See docs/settings.md for the default and meaning of each setting."
E101 = "Actor name {name!r} is defined by both {first} and {second}."
E101_HINT = "Give one of the classes a different `name`."
E102 = "Actor name {name!r} of {cls} is invalid."
E102_HINT = (
    "Names are 1-64 characters: a letter, then letters, digits, '_', '-' or '.'."
)
E005 = "RIVET['CORS_ALLOWED_ORIGINS'] entry {origin!r} is not an origin."
E005_HINT = (
    "List each frontend origin as scheme://host[:port] (no path, no wildcard: "
    "credentials are allowed, so '*' would let any site act as the user)."
)
W001 = "The channel layer {alias!r} is in-memory: broadcasts do not cross processes."
W001_HINT = "Use channels_redis.core.RedisChannelLayer in production."
W002 = "Celery runs tasks eagerly: schedules and workflow sleeps ignore their ETA."
W002_HINT = "Unset CELERY_TASK_ALWAYS_EAGER in production."
W003 = "RIVET['EMBEDDED_WORKER'] is on: the web process runs schedules and workflows."
W003_HINT = "Run Celery workers (with beat for rivet.sweep) and turn it off."
W004 = (
    "Nothing dispatches due work in this process: Celery has no broker and "
    "RIVET['EMBEDDED_WORKER'] is off."
)
W004_HINT = (
    "For development set RIVET['EMBEDDED_WORKER'] = True; in production "
    "configure Celery (CELERY_BROKER_URL and the project's celery.py). "
    "Otherwise schedules, queues and workflows wait for a sweep by another "
    "process. Set RIVET['DISPATCH_BACKEND'] = 'none' to silence this."
)

_POSITIVE_NUMBERS = (
    "ACTION_TIMEOUT",
    "SLEEP_TIMEOUT",
    "SWEEP_INTERVAL",
    "WORKFLOW_LEASE_SECONDS",
    "WORKFLOW_POLL_INTERVAL",
    "EVENT_CHECK_INTERVAL",
    "SLOW_CONSUMER_TIMEOUT",
)
_POSITIVE_INTEGERS = (
    "MAX_INCOMING_MESSAGE_BYTES",
    "MAX_HTTP_BODY_BYTES",
    "MAX_OUTGOING_MESSAGE_BYTES",
    "EVENT_LOG_SIZE",
    "MAX_STATE_BYTES",
    "MAX_EVENT_BYTES",
    "CONNECTIONS_PER_PROCESS",
    "ACTOR_CACHE_SIZE",
)
_BOOLEANS = ("EXPOSE_ERRORS", "EMBEDDED_WORKER", "KV_ATOMIC_FLUSH")


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check the RIVET dict: unknown keys and value types."""
    errors: list[Any] = []
    valid = ", ".join(sorted(DEFAULTS))
    for key in rivet_settings.unknown_keys():
        errors.append(
            Error(
                E001.format(key=key),
                hint=E001_HINT.format(valid=valid),
                obj="settings.RIVET",
                id="rivet.E001",
            )
        )
    user = rivet_settings.user_settings

    def bad(key: str, expected: str) -> None:
        errors.append(
            Error(
                E004.format(key=key, expected=expected),
                hint=E004_HINT,
                obj="settings.RIVET",
                id="rivet.E004",
            )
        )

    for key in _POSITIVE_NUMBERS:
        value = user.get(key, DEFAULTS[key])
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            bad(key, "a positive number")
    for key in _POSITIVE_INTEGERS:
        value = user.get(key, DEFAULTS[key])
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            bad(key, "a positive integer")
    for key in _BOOLEANS:
        if not isinstance(user.get(key, DEFAULTS[key]), bool):
            bad(key, "True or False")
    lock_timeout = user.get("LOCK_TIMEOUT", DEFAULTS["LOCK_TIMEOUT"])
    if lock_timeout is not None and (
        isinstance(lock_timeout, bool)
        or not isinstance(lock_timeout, int | float)
        or not lock_timeout > 0
    ):
        bad("LOCK_TIMEOUT", "None or a positive number of seconds")
    origins = user.get("ALLOWED_ORIGINS")
    if origins is not None and (
        not isinstance(origins, list | tuple)
        or not all(isinstance(o, str) for o in origins)
    ):
        bad("ALLOWED_ORIGINS", "None or a list of origin strings")
    dispatch_backend = user.get("DISPATCH_BACKEND")
    if dispatch_backend is not None and not _importable_backend(dispatch_backend):
        bad(
            "DISPATCH_BACKEND",
            "None, 'celery', 'worker', 'none' or the dotted path of a backend class",
        )
    errors += _check_cors_origins(user.get("CORS_ALLOWED_ORIGINS", []), bad)
    return errors


def _check_cors_origins(origins: Any, bad: Any) -> list[Any]:
    """Check RIVET['CORS_ALLOWED_ORIGINS'] (the RivetKit-client endpoints)."""
    if not isinstance(origins, list | tuple) or not all(
        isinstance(o, str) for o in origins
    ):
        bad("CORS_ALLOWED_ORIGINS", "a list of origin strings")
        return []
    errors = []
    for origin in origins:
        parts = urlsplit(origin)
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or "*" in origin
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
            or parts.username
        ):
            errors.append(
                Error(
                    E005.format(origin=origin),
                    hint=E005_HINT,
                    obj="settings.RIVET",
                    id="rivet.E005",
                )
            )
    return errors


def _importable_backend(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    if value in dispatch.BACKENDS:
        return True
    try:
        import_string(value)
    except ImportError:
        return False
    return True


# -- retention ------------------------------------------------------------------------
E301 = (
    "RIVET[{key!r}] must be None or a number of seconds (or a timedelta) "
    "from 0 to 100 years."
)
E301_HINT = "None keeps rows forever; see docs/settings.md (retention)."
# Longer periods are "forever" anyway, and would overflow date arithmetic.
MAX_RETENTION_SECONDS = 100 * 365 * 86400
E302 = "RIVET['CRON_HISTORY'] must be None or an integer from 0 to {limit}."
E302_HINT = "It is how many runs each cron job keeps; None keeps them all."
W301 = (
    "RIVET['QUEUE_RETENTION'] is shorter than RIVET['ACTION_TIMEOUT']: a sender "
    "waiting for a reply may find its message purged."
)
W301_HINT = "Keep processed queue messages at least as long as senders wait."

RETENTION_SETTINGS = ("WORKFLOW_RETENTION", "SCHEDULE_RETENTION", "QUEUE_RETENTION")


def _seconds(value: Any) -> float | None:
    """Return a retention value in seconds; None if it is not one."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@register(Tags.compatibility)
def check_retention(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check the retention settings and that replies outlive waiting senders."""
    errors: list[Any] = []
    user = rivet_settings.user_settings
    for key in RETENTION_SETTINGS:
        value = user.get(key, DEFAULTS[key])
        seconds = _seconds(value)
        if value is not None and (
            seconds is None or not 0 <= seconds <= MAX_RETENTION_SECONDS
        ):
            errors.append(
                Error(
                    E301.format(key=key),
                    hint=E301_HINT,
                    obj="settings.RIVET",
                    id="rivet.E301",
                )
            )
    history = user.get("CRON_HISTORY", DEFAULTS["CRON_HISTORY"])
    if history is not None and (
        isinstance(history, bool)
        or not isinstance(history, int)
        or not 0 <= history <= MAX_HISTORY_LIMIT
    ):
        errors.append(
            Error(
                E302.format(limit=MAX_HISTORY_LIMIT),
                hint=E302_HINT,
                obj="settings.RIVET",
                id="rivet.E302",
            )
        )
    queue = _seconds(user.get("QUEUE_RETENTION", DEFAULTS["QUEUE_RETENTION"]))
    timeout = _seconds(user.get("ACTION_TIMEOUT", DEFAULTS["ACTION_TIMEOUT"]))
    if queue is not None and timeout is not None and queue < timeout:
        errors.append(
            Warning(W301, hint=W301_HINT, obj="settings.RIVET", id="rivet.W301")
        )
    return errors


@register(Tags.compatibility)
def check_dispatch(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Warn when due work would only run on another process's sweep."""
    if rivet_settings.user_settings.get("DISPATCH_BACKEND") is not None:
        return []
    if dispatch.configured_name() != "none":
        return []
    return [Warning(W004, hint=W004_HINT, obj="settings.RIVET", id="rivet.W004")]


@register(Tags.compatibility)
def check_channels(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check that channels is installed and the channel layer alias exists."""
    errors: list[Any] = []
    if not apps.is_installed("channels"):
        errors.append(
            Error(E002, hint=E002_HINT, obj="settings.INSTALLED_APPS", id="rivet.E002")
        )
    alias = rivet_settings.CHANNEL_LAYER
    layers = getattr(settings, "CHANNEL_LAYERS", None) or {}
    if alias not in layers:
        errors.append(
            Error(
                E003.format(alias=alias),
                hint=E003_HINT.format(alias=alias),
                obj="settings.CHANNEL_LAYERS",
                id="rivet.E003",
            )
        )
    return errors


@register(Tags.compatibility)
def check_actors(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check actor names: valid, and not defined twice."""

    errors: list[Any] = []
    for name, first, second in registry.actors.conflicts:
        errors.append(
            Error(
                E101.format(
                    name=name,
                    first=registry.describe(first),
                    second=registry.describe(second),
                ),
                hint=E101_HINT,
                obj=second,
                id="rivet.E101",
            )
        )
    for name, cls in registry.all_actors().items():
        if len(name) > NAME_MAX_LENGTH or not NAME_PATTERN.match(name):
            errors.append(
                Error(
                    E102.format(name=name, cls=registry.describe(cls)),
                    hint=E102_HINT,
                    obj=cls,
                    id="rivet.E102",
                )
            )
    return errors


@register(Tags.compatibility, deploy=True)
def check_deployment(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Warn about development-only configuration in a deployment."""
    warnings: list[Any] = []
    alias = rivet_settings.CHANNEL_LAYER
    backend = (
        (getattr(settings, "CHANNEL_LAYERS", None) or {})
        .get(alias, {})
        .get("BACKEND", "")
    )
    if backend.endswith("InMemoryChannelLayer"):
        warnings.append(
            Warning(
                W001.format(alias=alias),
                hint=W001_HINT,
                obj="settings.CHANNEL_LAYERS",
                id="rivet.W001",
            )
        )
    if _celery_eager():
        warnings.append(Warning(W002, hint=W002_HINT, obj="celery", id="rivet.W002"))
    if rivet_settings.EMBEDDED_WORKER:
        warnings.append(
            Warning(W003, hint=W003_HINT, obj="settings.RIVET", id="rivet.W003")
        )
    return warnings


def _celery_eager() -> bool:
    if getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False):
        return True
    try:
        from celery import current_app
    except ImportError:  # pragma: no cover - celery is a dependency
        return False
    return bool(current_app.conf.task_always_eager)


# -- workflows (the workflow runtime) --------------------------------------------------
E201 = "Workflow name {name!r} is defined by both {first} and {second}."
E201_HINT = "Give one of the @workflow definitions a different name."


@register(Tags.compatibility)
def check_workflows(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check that no two discovered @workflow definitions share a name."""
    return [
        Error(
            E201.format(
                name=name,
                first=workflow_registry.describe(first),
                second=workflow_registry.describe(second),
            ),
            hint=E201_HINT,
            obj=workflow_registry.describe(second),
            id="rivet.E201",
        )
        for name, first, second in workflow_registry.definitions.conflicts
    ]


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
MIN_SQLITE = (3, 35)
SUPPORTED_VENDORS = ("postgresql", "sqlite")


@register(Tags.compatibility)
def check_database(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check the database django-rivet's models are routed to."""
    errors: list[Any] = []
    routes = _model_routes()
    if len(set(routes.values())) > 1:
        described = ", ".join(
            f"{model} -> {alias}" for model, alias in sorted(routes.items())
        )
        errors.append(
            Error(
                E403.format(routes=described),
                hint=E403_HINT,
                obj="settings.DATABASE_ROUTERS",
                id="rivet.E403",
            )
        )
    alias = db.alias()
    connection = connections[alias]
    if connection.vendor not in SUPPORTED_VENDORS:
        errors.append(
            Error(
                E401.format(alias=alias, vendor=connection.vendor),
                hint=E401_HINT,
                obj=f"settings.DATABASES[{alias!r}]",
                id="rivet.E401",
            )
        )
    elif connection.vendor == "sqlite":
        # The library Django's backend uses (it imports sqlite3 too).
        version = tuple(sqlite3.sqlite_version_info)
        if version < MIN_SQLITE:
            errors.append(
                Error(
                    E402.format(alias=alias, version=".".join(str(n) for n in version)),
                    hint=E402_HINT,
                    obj=f"settings.DATABASES[{alias!r}]",
                    id="rivet.E402",
                )
            )
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
    if not databases or alias not in databases:
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
    return [
        Warning(
            W401.format(alias=alias, names=", ".join(missing)),
            hint=W401_HINT.format(alias=alias),
            obj=f"settings.DATABASES[{alias!r}]",
            id="rivet.W401",
        )
    ]


# -- the edges: origins, limits, dispatch (transport/origins.py, docs/security.md)
E501 = "RIVET['ALLOWED_ORIGINS'] entry {origin!r} is not an origin."
E501_HINT = (
    "List each page origin as scheme://host[:port] (no path, no wildcard "
    "subdomains: put those in CSRF_TRUSTED_ORIGINS, e.g. 'https://*.example.com')."
)
W501 = (
    "RIVET['ALLOWED_ORIGINS'] contains '*': a page on any site can open "
    "WebSockets to your actors with the visitor's cookies."
)
W501_HINT = (
    "Remove '*'. Same-origin pages and CSRF_TRUSTED_ORIGINS are allowed "
    "already; list other frontends' origins explicitly. See docs/security.md."
)


@register(Tags.security)
def check_origins(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check RIVET['ALLOWED_ORIGINS'] and the per-actor connection limit."""
    messages: list[Any] = []
    user = rivet_settings.user_settings
    limit = user.get("MAX_CONNECTIONS_PER_ACTOR", 1)
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0
    ):
        messages.append(
            Error(
                E004.format(
                    key="MAX_CONNECTIONS_PER_ACTOR",
                    expected="None or a positive integer",
                ),
                hint=E004_HINT,
                obj="settings.RIVET",
                id="rivet.E004",
            )
        )
    origins = user.get("ALLOWED_ORIGINS")
    if not isinstance(origins, list | tuple):
        return messages  # None, or a wrong type (rivet.E004)
    for origin in origins:
        if not isinstance(origin, str):
            continue
        if origin == "*":
            messages.append(
                Warning(W501, hint=W501_HINT, obj="settings.RIVET", id="rivet.W501")
            )
        elif normalize_origin(origin) is None or "*" in origin or _has_path(origin):
            messages.append(
                Error(
                    E501.format(origin=origin),
                    hint=E501_HINT,
                    obj="settings.RIVET",
                    id="rivet.E501",
                )
            )
    return messages


def _has_path(origin: str) -> bool:
    parts = urlsplit(origin)
    return parts.path not in ("", "/") or bool(parts.query or parts.fragment)


# -- the channel layer under load (realtime) ------------------------------------------
E601 = "The channel layer {alias!r} cannot be created: {error}"
E601_HINT = (
    "Fix CHANNEL_LAYERS[{alias!r}] (BACKEND path, CONFIG keys). Without a "
    "working layer, events reach other processes' sockets only through the "
    "event log check (EVENT_CHECK_INTERVAL) and conn.send() never arrives."
)
W601 = (
    "The Redis channel layer {alias!r} reads with a socket timeout of {timeout}s, "
    "not above channels_redis' blocking read ({blocking}s)."
)
W601_HINT = (
    "redis-py's default socket_timeout (5 s) equals channels_redis' blocking "
    "read, so idle reads end in timeouts and reconnects. Pass it per host: "
    "'hosts': [{{'address': REDIS_URL, 'socket_timeout': 10}}] "
    "(docs/production.md#the-channel-layer)."
)
W602 = (
    "The Redis channel layer {alias!r} has capacity {capacity}, below "
    "RIVET['CONNECTIONS_PER_PROCESS'] ({expected})."
)
W602_HINT = (
    "channels_redis' capacity is per process: all sockets of one web process "
    "share one Redis list, so a burst of conn.send() or disconnects to more "
    "sockets than the capacity drops the rest. Set CONFIG 'capacity' to at "
    "least the connections one process holds (docs/production.md)."
)
W603 = (
    "RIVET['MAX_EVENT_BYTES'] ({events}) is above "
    "RIVET['MAX_OUTGOING_MESSAGE_BYTES'] ({outgoing}): such events are "
    "accepted but can never be sent."
)
W603_HINT = "Keep MAX_EVENT_BYTES at most MAX_OUTGOING_MESSAGE_BYTES."

REDIS_LAYER = "channels_redis.core.RedisChannelLayer"
# redis-py's socket_timeout default and channels_redis' blocking read.
REDIS_DEFAULT_SOCKET_TIMEOUT = 5.0
REDIS_BLOCKING_READ = 5.0


def _socket_timeouts(hosts: Any) -> list[float | None]:
    """Return the socket timeout each channels_redis host entry reads with."""
    found: list[float | None] = []
    for host in hosts or ["redis://localhost:6379"]:
        value: Any = REDIS_DEFAULT_SOCKET_TIMEOUT
        url = None
        if isinstance(host, str):
            url = host
        elif isinstance(host, dict):
            url = host.get("address")
            if "socket_timeout" in host:
                url, value = None, host["socket_timeout"]
        if isinstance(url, str):
            query = parse_qs(urlsplit(url).query)
            if "socket_timeout" in query:
                value = query["socket_timeout"][-1]
        try:
            found.append(None if value is None else float(value))
        except (TypeError, ValueError):
            found.append(REDIS_DEFAULT_SOCKET_TIMEOUT)
    return found


@register(Tags.compatibility)
def check_channel_layer(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check that the channel layer can be created and is sized for load."""
    errors: list[Any] = []
    event_limit = rivet_settings.MAX_EVENT_BYTES
    outgoing = rivet_settings.MAX_OUTGOING_MESSAGE_BYTES
    if isinstance(event_limit, int) and isinstance(outgoing, int):
        if event_limit > outgoing:
            message = W603.format(events=event_limit, outgoing=outgoing)
            errors.append(
                Warning(message, hint=W603_HINT, obj="settings.RIVET", id="rivet.W603")
            )
    alias = rivet_settings.CHANNEL_LAYER
    layers = getattr(settings, "CHANNEL_LAYERS", None) or {}
    if alias not in layers:
        return errors  # rivet.E003
    try:
        channel_layers.make_backend(alias)
    except Exception as exc:
        errors.append(
            Error(
                E601.format(alias=alias, error=f"{type(exc).__name__}: {exc}"),
                hint=E601_HINT.format(alias=alias),
                obj="settings.CHANNEL_LAYERS",
                id="rivet.E601",
            )
        )
        return errors
    layer = layers[alias]
    if layer.get("BACKEND") != REDIS_LAYER:
        return errors
    config = layer.get("CONFIG") or {}
    for timeout in _socket_timeouts(config.get("hosts")):
        if timeout is not None and timeout <= REDIS_BLOCKING_READ:
            errors.append(
                Warning(
                    W601.format(
                        alias=alias, timeout=timeout, blocking=REDIS_BLOCKING_READ
                    ),
                    hint=W601_HINT,
                    obj="settings.CHANNEL_LAYERS",
                    id="rivet.W601",
                )
            )
            break
    capacity = config.get("capacity", 100)
    expected = rivet_settings.CONNECTIONS_PER_PROCESS
    if isinstance(capacity, int) and isinstance(expected, int) and capacity < expected:
        errors.append(
            Warning(
                W602.format(alias=alias, capacity=capacity, expected=expected),
                hint=W602_HINT,
                obj="settings.CHANNEL_LAYERS",
                id="rivet.W602",
            )
        )
    return errors
