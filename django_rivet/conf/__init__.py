"""Settings of django-rivet, read through :data:`rivet_settings`.

Projects configure the app with one dict, ``settings.RIVET``. Each key is
declared once, in :data:`SETTINGS`: its default, and the kind of value it
takes (:class:`Kind`: what it accepts, said in words, and the Python type
it is read as). Reads are typed (``rivet_settings.ACTION_TIMEOUT`` is a
``float``), lazy (never at import time) and cached; the cache is dropped on
``setting_changed``, so ``override_settings(RIVET=...)`` works in tests.

A value of the wrong kind is reported by the system checks (``rivet.E004``,
and ``E301``, ``E302``, ``E701``, ``E703``, ``E704``, ``E705`` for
retention, cron history, workflow queues, the live window and the history
cache), with the same sentence
:class:`InvalidSetting` raises if the runtime reads it anyway. Unknown keys
are ``rivet.E001``. The settings page of the documentation (``settings.md``)
says what each key means.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .kinds import (
    ALIAS,
    BACKEND_NAME,
    BOOLEAN,
    CACHE_SIZE,
    CRON_HISTORY,
    DOTTED_PATHS,
    HTTP_URL,
    INCOMING_TRACE,
    IP_NETWORKS,
    LIVE_WAIT,
    MAX_CRON_HISTORY,
    MAX_LIVE_WAIT,
    MAX_RETENTION_SECONDS,
    MAX_RETRIES,
    OPENAPI_ACCESS,
    ORIGINS,
    POSITIVE_INTEGER,
    POSITIVE_NUMBER,
    POSITIVE_SECONDS,
    QUEUES,
    RETENTION,
    RETRIES,
    VERSION,
    Kind,
    optional,
)

__all__ = [
    "DEFAULTS",
    "DEFAULT_DOCS_URL",
    "MAX_CRON_HISTORY",
    "MAX_LIVE_WAIT",
    "MAX_RETENTION_SECONDS",
    "MAX_RETRIES",
    "SETTINGS",
    "InvalidSetting",
    "Kind",
    "RivetSettings",
    "Setting",
    "docs_url",
    "expose_errors",
    "rivet_settings",
]

# Where check hints and error messages send people: the documentation of the
# released versions. Projects that host their own copy (or pin a version)
# set RIVET["DOCS_URL"].
DEFAULT_DOCS_URL = "https://django-rivet.readthedocs.io/en/stable/"


@dataclass(frozen=True, slots=True)
class Setting:
    """One key of ``settings.RIVET``: its default, its kind, the check reporting it."""

    default: Any
    kind: Kind
    check: str = "rivet.E004"


#: Every key of ``settings.RIVET``: its default, the kind of value it takes,
#: and which system check reports a value of another kind. The settings page
#: of the documentation says what each one means.
SETTINGS: dict[str, Setting] = {
    # Seconds an invocation may run before it is rolled back with
    # actor/action_timeout.
    "ACTION_TIMEOUT": Setting(60, POSITIVE_NUMBER),
    # Seconds an actor instance may sit idle in a process before it is evicted
    # (its on_sleep hook runs); ephemeral attributes are rebuilt on next load.
    "SLEEP_TIMEOUT": Setting(30, POSITIVE_NUMBER),
    # Actor instances (with their decoded state) one process keeps cached;
    # beyond it the least recently used are evicted (on_sleep runs).
    "ACTOR_CACHE_SIZE": Setting(10000, POSITIVE_INTEGER),
    # Estimated bytes of decoded state one process keeps cached; beyond it
    # the states of the least recently used actors are dropped at once (they
    # are read from the database again when called).
    "ACTOR_CACHE_BYTES": Setting(256 * 1024 * 1024, POSITIVE_INTEGER),
    # Largest WebSocket frame accepted, checked before decoding.
    "MAX_INCOMING_MESSAGE_BYTES": Setting(65536, POSITIVE_INTEGER),
    # Frames one socket may have received and not yet handled (actions
    # waiting behind the running one), by count and by bytes: a client that
    # sends more ahead of the answers gets request/too_many_frames and the
    # close code 4429, so a flood costs the server at most this much.
    "MAX_PENDING_FRAMES": Setting(1000, POSITIVE_INTEGER),
    "MAX_PENDING_FRAME_BYTES": Setting(1048576, POSITIVE_INTEGER),
    # Largest HTTP request body accepted (bounds `input` too), checked before
    # reading the body.
    "MAX_HTTP_BODY_BYTES": Setting(1048576, POSITIVE_INTEGER),
    # Largest response or frame the server sends.
    "MAX_OUTGOING_MESSAGE_BYTES": Setting(1048576, POSITIVE_INTEGER),
    # When True, internal errors carry the exception text to clients (and
    # configuration errors the names of tables). None: Django's DEBUG.
    # Development only.
    "EXPOSE_ERRORS": Setting(None, optional(BOOLEAN)),
    # Alias in CHANNEL_LAYERS used for broadcasts and connection messages.
    "CHANNEL_LAYER": Setting("default", ALIAS),
    # Seconds between sweeps (lost schedules, expired workflow leases, stale
    # connections). Use it for the Celery beat entry of rivet.sweep.
    "SWEEP_INTERVAL": Setting(5, POSITIVE_NUMBER),
    # Events kept per actor for replay after a reconnect (?since=<seq>).
    "EVENT_LOG_SIZE": Setting(1000, POSITIVE_INTEGER),
    # Largest encoded arguments of one event (ctx.broadcast, conn.send);
    # larger ones fail the handler with actor/event_too_large.
    "MAX_EVENT_BYTES": Setting(262144, POSITIVE_INTEGER),
    # Seconds between two checks of the actors' latest seqs by each web
    # process: events whose channel-layer message was lost reach their
    # sockets (from the event log) within this time.
    "EVENT_CHECK_INTERVAL": Setting(1.0, POSITIVE_NUMBER),
    # Seconds a socket may stay unable to take more data (its client does
    # not read) before it is closed with code 4408; meanwhile it is sent no
    # events and catches up from the log once it reads again.
    "SLOW_CONSUMER_TIMEOUT": Setting(30, POSITIVE_NUMBER),
    # Seconds between two keep-alive comments on an idle Server-Sent Events
    # response, so proxies do not cut it (many cut after 30-60 s of silence).
    "SSE_KEEPALIVE_INTERVAL": Setting(15, POSITIVE_NUMBER),
    # WebSocket connections one web process is sized for; the channel-layer
    # check (rivet.W602) compares channels_redis' capacity with it.
    "CONNECTIONS_PER_PROCESS": Setting(1000, POSITIVE_INTEGER),
    # True: the web process itself fires due schedules/cron/queues and runs
    # workflows (single-process development). A deploy check warns about it.
    "EMBEDDED_WORKER": Setting(False, BOOLEAN),
    # Seconds a worker's claim on a workflow lasts without a heartbeat.
    "WORKFLOW_LEASE_SECONDS": Setting(30, POSITIVE_NUMBER),
    # Seconds; sleeps shorter than this wait in memory instead of yielding.
    "WORKFLOW_POLL_INTERVAL": Setting(0.1, POSITIVE_NUMBER),
    # Seconds a waiting workflow run stays live (0: off); rivet.E703.
    "WORKFLOW_LIVE_WAIT": Setting(0, LIVE_WAIT, "rivet.E703"),
    # Workflow histories one process keeps between runs (0: off), and their
    # bytes; beyond either the least recently used go (rivet.E704, E705).
    "WORKFLOW_CACHE_SIZE": Setting(0, CACHE_SIZE, "rivet.E704"),
    "WORKFLOW_CACHE_BYTES": Setting(64 * 1024 * 1024, POSITIVE_INTEGER, "rivet.E705"),
    # True: a workflow flush is one database transaction (an oversized flush
    # is rejected) instead of chunks of <= 128 writes.
    "KV_ATOMIC_FLUSH": Setting(False, BOOLEAN),
    # What makes due work run promptly: "celery", "worker" (the in-process
    # worker loop), "none" (the sweeper of another process), or a dotted path
    # to a backend class. None: "worker" with EMBEDDED_WORKER, else "celery"
    # when a Celery broker is configured, else "none".
    "DISPATCH_BACKEND": Setting(None, BACKEND_NAME),
    # Origins allowed to open WebSockets, e.g. ["https://app.example.com"].
    # None: derived from ALLOWED_HOSTS.
    "ALLOWED_ORIGINS": Setting(None, optional(ORIGINS)),
    # Origins whose pages may call the RivetKit-client endpoints (metadata,
    # actors, gateway) cross-origin, with credentials, e.g.
    # ["http://localhost:5173"] for a Vite dev server. Empty: no CORS at all.
    "CORS_ALLOWED_ORIGINS": Setting([], ORIGINS),
    # Retention (seconds or a timedelta; None keeps forever). The sweeper
    # deletes what is older in bounded batches; rivet_purge does it on demand.
    # A finished workflow (completed, failed, cancelled) with its history and
    # inbox, this long after it finished.
    "WORKFLOW_RETENTION": Setting(7 * 86400, RETENTION, "rivet.E301"),
    # A fired schedule, this long after it fired.
    "SCHEDULE_RETENTION": Setting(86400, RETENTION, "rivet.E301"),
    # A processed queue message and its reply, this long after processing.
    "QUEUE_RETENTION": Setting(86400, RETENTION, "rivet.E301"),
    # History entries kept per cron job that did not pass max_history.
    "CRON_HISTORY": Setting(100, CRON_HISTORY, "rivet.E302"),
    # Largest encoded (CBOR) actor state, and connection state, an
    # invocation may commit; a call growing it past this is rolled back with
    # actor/state_too_large.
    "MAX_STATE_BYTES": Setting(1048576, POSITIVE_INTEGER),
    # PostgreSQL: seconds an invocation waits for a lock (the actor's row,
    # and row locks its handler takes) before it gives up with actor/busy,
    # having changed nothing. Never longer than the invocation's own time
    # limit. None: wait as long as that limit allows.
    "LOCK_TIMEOUT": Setting(10, optional(POSITIVE_NUMBER)),
    # WebSocket connections one actor may hold (both protocols); the next
    # handshake is refused with actor/too_many_connections, close code 4429.
    # None: no limit.
    "MAX_CONNECTIONS_PER_ACTOR": Setting(1000, optional(POSITIVE_INTEGER)),
    # Base URL of the documentation that check hints and error messages link
    # to (each page is "<DOCS_URL><page>.html#<section>").
    "DOCS_URL": Setting(DEFAULT_DOCS_URL, HTTP_URL),
    # Failed background work (a scheduled action, a cron firing, a queue
    # message) is retried this many times after its first attempt, unless
    # its own max_retries says otherwise. 0: never retried.
    "SCHEDULE_MAX_RETRIES": Setting(3, RETRIES),
    # Seconds before retry n: min(RETRY_BACKOFF_MAX, RETRY_BACKOFF_BASE *
    # 2 ** (n - 1)), less up to a quarter of it at random (jitter).
    "RETRY_BACKOFF_BASE": Setting(1.0, POSITIVE_SECONDS),
    "RETRY_BACKOFF_MAX": Setting(300.0, POSITIVE_SECONDS),
    # Workflow queues: {"name": {"concurrency": 5, "rate_limit": (100, 60.0)}}.
    # concurrency: workflows of the queue started and not finished, at most,
    # across all workers (None: no limit); rate_limit: (n, seconds), at most
    # n starts per sliding window of that many seconds (None: no limit).
    # partition_concurrency / partition_rate_limit: the same per partition
    # key (either makes the queue partitioned: starts name a partition_key);
    # worker_concurrency: its workflows one process runs at once.
    # rivet.E701 checks the limits too.
    "WORKFLOW_QUEUES": Setting({}, QUEUES, "rivet.E701"),
    # This deployment's version ("2026.12.1"; None: none): workflows started
    # here record it; only those of it (or none) run here (docs/workflows.md).
    "APP_VERSION": Setting(None, VERSION),
    # Who may read the Prometheus metrics view (django_rivet.metrics URLs):
    # a logged-in active staff user when True, and any client whose address
    # is in METRICS_ALLOWED_IPS, a list of addresses or networks such as
    # ["10.0.0.0/8"] (rivet.E801 checks each). The address is REMOTE_ADDR,
    # or read from X-Forwarded-For past TRUSTED_PROXIES (below); a request
    # with a forwarding header from anyone else is admitted by no address.
    # Everyone else gets 403.
    "METRICS_ALLOW_STAFF": Setting(True, BOOLEAN),
    "METRICS_ALLOWED_IPS": Setting([], IP_NETWORKS),
    # Dotted paths of interceptor classes, each wrapping every invocation
    # (invoke(call, next)), the first listed outermost; the built-in
    # observability runs outside all of them. rivet.E006 checks each.
    "INTERCEPTORS": Setting([], DOTTED_PATHS),
    # The RivetKit client's actor list (GET actors?name=) is answered to
    # callers that are not browsers; True answers browsers too (rivet.W502).
    "RIVETKIT_LIST_FROM_BROWSERS": Setting(False, BOOLEAN),
    # What an HTTP request's (or a WebSocket handshake's) traceparent header
    # does to the span of the call: "continue" the caller's trace (what the
    # OpenTelemetry Django and ASGI instrumentations do), or start a trace
    # of the server's own that "link"s to the caller's span, or is "new"
    # (no link). A client then chooses no trace id stored with schedules and
    # workflows, and its sampled flag does not decide the server's spans.
    "INCOMING_TRACE": Setting("continue", INCOMING_TRACE),
    # The proxies in front of the server whose X-Forwarded-For is believed:
    # addresses or networks (rivet.E802 checks each). Empty: none is.
    "TRUSTED_PROXIES": Setting([], IP_NETWORKS),
    # GET <prefix>/openapi.json, the OpenAPI document of the HTTP routes
    # (docs/types.md): None serves nothing (404), "staff" active staff users
    # only, "public" anyone.
    "OPENAPI": Setting(None, OPENAPI_ACCESS),
}

#: Every key of ``settings.RIVET`` with its default value.
DEFAULTS: dict[str, Any] = {key: entry.default for key, entry in SETTINGS.items()}


class InvalidSetting(ImproperlyConfigured):
    """A value of ``settings.RIVET`` is not of its setting's kind."""

    def __init__(self, key: str, expected: str) -> None:
        super().__init__(f"RIVET[{key!r}] must be {expected}.")
        self.key = key
        self.expected = expected


class RivetSettings:
    """Typed, lazy, cached view of ``settings.RIVET`` over :data:`SETTINGS`.

    Reading a key returns the project's value, or the default, as the type
    annotated here; a value of the wrong kind raises
    :class:`InvalidSetting` (the system checks report it first).
    """

    ACTION_TIMEOUT: float
    SLEEP_TIMEOUT: float
    ACTOR_CACHE_SIZE: int
    ACTOR_CACHE_BYTES: int
    MAX_INCOMING_MESSAGE_BYTES: int
    MAX_PENDING_FRAMES: int
    MAX_PENDING_FRAME_BYTES: int
    MAX_HTTP_BODY_BYTES: int
    MAX_OUTGOING_MESSAGE_BYTES: int
    EXPOSE_ERRORS: bool | None
    CHANNEL_LAYER: str
    SWEEP_INTERVAL: float
    EVENT_LOG_SIZE: int
    MAX_EVENT_BYTES: int
    EVENT_CHECK_INTERVAL: float
    SLOW_CONSUMER_TIMEOUT: float
    SSE_KEEPALIVE_INTERVAL: float
    CONNECTIONS_PER_PROCESS: int
    EMBEDDED_WORKER: bool
    WORKFLOW_LEASE_SECONDS: float
    WORKFLOW_POLL_INTERVAL: float
    WORKFLOW_LIVE_WAIT: float
    WORKFLOW_CACHE_SIZE: int
    WORKFLOW_CACHE_BYTES: int
    KV_ATOMIC_FLUSH: bool
    DISPATCH_BACKEND: str | None
    ALLOWED_ORIGINS: list[str] | None
    CORS_ALLOWED_ORIGINS: list[str]
    WORKFLOW_RETENTION: float | timedelta | None
    SCHEDULE_RETENTION: float | timedelta | None
    QUEUE_RETENTION: float | timedelta | None
    CRON_HISTORY: int | None
    MAX_STATE_BYTES: int
    LOCK_TIMEOUT: float | None
    MAX_CONNECTIONS_PER_ACTOR: int | None
    DOCS_URL: str
    SCHEDULE_MAX_RETRIES: int
    RETRY_BACKOFF_BASE: float
    RETRY_BACKOFF_MAX: float
    WORKFLOW_QUEUES: dict[str, Any]
    APP_VERSION: str | None
    METRICS_ALLOW_STAFF: bool
    METRICS_ALLOWED_IPS: list[str]
    INTERCEPTORS: list[str]
    RIVETKIT_LIST_FROM_BROWSERS: bool
    TRUSTED_PROXIES: list[str]
    INCOMING_TRACE: str
    OPENAPI: str | None

    def __init__(self, declared: dict[str, Setting] | None = None) -> None:
        self.declared = declared if declared is not None else SETTINGS
        self._cached: set[str] = set()

    @property
    def user_settings(self) -> dict[str, Any]:
        """Return the project's ``RIVET`` dict (empty when unset)."""
        if not hasattr(self, "_user_settings"):
            value = getattr(settings, "RIVET", None) or {}
            if not isinstance(value, dict):
                raise ImproperlyConfigured("settings.RIVET must be a dict.")
            self._user_settings = value
        return self._user_settings

    def unknown_keys(self) -> list[str]:
        """Return the keys of ``settings.RIVET`` that are not settings."""
        return sorted(set(self.user_settings) - set(self.declared))

    def raw(self, key: str) -> Any:
        """Return the project's value of ``key`` as given (or the default)."""
        return self.user_settings.get(key, self.declared[key].default)

    def problem(self, key: str) -> str | None:
        """Return what ``key`` must be when its value is not of its kind, else None."""
        kind = self.declared[key].kind
        return None if kind.accepts(self.raw(key)) else kind.expected

    def problems(self, check: str | None = None) -> dict[str, str]:
        """Return ``{key: what it must be}`` for values not of their kind.

        ``check`` keeps the keys that check reports (``"rivet.E004"``...).
        """
        found = {}
        for key, setting in self.declared.items():
            if check is not None and setting.check != check:
                continue
            expected = self.problem(key)
            if expected is not None:
                found[key] = expected
        return found

    def valid(self, key: str) -> Any:
        """Return the value of ``key`` as a read does, or None if it is invalid.

        For the system checks: they must not fail on a value another check
        reports.
        """
        return None if self.problem(key) is not None else getattr(self, key)

    def __getattr__(self, attr: str) -> Any:
        setting = self.declared.get(attr) if attr.isupper() else None
        if setting is None:
            raise AttributeError(f"Invalid django-rivet setting: {attr!r}")
        value = self.user_settings.get(attr, setting.default)
        if not setting.kind.accepts(value):
            raise InvalidSetting(attr, setting.kind.expected)
        value = setting.kind.convert(value)
        self._cached.add(attr)
        setattr(self, attr, value)
        return value

    def reload(self) -> None:
        """Forget cached values so the next read sees current settings."""
        for attr in self._cached:
            delattr(self, attr)
        self._cached.clear()
        if hasattr(self, "_user_settings"):
            del self._user_settings


rivet_settings = RivetSettings()


def expose_errors() -> bool:
    """Tell whether error bodies may carry internal details (``EXPOSE_ERRORS``).

    Unset, it follows ``DEBUG``: a developer sees what failed, a production
    client never does.
    """
    value = rivet_settings.EXPOSE_ERRORS
    return bool(settings.DEBUG) if value is None else bool(value)


def docs_url(page: str, section: str | None = None) -> str:
    """Return the URL of a documentation page (and section) for messages.

    ``page`` is the page's file name without ``.md`` (``"settings"``);
    ``section`` the anchor of a heading on it (``"retention"``). The base is
    ``RIVET["DOCS_URL"]``; a malformed value (``rivet.E004``) falls back to
    the default so that a hint never fails to print.
    """
    base = rivet_settings.user_settings.get("DOCS_URL", DEFAULT_DOCS_URL)
    if not isinstance(base, str) or not base:
        base = DEFAULT_DOCS_URL
    url = f"{base.rstrip('/')}/{page}.html"
    return f"{url}#{section}" if section else url


@receiver(setting_changed)
def _reload_rivet_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "RIVET":
        rivet_settings.reload()
