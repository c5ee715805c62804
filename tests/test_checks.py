"""System checks: each id fires on its misconfiguration and only then."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.core import checks
from django.test import override_settings

from django_rivet import Actor, action
from django_rivet import checks as rivet_checks
from django_rivet.actors import registry


def run_checks(deploy=False):
    return checks.run_checks(include_deployment_checks=deploy)


def ids(messages):
    return sorted(m.id for m in messages if m.id and m.id.startswith("rivet."))


def test_the_test_settings_pass_every_check():
    assert ids(run_checks()) == []


@override_settings(RIVET={"ACTION_TIMOUT": 5})
def test_unknown_key_is_e001():
    messages = [m for m in run_checks() if m.id == "rivet.E001"]
    assert len(messages) == 1
    assert messages[0].msg == rivet_checks.E001.format(key="ACTION_TIMOUT")
    assert messages[0].obj == "settings.RIVET"
    assert "ACTION_TIMEOUT" in messages[0].hint


@pytest.mark.parametrize(
    "rivet",
    [
        {"ACTION_TIMEOUT": 0},
        {"EVENT_LOG_SIZE": "many"},
        {"EXPOSE_ERRORS": "yes"},
        {"ALLOWED_ORIGINS": "https://example.com"},
        {"MAX_CONNECTIONS_PER_ACTOR": 0},
        {"MAX_CONNECTIONS_PER_ACTOR": "10"},
    ],
)
def test_bad_values_are_e004(rivet):
    with override_settings(RIVET=rivet):
        assert ids(run_checks()) == ["rivet.E004"]


@pytest.mark.parametrize(
    "rivet",
    [
        {"WORKFLOW_RETENTION": -1},
        {"SCHEDULE_RETENTION": "7 days"},
        {"QUEUE_RETENTION": True},
        {"WORKFLOW_RETENTION": float("nan")},
        {"WORKFLOW_RETENTION": timedelta(days=365 * 200)},
    ],
)
def test_bad_retention_periods_are_e301(rivet):
    with override_settings(RIVET=rivet):
        messages = run_checks()
    assert ids(messages) == ["rivet.E301"]
    (key,) = rivet
    assert [m.msg for m in messages if m.id == "rivet.E301"] == [
        rivet_checks.E301.format(key=key)
    ]


@pytest.mark.parametrize("value", [-1, 10001, "100", True, 2.5])
def test_bad_cron_history_is_e302(value):
    with override_settings(RIVET={"CRON_HISTORY": value}):
        assert ids(run_checks()) == ["rivet.E302"]


@override_settings(
    RIVET={
        "WORKFLOW_RETENTION": None,
        "SCHEDULE_RETENTION": 0,
        "QUEUE_RETENTION": timedelta(hours=1),
        "CRON_HISTORY": None,
    }
)
def test_none_zero_and_timedeltas_are_valid_retention_settings():
    assert ids(run_checks()) == []


@override_settings(RIVET={"QUEUE_RETENTION": 30, "ACTION_TIMEOUT": 60})
def test_queue_retention_shorter_than_a_sender_waits_is_w301():
    assert ids(run_checks()) == ["rivet.W301"]


def test_missing_channel_layer_alias_is_e003():
    with override_settings(RIVET={"CHANNEL_LAYER": "other"}):
        messages = [m for m in run_checks() if m.id == "rivet.E003"]
    assert [m.msg for m in messages] == [rivet_checks.E003.format(alias="other")]
    # The hint gives what a new project lacks: the setting and a backend path.
    assert "CHANNEL_LAYERS = {'other': {'BACKEND': " in messages[0].hint
    assert "channels.layers.InMemoryChannelLayer" in messages[0].hint


def test_channels_not_installed_is_e002(settings):
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "channels"]
    messages = rivet_checks.check_channels()
    assert [m.id for m in messages] == ["rivet.E002"]


def test_deploy_checks_warn_about_development_setups():
    with override_settings(
        RIVET={"EMBEDDED_WORKER": True}, CELERY_TASK_ALWAYS_EAGER=True
    ):
        assert ids(run_checks(deploy=True)) == [
            "rivet.W001",
            "rivet.W002",
            "rivet.W003",
        ]


def test_deploy_checks_are_quiet_for_a_production_setup():
    # The channel layer as docs/production.md configures it.
    layers = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": "redis://redis:6379/0", "socket_timeout": 10}],
                "capacity": 1000,
            },
        }
    }
    with override_settings(CHANNEL_LAYERS=layers):
        assert ids(run_checks(deploy=True)) == []


def test_duplicate_actor_names_found_by_autodiscovery_are_e101():
    class First(Actor):
        name = "dupe"

    class Second(Actor):
        name = "dupe"

    First.__module__ = Second.__module__ = "someapp.actors"
    registry.register(First)
    try:
        registry.register_discovered()
        messages = [m for m in run_checks() if m.id == "rivet.E101"]
        assert len(messages) == 1
        assert messages[0].obj is Second
    finally:
        registry.unregister("dupe")
        registry.actors.conflicts.clear()


def test_invalid_actor_name_is_e102():
    class Bad(Actor):
        name = "has space"

        @action
        def ping(self, ctx):
            return 1

    with registry.register_temporarily(Bad):
        messages = [m for m in run_checks() if m.id == "rivet.E102"]
    assert len(messages) == 1
    assert messages[0].obj is Bad


def test_every_check_id_is_documented():
    text = (Path(__file__).parent.parent / "docs" / "checks.md").read_text()
    for name in dir(rivet_checks):
        if name[:1] in "EW" and name[1:].isdigit():
            assert f"rivet.{name}" in text, name


def test_registering_another_class_under_a_taken_name_is_refused():
    from django_rivet.exceptions import AlreadyRegistered, NotRegistered

    class Impostor(Actor):
        name = "counter"

    with pytest.raises(AlreadyRegistered):
        registry.register(Impostor)
    assert registry.get("counter") is not Impostor
    with pytest.raises(NotRegistered):
        registry.unregister("neverRegistered")


# -- origins (issue 17, finding 6) -------------------------------------------------
def test_allowed_origins_admitting_any_page_is_w501():
    with override_settings(RIVET={"ALLOWED_ORIGINS": ["*"]}):
        messages = [m for m in run_checks() if m.id == "rivet.W501"]
    assert [m.msg for m in messages] == [rivet_checks.W501]
    assert messages[0].hint == rivet_checks.W501_HINT


@pytest.mark.parametrize(
    "origin", ["app.example.com", "https://*.example.com", "https://x.com/app", "null"]
)
def test_allowed_origins_entries_must_be_origins(origin):
    with override_settings(RIVET={"ALLOWED_ORIGINS": ["https://ok.example", origin]}):
        messages = [m for m in run_checks() if m.id == "rivet.E501"]
    assert [m.msg for m in messages] == [rivet_checks.E501.format(origin=origin)]


def test_listed_origins_pass():
    origins = ["https://app.example.com", "http://localhost:5173"]
    with override_settings(RIVET={"ALLOWED_ORIGINS": origins}):
        assert ids(run_checks()) == []


# -- the channel layer under load (realtime) ------------------------------------------
def redis_layer(hosts=None, **config):
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": hosts or ["redis://redis:6379/0"], **config},
        }
    }


def realtime_ids():
    return [m.id for m in rivet_checks.check_channel_layer()]


def test_redis_layer_with_the_default_socket_timeout_is_w601():
    with override_settings(CHANNEL_LAYERS=redis_layer(capacity=1000)):
        messages = rivet_checks.check_channel_layer()
    assert [m.id for m in messages] == ["rivet.W601"]
    assert messages[0].msg == rivet_checks.W601.format(
        alias="default", timeout=5.0, blocking=5.0
    )


@pytest.mark.parametrize(
    "hosts",
    [
        [{"address": "redis://redis:6379/0", "socket_timeout": 10}],
        ["redis://redis:6379/0?socket_timeout=10"],
        [{"host": "redis", "port": 6379, "socket_timeout": None}],
    ],
)
def test_a_socket_timeout_above_the_blocking_read_passes(hosts):
    with override_settings(CHANNEL_LAYERS=redis_layer(hosts, capacity=1000)):
        assert realtime_ids() == []


def test_capacity_below_the_connections_per_process_is_w602():
    hosts = [{"address": "redis://redis:6379/0", "socket_timeout": 10}]
    with override_settings(CHANNEL_LAYERS=redis_layer(hosts)):
        assert realtime_ids() == ["rivet.W602"]
    with override_settings(
        CHANNEL_LAYERS=redis_layer(hosts), RIVET={"CONNECTIONS_PER_PROCESS": 100}
    ):
        assert realtime_ids() == []


def test_a_channel_layer_that_cannot_be_created_is_e601():
    layers = {"default": {"BACKEND": "channels_redis.core.NoSuchLayer"}}
    with override_settings(CHANNEL_LAYERS=layers):
        messages = rivet_checks.check_channel_layer()
    assert [m.id for m in messages] == ["rivet.E601"]
    assert "NoSuchLayer" in messages[0].msg


def test_events_larger_than_any_frame_is_w603():
    with override_settings(
        RIVET={"MAX_EVENT_BYTES": 2_000_000, "MAX_OUTGOING_MESSAGE_BYTES": 1_000_000}
    ):
        assert realtime_ids() == ["rivet.W603"]


# -- the metrics view's access (issue 28) --------------------------------------------
@override_settings(RIVET={"METRICS_ALLOWED_IPS": ["127.0.0.1", "10.0.0.0/8", "nope"]})
def test_a_metrics_address_that_is_not_one_is_e701():
    (message,) = [m for m in run_checks() if m.id == "rivet.E701"]
    assert message.msg == rivet_checks.E701.format(entry="nope")
    assert message.obj == "settings.RIVET"


@override_settings(RIVET={"METRICS_ALLOWED_IPS": ["0.0.0.0/0"]})
def test_allowing_every_address_to_read_metrics_is_w701():
    (message,) = [m for m in run_checks() if m.id == "rivet.W701"]
    assert message.msg == rivet_checks.W701.format(entry="0.0.0.0/0")


@pytest.mark.parametrize(
    "rivet",
    [{"METRICS_ALLOW_STAFF": "yes"}, {"METRICS_ALLOWED_IPS": "127.0.0.1"}],
)
def test_metrics_access_settings_of_the_wrong_type_are_e004(rivet):
    with override_settings(RIVET=rivet):
        assert ids(run_checks()) == ["rivet.E004"]
