"""Settings of django-rivet, read through :data:`rivet_settings`.

Projects configure the app with one dict, ``settings.RIVET``. Reads are lazy
(never at import time) and the cache is dropped on ``setting_changed``, so
``override_settings(RIVET=...)`` works in tests. Unknown keys are reported by
the system check ``rivet.E001`` rather than raised here, so a typo shows up in
``manage.py check`` with a hint instead of as a crash at first use.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

__all__ = [
    "DEFAULTS",
    "DEFAULT_DOCS_URL",
    "RivetSettings",
    "docs_url",
    "rivet_settings",
]

# Where check hints and error messages send people: the documentation of the
# released versions. Projects that host their own copy (or pin a version)
# set RIVET["DOCS_URL"].
DEFAULT_DOCS_URL = "https://django-rivet.readthedocs.io/en/stable/"

#: Every key of ``settings.RIVET`` with its default value; the settings page
#: of the documentation says what each one means.
DEFAULTS: dict[str, Any] = {
    # Seconds an invocation may run before it is rolled back with
    # actor/action_timeout.
    "ACTION_TIMEOUT": 60,
    # Seconds an actor instance may sit idle in a process before it is evicted
    # (its on_sleep hook runs); ephemeral attributes are rebuilt on next load.
    "SLEEP_TIMEOUT": 30,
    # Actor instances (with their decoded state) one process keeps cached;
    # beyond it the least recently used are evicted (on_sleep runs).
    "ACTOR_CACHE_SIZE": 10000,
    # Largest WebSocket frame accepted, checked before decoding.
    "MAX_INCOMING_MESSAGE_BYTES": 65536,
    # Frames one socket may have received and not yet handled (actions
    # waiting behind the running one), by count and by bytes: a client that
    # sends more ahead of the answers gets request/too_many_frames and the
    # close code 4429, so a flood costs the server at most this much.
    "MAX_PENDING_FRAMES": 1000,
    "MAX_PENDING_FRAME_BYTES": 1048576,
    # Largest HTTP request body accepted (bounds `input` too), checked before
    # reading the body.
    "MAX_HTTP_BODY_BYTES": 1048576,
    # Largest response or frame the server sends.
    "MAX_OUTGOING_MESSAGE_BYTES": 1048576,
    # When True, internal errors carry the exception text to clients.
    # Development only.
    "EXPOSE_ERRORS": False,
    # Alias in CHANNEL_LAYERS used for broadcasts and connection messages.
    "CHANNEL_LAYER": "default",
    # Seconds between sweeps (lost schedules, expired workflow leases, stale
    # connections). Use it for the Celery beat entry of rivet.sweep.
    "SWEEP_INTERVAL": 5,
    # Events kept per actor for replay after a reconnect (?since=<seq>).
    "EVENT_LOG_SIZE": 1000,
    # Largest encoded arguments of one event (ctx.broadcast, conn.send);
    # larger ones fail the handler with actor/event_too_large.
    "MAX_EVENT_BYTES": 262144,
    # Seconds between two checks of the actors' latest seqs by each web
    # process: events whose channel-layer message was lost reach their
    # sockets (from the event log) within this time.
    "EVENT_CHECK_INTERVAL": 1.0,
    # Seconds a socket may stay unable to take more data (its client does
    # not read) before it is closed with code 4408; meanwhile it is sent no
    # events and catches up from the log once it reads again.
    "SLOW_CONSUMER_TIMEOUT": 30,
    # WebSocket connections one web process is sized for; the channel-layer
    # check (rivet.W602) compares channels_redis' capacity with it.
    "CONNECTIONS_PER_PROCESS": 1000,
    # True: the web process itself fires due schedules/cron/queues and runs
    # workflows (single-process development). A deploy check warns about it.
    "EMBEDDED_WORKER": False,
    # Seconds a worker's claim on a workflow lasts without a heartbeat.
    "WORKFLOW_LEASE_SECONDS": 30,
    # Seconds; sleeps shorter than this wait in memory instead of yielding.
    "WORKFLOW_POLL_INTERVAL": 0.1,
    # True: a workflow flush is one database transaction (an oversized flush
    # is rejected) instead of chunks of <= 128 writes.
    "KV_ATOMIC_FLUSH": False,
    # What makes due work run promptly: "celery", "worker" (the in-process
    # worker loop), "none" (the sweeper of another process), or a dotted path
    # to a backend class. None: "worker" with EMBEDDED_WORKER, else "celery"
    # when a Celery broker is configured, else "none".
    "DISPATCH_BACKEND": None,
    # Origins allowed to open WebSockets, e.g. ["https://app.example.com"].
    # None: derived from ALLOWED_HOSTS.
    "ALLOWED_ORIGINS": None,
    # Origins whose pages may call the RivetKit-client endpoints (metadata,
    # actors, gateway) cross-origin, with credentials, e.g.
    # ["http://localhost:5173"] for a Vite dev server. Empty: no CORS at all.
    "CORS_ALLOWED_ORIGINS": [],
    # Retention (seconds or a timedelta; None keeps forever). The sweeper
    # deletes what is older in bounded batches; rivet_purge does it on demand.
    # A finished workflow (completed, failed, cancelled) with its history and
    # inbox, this long after it finished.
    "WORKFLOW_RETENTION": 7 * 86400,
    # A fired schedule, this long after it fired.
    "SCHEDULE_RETENTION": 86400,
    # A processed queue message and its reply, this long after processing.
    "QUEUE_RETENTION": 86400,
    # History entries kept per cron job that did not pass max_history.
    "CRON_HISTORY": 100,
    # Largest encoded (CBOR) actor state, and connection state, an
    # invocation may commit; a call growing it past this is rolled back with
    # actor/state_too_large.
    "MAX_STATE_BYTES": 1048576,
    # PostgreSQL: seconds an invocation waits for a lock (the actor's row,
    # and row locks its handler takes) before it gives up with actor/busy,
    # having changed nothing. Never longer than the invocation's own time
    # limit. None: wait as long as that limit allows.
    "LOCK_TIMEOUT": 10,
    # WebSocket connections one actor may hold (both protocols); the next
    # handshake is refused with actor/too_many_connections, close code 4429.
    # None: no limit.
    "MAX_CONNECTIONS_PER_ACTOR": 1000,
    # Base URL of the documentation that check hints and error messages link
    # to (each page is "<DOCS_URL><page>.html#<section>").
    "DOCS_URL": DEFAULT_DOCS_URL,
    # Failed background work (a scheduled action, a cron firing, a queue
    # message) is retried this many times after its first attempt, unless
    # its own max_retries says otherwise. 0: never retried.
    "SCHEDULE_MAX_RETRIES": 3,
    # Seconds before retry n: min(RETRY_BACKOFF_MAX, RETRY_BACKOFF_BASE *
    # 2 ** (n - 1)), less up to a quarter of it at random (jitter).
    "RETRY_BACKOFF_BASE": 1.0,
    "RETRY_BACKOFF_MAX": 300.0,
    # Workflow queues: {"name": {"concurrency": 5, "rate_limit": (100, 60.0)}}.
    # concurrency: workflows of the queue started and not finished, at most,
    # across all workers (None: no limit); rate_limit: (n, seconds), at most
    # n starts per sliding window of that many seconds (None: no limit).
    "WORKFLOW_QUEUES": {},
    # Who may read the Prometheus metrics view (django_rivet.metrics URLs):
    # a logged-in active staff user when True, and any client whose address
    # (REMOTE_ADDR) is in METRICS_ALLOWED_IPS, a list of addresses or
    # networks such as ["127.0.0.1", "10.0.0.0/8"]. Everyone else gets 403.
    "METRICS_ALLOW_STAFF": True,
    "METRICS_ALLOWED_IPS": [],
}


class RivetSettings:
    """Lazy, cached view of ``settings.RIVET`` over :data:`DEFAULTS`."""

    def __init__(self, defaults: dict[str, Any] | None = None) -> None:
        self.defaults = defaults if defaults is not None else DEFAULTS
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
        return sorted(set(self.user_settings) - set(self.defaults))

    def __getattr__(self, attr: str) -> Any:
        if attr not in self.defaults:
            raise AttributeError(f"Invalid django-rivet setting: {attr!r}")
        value = self.user_settings.get(attr, self.defaults[attr])
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
