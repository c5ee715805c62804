"""Settings: defaults, override_settings reloads, documented keys."""

from pathlib import Path

import pytest
from django.test import override_settings

from django_rivet.conf import DEFAULTS, rivet_settings

DOCUMENTED_DEFAULTS = {
    "ACTION_TIMEOUT": 60,
    "SLEEP_TIMEOUT": 30,
    "MAX_INCOMING_MESSAGE_BYTES": 65536,
    "MAX_HTTP_BODY_BYTES": 1048576,
    "MAX_OUTGOING_MESSAGE_BYTES": 1048576,
    "EXPOSE_ERRORS": None,
    "CHANNEL_LAYER": "default",
    "SWEEP_INTERVAL": 5,
    "EVENT_LOG_SIZE": 1000,
    "EMBEDDED_WORKER": False,
    "WORKFLOW_LEASE_SECONDS": 30,
    "WORKFLOW_POLL_INTERVAL": 0.1,
    "KV_ATOMIC_FLUSH": False,
    "ALLOWED_ORIGINS": None,
    "CORS_ALLOWED_ORIGINS": [],
    # How background work is made prompt (docs/settings.md, like every key here).
    "DISPATCH_BACKEND": None,
    # Retention (issue 19), seconds; None keeps forever.
    "WORKFLOW_RETENTION": 7 * 86400,
    "SCHEDULE_RETENTION": 86400,
    "QUEUE_RETENTION": 86400,
    "CRON_HISTORY": 100,
    # Runtime hardening (issue 12).
    "MAX_STATE_BYTES": 1048576,
    "LOCK_TIMEOUT": 10,
    # Connections per actor (issue 17, finding 11); None: no limit.
    "MAX_CONNECTIONS_PER_ACTOR": 1000,
    # Realtime under load (issue 18).
    "MAX_EVENT_BYTES": 262144,
    "EVENT_CHECK_INTERVAL": 1.0,
    "SLOW_CONSUMER_TIMEOUT": 30,
    "SSE_KEEPALIVE_INTERVAL": 15,
    "MAX_PENDING_FRAMES": 1000,
    "MAX_PENDING_FRAME_BYTES": 1048576,
    "CONNECTIONS_PER_PROCESS": 1000,
    "ACTOR_CACHE_SIZE": 10000,
    "ACTOR_CACHE_BYTES": 268435456,
    # Where hints and errors link (issue 30).
    "DOCS_URL": "https://django-rivet.readthedocs.io/en/stable/",
    # Background work (issue 26): retries and workflow queues.
    "SCHEDULE_MAX_RETRIES": 3,
    "RETRY_BACKOFF_BASE": 1.0,
    "RETRY_BACKOFF_MAX": 300.0,
    "WORKFLOW_QUEUES": {},
    "APP_VERSION": None,
    # Who may read the metrics view (issue 28).
    "METRICS_ALLOW_STAFF": True,
    "METRICS_ALLOWED_IPS": [],
    "INTERCEPTORS": [],
    "RIVETKIT_LIST_FROM_BROWSERS": False,
    "INCOMING_TRACE": "continue",
    "TRUSTED_PROXIES": [],
    "OPENAPI": None,
    # The live window of workflow runs (issue 46): off.
    "WORKFLOW_LIVE_WAIT": 0,
    # The history cache (issue 46): off; its memory bound, 64 MiB.
    "WORKFLOW_CACHE_SIZE": 0,
    "WORKFLOW_CACHE_BYTES": 64 * 1024 * 1024,
}


def test_defaults_are_the_documented_ones():
    assert DEFAULTS == DOCUMENTED_DEFAULTS


@override_settings(RIVET={})
def test_unset_settings_read_their_default():
    for key, value in DOCUMENTED_DEFAULTS.items():
        assert getattr(rivet_settings, key) == value


def test_override_settings_is_seen_and_undone():
    assert rivet_settings.ACTION_TIMEOUT == 60
    with override_settings(RIVET={"ACTION_TIMEOUT": 5}):
        assert rivet_settings.ACTION_TIMEOUT == 5
        assert rivet_settings.EVENT_LOG_SIZE == 1000
    assert rivet_settings.ACTION_TIMEOUT == 60


def test_unknown_attribute_is_an_error():
    with pytest.raises(AttributeError):
        rivet_settings.NOT_A_SETTING  # noqa: B018


def test_every_setting_is_documented():
    text = (Path(__file__).parent.parent / "docs" / "settings.md").read_text()
    for key in DEFAULTS:
        assert f"`{key}`" in text, key


def test_every_setting_is_read_as_its_declared_type():
    # One table declares each key; the typed attributes follow it exactly.
    from django_rivet.conf import SETTINGS, RivetSettings

    assert set(RivetSettings.__annotations__) == set(SETTINGS)


@override_settings(RIVET={"ACTION_TIMEOUT": 5, "MAX_STATE_BYTES": 2000})
def test_reads_are_typed_so_callers_convert_nothing():
    assert rivet_settings.ACTION_TIMEOUT == 5.0
    assert isinstance(rivet_settings.ACTION_TIMEOUT, float)
    assert rivet_settings.MAX_STATE_BYTES == 2000


@pytest.mark.parametrize(
    ("rivet", "message"),
    [
        (
            {"ACTION_TIMEOUT": "60"},
            "RIVET['ACTION_TIMEOUT'] must be a positive number.",
        ),
        (
            {"QUEUE_RETENTION": "7 days"},
            "RIVET['QUEUE_RETENTION'] must be None or a number of seconds "
            "(or a timedelta) from 0 to 100 years.",
        ),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_when_read(rivet, message):
    from django.core.exceptions import ImproperlyConfigured

    (key,) = rivet
    with override_settings(RIVET=rivet), pytest.raises(ImproperlyConfigured) as info:
        getattr(rivet_settings, key)
    assert str(info.value) == message
