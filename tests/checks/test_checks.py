"""System checks: each id fires on its misconfiguration and only then."""

import sys
from datetime import timedelta

import pytest
from django.core import checks
from django.test import override_settings

from django_rivet import Actor, action
from django_rivet import checks as rivet_checks
from django_rivet.actors import registry
from django_rivet.conf import docs_url
from tests.support.servers import ROOT


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
        {"MAX_PENDING_FRAMES": 0},
        {"CHANNEL_LAYER": 5},
        {"RETRY_BACKOFF_MAX": "300"},
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
        # Out of an actors module, so a later discovery does not find them.
        First.__module__ = Second.__module__ = __name__


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
    text = (ROOT / "docs" / "checks.md").read_text()
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
    assert messages[0].hint == rivet_checks.W501_HINT.format(
        docs=docs_url("security", "websocket-origins")
    )


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


# -- interceptors and the actor list (issue 45) ---------------------------------------
@pytest.mark.parametrize("path", ["no.such.Interceptor", "json.dumps"])
def test_an_interceptor_that_cannot_be_used_is_e006(path):
    ok = "tests.actors.test_interceptors.Second"
    with override_settings(RIVET={"INTERCEPTORS": [ok, path]}):
        messages = [m for m in run_checks() if m.id == "rivet.E006"]
    assert len(messages) == 1
    assert messages[0].msg.startswith(
        rivet_checks.E006.format(path=path, error="")[:-1]
    )
    with override_settings(RIVET={"INTERCEPTORS": [ok]}):
        assert ids(run_checks()) == []


def test_listing_actors_to_browsers_is_w502():
    with override_settings(RIVET={"RIVETKIT_LIST_FROM_BROWSERS": True}):
        messages = [m for m in run_checks() if m.id == "rivet.W502"]
    assert [m.msg for m in messages] == [rivet_checks.W502]


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


# -- issue 30: hints that point to the docs site and say what to do -----------------
REDIS_LAYER = "channels_redis.core.RedisChannelLayer"


def hints(messages):
    return [m.hint for m in messages if m.id and m.id.startswith("rivet.")]


def test_hints_link_the_docs_site_and_never_a_repository_path():
    with override_settings(
        RIVET={"CHANNEL_LAYER": "other", "ACTION_TIMEOUT": 0, "QUEUE_RETENTION": -1},
        CHANNEL_LAYERS={"other": {"BACKEND": REDIS_LAYER}},
    ):
        messages = run_checks()
    with override_settings(RIVET={"ALLOWED_ORIGINS": ["*"]}):
        messages += run_checks()
    with override_settings(CHANNEL_LAYERS={"default": {"BACKEND": REDIS_LAYER}}):
        messages += run_checks()
    assert {"rivet.E004", "rivet.E301", "rivet.W501", "rivet.W601"} <= set(
        ids(messages)
    )
    for hint in hints(messages):
        assert "docs/" not in hint
    linked = [h for h in hints(messages) if "https://" in h]
    assert len(linked) >= 4
    assert all("https://django-rivet.readthedocs.io/en/stable/" in h for h in linked)


def test_docs_url_setting_moves_every_link():
    with override_settings(
        RIVET={"DOCS_URL": "https://docs.example.org/rivet/", "ACTION_TIMEOUT": 0}
    ):
        [message] = [m for m in run_checks() if m.id == "rivet.E004"]
    assert "https://docs.example.org/rivet/settings.html" in message.hint
    with override_settings(RIVET={"DOCS_URL": "docs/"}):
        assert ids(run_checks()) == ["rivet.E004"]


def test_the_redis_socket_timeout_hint_prints_python_not_format_braces():
    layers = {"default": {"BACKEND": REDIS_LAYER, "CONFIG": {"capacity": 1000}}}
    with override_settings(CHANNEL_LAYERS=layers):
        [message] = [m for m in run_checks() if m.id == "rivet.W601"]
    assert "{{" not in message.hint and "}}" not in message.hint
    assert "'hosts': [{'address': REDIS_URL, 'socket_timeout': 10}]" in message.hint


def test_no_dispatcher_w004_names_the_project_packages_init(monkeypatch):
    from django.conf import settings as django_settings

    from django_rivet import dispatch

    monkeypatch.setattr(django_settings, "SETTINGS_MODULE", "mysite.settings")
    # No broker and no embedded worker, whatever the suite's Celery app has.
    monkeypatch.setattr(dispatch, "configured_name", lambda: "none")
    [message] = rivet_checks.check_dispatch()
    assert message.id == "rivet.W004"
    assert "mysite/__init__.py" in message.hint
    assert "from .celery import app as celery_app" in message.hint


def test_runserver_without_daphne_is_w005(settings, monkeypatch):
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "daphne"]
    monkeypatch.setattr(sys, "argv", ["manage.py", "runserver"])
    messages = [m for m in run_checks() if m.id == "rivet.W005"]
    assert [m.msg for m in messages] == [rivet_checks.W005]
    assert "'daphne'" in messages[0].hint
    # Only runserver: a project served by daphne or uvicorn never sees it
    # on migrate, check or its own commands.
    for command in ("migrate", "check", "rivet_worker"):
        monkeypatch.setattr(sys, "argv", ["manage.py", command])
        assert "rivet.W005" not in ids(run_checks())


# -- issue 30: definitions checked at start-up ---------------------------------------
def test_an_action_that_cannot_take_ctx_is_e103_and_one_missing_it_is_w102():
    class Forgetful(Actor):
        name = "forgetful"

        @action
        def reset(self):
            return 0

        @action
        def add(self, sku: str) -> int:  # ctx forgotten: sku takes its place
            return 1

        @action
        def fine(self, ctx, sku: str) -> int:
            return 1

    with registry.register_temporarily(Forgetful):
        messages = run_checks()
    by_id = {m.id: m for m in messages if m.id in ("rivet.E103", "rivet.W102")}
    assert sorted(by_id) == ["rivet.E103", "rivet.W102"]
    assert "'reset'" in by_id["rivet.E103"].msg
    assert "'add'" in by_id["rivet.W102"].msg and "'sku'" in by_id["rivet.W102"].msg
    assert "ctx" in by_id["rivet.W102"].hint


def test_a_sync_workflow_function_is_e202():
    from django_rivet.workflows import workflow
    from django_rivet.workflows.registry import register_temporarily

    @workflow(name="syncFlow")
    def sync_flow(ctx, input):
        return input

    @workflow(name="noInput")
    async def no_input(ctx):
        return 1

    with register_temporarily(sync_flow, no_input):
        messages = run_checks()
    assert [m.msg for m in messages if m.id == "rivet.E202"] == [
        rivet_checks.E202.format(
            name="syncFlow", function=f"{__name__}.{sync_flow.fn.__qualname__}"
        )
    ]
    assert "async def sync_flow(ctx, input)" in next(
        m.hint for m in messages if m.id == "rivet.E202"
    )
    assert [m.id for m in messages if m.id == "rivet.E203"] == ["rivet.E203"]


def test_a_can_read_stream_that_cannot_take_its_arguments_is_e205():
    from django_rivet.workflows import workflow
    from django_rivet.workflows.registry import register_temporarily

    @workflow(name="badReader", can_read_stream=lambda request: True)
    async def bad_reader(ctx, input):
        return 1

    @workflow(name="goodReader", can_read_stream=lambda request, wid, key: True)
    async def good_reader(ctx, input):
        return 1

    with register_temporarily(bad_reader, good_reader):
        messages = [m for m in run_checks() if m.id == "rivet.E205"]
    assert [m.msg for m in messages] == [
        rivet_checks.E205.format(
            name="badReader",
            function=f"{__name__}.{bad_reader.fn.__qualname__}",
            signature="(request)",
        )
    ]


def test_names_that_differ_only_by_case_are_w101_and_w201():
    from django_rivet.workflows import workflow
    from django_rivet.workflows.registry import register_temporarily

    class Lower(Actor):
        name = "casey"

    class Upper(Actor):
        name = "Casey"

    @workflow(name="report")
    async def lower(ctx, input):
        return 1

    @workflow(name="Report")
    async def upper(ctx, input):
        return 1

    with (
        registry.register_temporarily(Lower, Upper),
        register_temporarily(lower, upper),
    ):
        messages = run_checks()
    # Sorted: the order in which check functions run is not part of this.
    assert sorted(m.msg for m in messages if m.id in ("rivet.W101", "rivet.W201")) == [
        rivet_checks.W101.format(names="'Casey', 'casey'"),
        rivet_checks.W201.format(names="'Report', 'report'"),
    ]


# -- the metrics view's access (issue 28) --------------------------------------------
@override_settings(RIVET={"METRICS_ALLOWED_IPS": ["127.0.0.1", "10.0.0.0/8", "nope"]})
def test_a_metrics_address_that_is_not_one_is_e701():
    (message,) = [m for m in run_checks() if m.id == "rivet.E801"]
    assert message.msg == rivet_checks.E801.format(entry="nope")
    assert message.obj == "settings.RIVET"


@override_settings(RIVET={"METRICS_ALLOWED_IPS": ["0.0.0.0/0"]})
def test_allowing_every_address_to_read_metrics_is_w701():
    (message,) = [m for m in run_checks() if m.id == "rivet.W801"]
    assert message.msg == rivet_checks.W801.format(entry="0.0.0.0/0")


@override_settings(RIVET={"TRUSTED_PROXIES": ["127.0.0.1", "proxy.local"]})
def test_a_trusted_proxy_that_is_not_an_address_is_e802():
    (message,) = [m for m in run_checks() if m.id == "rivet.E802"]
    assert message.msg == rivet_checks.E802.format(entry="proxy.local")


@pytest.mark.parametrize(
    ("argv", "environ", "sign"),
    [
        (["daphne", "--proxy-headers", "x:app"], {}, "--proxy-headers"),
        (["uvicorn", "--forwarded-allow-ips=*", "x:app"], {}, "--forwarded-allow-ips"),
        (["manage.py", "check"], {"FORWARDED_ALLOW_IPS": "*"}, "FORWARDED_ALLOW_IPS"),
    ],
)
def test_metrics_allowed_by_address_behind_a_rewriting_server_is_w802(
    monkeypatch, argv, environ, sign
):
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with override_settings(RIVET={"METRICS_ALLOWED_IPS": ["10.0.0.0/8"]}):
        (message,) = [m for m in run_checks() if m.id == "rivet.W802"]
    assert sign in message.msg
    # Nothing to warn about without an address allow-list.
    assert not [m for m in run_checks() if m.id == "rivet.W802"]


@pytest.mark.parametrize(
    "rivet",
    [{"METRICS_ALLOW_STAFF": "yes"}, {"METRICS_ALLOWED_IPS": "127.0.0.1"}],
)
def test_metrics_access_settings_of_the_wrong_type_are_e004(rivet):
    with override_settings(RIVET=rivet):
        assert ids(run_checks()) == ["rivet.E004"]
