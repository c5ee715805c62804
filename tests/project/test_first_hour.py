"""The mistakes of a newcomer's first hour, each made as a user would.

Each test writes the mistake (an actor class, a setting, a workflow in the
wrong module...) and asserts what the user sees: the error's code, the name
it points at and the fix it names. The mistakes that need a real server or a
real project (the asgi.py import order, runserver's checks, the quickstart's
logging) are made on the quickstart's project in test_install_path.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal

import pytest
from django.core import checks
from django.core.management import call_command
from django.db import models
from django.db.utils import OperationalError
from django.test import override_settings

from django_rivet import Actor, action, actors, workflows
from django_rivet.actors import registry
from django_rivet.actors.definition import ActorDefinitionError
from django_rivet.actors.errors import public_error
from django_rivet.checks import runtime as runtime_checks
from django_rivet.exceptions import ActorNotFound, WorkflowNotFound
from django_rivet.testing import register_temporarily, run_due, run_until_idle
from django_rivet.workflows import workflow
from tests.support.servers import ROOT


def rivet_messages(check_id):
    return [m for m in checks.run_checks() if m.id == check_id]


# -- actor definitions: refused when the class is defined ------------------------------
def test_an_action_named_like_an_actor_attribute_names_the_class_and_the_fix():
    with pytest.raises(ActorDefinitionError) as refused:

        class Shop(Actor):
            @action
            def name(self, ctx):
                return "shop"

    message = str(refused.value)
    assert message.startswith(f"The action {__name__}.")
    assert "<locals>.Shop.name replaces Actor.name" in message
    assert "@action(name='name') def name_(self, ctx, ...)" in message


def test_two_actions_with_one_name_are_refused_instead_of_replacing_each_other():
    with pytest.raises(ActorDefinitionError) as refused:

        class Shop(Actor):
            @action(name="price")
            def price_in_euros(self, ctx):
                return 1

            @action(name="price")
            def price_in_cents(self, ctx):
                return 100

    message = str(refused.value)
    assert "Shop.price_in_euros" in message and "Shop.price_in_cents" in message
    assert "both have the name 'price'" in message


def test_a_lifecycle_hook_cannot_be_an_action_or_lend_an_action_its_name():
    with pytest.raises(ActorDefinitionError, match=r"Shop\.on_wake is the lifecycle"):

        class Shop(Actor):
            @action
            def on_wake(self, ctx):
                return 1

    with pytest.raises(ActorDefinitionError, match="the name of a lifecycle hook"):

        class Other(Actor):
            @action(name="on_destroy")
            def wipe(self, ctx):
                return 1


def test_a_subclass_may_still_override_its_parents_action():
    class Base(Actor):
        abstract = True

        @action
        def price(self, ctx):
            return 1

    class Priced(Base):
        @action
        def price(self, ctx):
            return 2

    assert Priced.actions["price"].attribute == "price"


def test_the_checks_report_a_definition_they_cannot_read_instead_of_crashing():
    class Broken(Actor):
        name = "brokenDefinition"

        @action
        def ping(self, ctx):
            return 1

    # Something (a plugin, a test) replaced what the runtime reads.
    Broken.actions = {"ping": object()}
    with register_temporarily(Broken):
        [message] = rivet_messages("rivet.E104")
    assert "brokenDefinition" in message.msg or "Broken" in message.msg
    assert message.obj is Broken


# -- definitions the process knows but never registered --------------------------------
@pytest.fixture
def never_registered():
    """An actor and a workflow of the installed test app nobody registered.

    Made per test and forgotten after it: while they exist, every system
    check run warns about them (which is the point).
    """
    from django_rivet.actors import definition
    from django_rivet.engine import values

    class Cursor(Actor):
        """Defined outside actors.py (a module of the installed test app)."""

        __module__ = "tests.testapp.presence"
        __qualname__ = "Cursor"
        name = "cursorNeverRegistered"

        @action
        def move(self, ctx, x: int) -> int:
            return x

    async def summarize(ctx, input):
        return 1

    summarize.__module__ = "tests.testapp.tasks"
    summarize.__qualname__ = "summarize"
    flow = workflow(name="summarizeNeverRegistered")(summarize)
    try:
        yield Cursor
    finally:
        definition.defined_classes.remove(Cursor)
        values.defined.remove(flow)


def test_an_actor_defined_but_not_registered_is_w103(never_registered):
    [message] = [m for m in rivet_messages("rivet.W103") if m.obj is never_registered]
    assert "tests.testapp.presence.Cursor" in message.msg
    assert "'cursorNeverRegistered' answer actor/not_found" in message.msg
    assert "actors.py" in message.hint and "registry.register" in message.hint


def test_a_workflow_defined_but_not_registered_is_w202(never_registered):
    [message] = [
        m for m in rivet_messages("rivet.W202") if "summarizeNeverRegistered" in m.msg
    ]
    assert "tests.testapp.tasks.summarize" in message.msg
    assert "workflows.py" in message.hint


@pytest.mark.django_db
def test_unknown_actor_names_the_unregistered_class_in_development(
    client, settings, never_registered
):
    url = "/rivet/actors/cursorNeverRegistered/actions/move?key=a"
    settings.DEBUG = True
    answer = client.post(url, {"args": [1]}, content_type="application/json").json()
    assert answer["code"] == "not_found"
    assert (
        "tests.testapp.presence.Cursor is named 'cursorNeverRegistered'"
        in (answer["message"])
    )
    assert "Import it there" in answer["message"]
    # In production a client learns nothing about the project's modules.
    settings.DEBUG = False
    answer = client.post(url, {"args": [1]}, content_type="application/json").json()
    assert answer["message"] == "Unknown actor 'cursorNeverRegistered'"


@pytest.mark.django_db
def test_unknown_workflow_names_the_unregistered_definition_in_development(
    settings, never_registered
):
    settings.DEBUG = True
    with pytest.raises(WorkflowNotFound) as unknown:
        workflows.start("summarizeNeverRegistered")
    assert "tests.testapp.tasks.summarize" in unknown.value.message
    settings.DEBUG = False
    with pytest.raises(WorkflowNotFound) as unknown:
        workflows.start("summarizeNeverRegistered")
    assert "tests.testapp" not in unknown.value.message


@pytest.mark.django_db
def test_an_actor_imported_into_an_apps_actors_module_is_registered(monkeypatch):
    import tests.testapp.actors as app_actors
    from django_rivet.actors import definition

    class Presence(Actor):
        __module__ = "tests.testapp.presence"
        name = "presenceReExported"

        @action
        def here(self, ctx) -> str:
            return "here"

    monkeypatch.setattr(app_actors, "Presence", Presence, raising=False)
    try:
        registry.register_discovered()
        assert actors.get_or_create("presenceReExported", "a").call("here") == "here"
    finally:
        registry.unregister(Presence)
        definition.defined_classes.remove(Presence)  # no W103 for later tests


def test_unknown_names_without_a_class_say_where_definitions_are_found(settings):
    settings.DEBUG = True
    with pytest.raises(ActorNotFound) as unknown:
        registry.get("noSuchActorAnywhere")
    assert "actors.py module of each installed app" in unknown.value.message


# -- what a call tells its caller ------------------------------------------------------
class Till(Actor):
    name = "firstHourTill"

    @action
    def add(self, ctx, sku: str, qty: int = 1) -> int:
        return qty

    @action
    def crash(self, ctx):
        raise ValueError("the till drawer is stuck")


@pytest.fixture
def till():
    with register_temporarily(Till):
        yield


def post(client, action, args):
    return client.post(
        f"/rivet/actors/firstHourTill/actions/{action}?key=a",
        {"args": args},
        content_type="application/json",
    )


@pytest.mark.django_db
def test_an_unknown_action_suggests_the_one_meant(client, till):
    answer = post(client, "ad", ["tea"]).json()
    assert answer["code"] == "action_not_found"
    assert answer["message"] == "The actor has no action 'ad'; did you mean 'add'?"


@pytest.mark.django_db
def test_a_wrong_argument_count_says_what_the_action_takes(client, till):
    response = post(client, "add", [])
    assert response.status_code == 400
    answer = response.json()
    assert answer["code"] == "invalid_args"
    assert "It takes 1 to 2 arguments (sku: str, qty: int = ...)" in answer["message"]
    assert answer["metadata"] == {"expected_min": 1, "expected_max": 2, "given": 0}


@pytest.mark.django_db
def test_internal_errors_show_their_details_only_with_debug(client, till, settings):
    settings.DEBUG = True
    answer = post(client, "crash", []).json()
    assert answer["code"] == "internal_error"
    assert answer["message"] == "ValueError: the till drawer is stuck"
    settings.DEBUG = False
    assert "drawer" not in post(client, "crash", []).json()["message"]
    with override_settings(RIVET={"EXPOSE_ERRORS": False}, DEBUG=True):
        assert "drawer" not in post(client, "crash", []).json()["message"]


# -- a table the project forgot --------------------------------------------------------
class Receipt(models.Model):
    """A model of the project's app that no migration creates."""

    text = models.TextField()

    class Meta:
        app_label = "testapp"
        db_table = "testapp_first_hour_receipt"

    def __str__(self):
        return self.text


class Register(Actor):
    name = "firstHourRegister"

    @action
    def keep(self, ctx, text: str) -> int:
        return Receipt.objects.create(text=text).pk


@pytest.mark.django_db
def test_a_model_without_a_migration_says_makemigrations_and_no_retry(client, settings):
    settings.DEBUG = True
    with register_temporarily(Register):
        response = client.post(
            "/rivet/actors/firstHourRegister/actions/keep?key=a",
            {"args": ["tea"]},
            content_type="application/json",
        )
    assert response.status_code == 503
    assert "Retry-After" not in response  # retrying cannot create a table
    answer = response.json()
    assert answer["code"] == "unavailable"
    assert "'testapp_first_hour_receipt'" in answer["message"]
    assert "`manage.py makemigrations testapp`" in answer["message"]
    assert "then `manage.py migrate`" in answer["message"]


def test_a_missing_table_of_a_migrated_model_says_migrate(caplog, settings):
    settings.DEBUG = True
    error = OperationalError("no such table: testapp_note")
    error.__cause__ = _sqlite_error("no such table: testapp_note")
    with caplog.at_level("ERROR", logger="django_rivet"):
        coded = public_error(error)
    assert coded.message == (
        "The database lacks the table 'testapp_note': run `manage.py migrate` on "
        "the server. Nothing changed."
    )
    assert caplog.messages == [
        "a database table is missing: testapp_note; run `manage.py migrate`"
    ]


def _sqlite_error(text):
    import sqlite3

    error = sqlite3.OperationalError(text)
    error.sqlite_errorname = "SQLITE_ERROR"
    return error


# -- the dispatch check says why -------------------------------------------------------
def test_w004_says_why_celery_has_no_broker(monkeypatch, settings, tmp_path):
    from django.conf import settings as django_settings

    from django_rivet import dispatch

    monkeypatch.setattr(dispatch, "configured_name", lambda: "none")
    project = tmp_path / "mysite"
    project.mkdir()
    (project / "__init__.py").write_text("")  # forgets `from .celery import app`
    (project / "celery.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    monkeypatch.setattr(django_settings, "SETTINGS_MODULE", "mysite.settings")
    [message] = runtime_checks.check_dispatch()
    assert message.msg == (
        "Nothing dispatches due work in this process: CELERY_BROKER_URL is set, "
        "but mysite/celery.py is not loaded in this process (mysite/__init__.py "
        "does not import it), so Celery's default app has no broker."
    )
    (project / "celery.py").unlink()
    [message] = runtime_checks.check_dispatch()
    assert "the project has no Celery app (mysite/celery.py)" in message.msg
    monkeypatch.setattr(django_settings, "CELERY_BROKER_URL", None)
    [message] = runtime_checks.check_dispatch()
    assert "CELERY_BROKER_URL is not set" in message.msg


@pytest.mark.django_db
def test_rivet_worker_does_not_warn_that_nothing_runs_the_work(
    monkeypatch, capsys, settings
):
    from django_rivet import dispatch

    monkeypatch.setattr(dispatch, "configured_name", lambda: "none")
    assert [m.id for m in runtime_checks.check_dispatch()] == ["rivet.W004"]
    try:
        call_command("rivet_worker", "--once", skip_checks=False, verbosity=0)
    finally:
        dispatch.use(None)
    assert "rivet.W004" not in capsys.readouterr().err


# -- asgi.py imports in the wrong order ------------------------------------------------
def test_importing_routing_before_django_is_set_up_says_how_to_fix_asgi():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", "import django_rivet.routing"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: ")
    assert "call `django_asgi_app = get_asgi_application()` first" in last


# -- tests of workflows ----------------------------------------------------------------
@workflow(name="firstHourGreeter")
async def greeter(ctx, input):
    return await ctx.step("greet", lambda: f"hello {input}")


@pytest.mark.django_db
def test_register_temporarily_takes_workflows_too():
    with register_temporarily(Till, greeter):
        handle = workflows.start("firstHourGreeter", "ann")
        assert run_until_idle(handle) == "completed"
        assert actors.get_or_create("firstHourTill", "a").call("add", "tea") == 1
    assert handle.result() == "hello ann"
    with pytest.raises(TypeError, match="Actor subclasses and @workflow definitions"):
        with register_temporarily(len):
            pass


@pytest.mark.django_db
def test_a_parent_waiting_for_its_child_finishes_with_run_due():
    # docs/workflows.md, "Testing": the child is a workflow of its own.
    handle = workflows.start("waitsForChild", {"seconds": 0})
    assert run_until_idle(handle) == "sleeping"
    run_due()
    assert handle.status == "completed"
    assert handle.result() == {"child": "rested"}


def test_the_docs_name_what_a_message_timeout_raises():
    text = (ROOT / "docs" / "workflows.md").read_text()
    assert "it raises `MessageTimeoutError` (`workflow/message_timeout`)" in text


# -- a value outside the domain, made by the server -----------------------------------
class Ledger(Actor):
    name = "firstHourLedger"
    initial_state = {"total": "0"}

    @action
    def keep_decimal(self, ctx, amount: str) -> None:
        ctx.state["total"] = Decimal(amount)  # forgot str()

    @action
    def announce_decimal(self, ctx, amount: str) -> None:
        ctx.broadcast("total", Decimal(amount))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("action", "path"), [("keep_decimal", "state.total"), ("announce_decimal", "")]
)
def test_a_value_outside_the_domain_made_by_the_server_is_a_logged_500(
    client, caplog, action, path
):
    with register_temporarily(Ledger), caplog.at_level("ERROR", "django_rivet"):
        response = client.post(
            f"/rivet/actors/firstHourLedger/actions/{action}?key=a",
            {"args": ["9.99"]},
            content_type="application/json",
        )
    assert response.status_code == 500  # the server's fault, not the caller's
    answer = response.json()
    assert answer["code"] == "invalid_value"
    assert (
        "Decimal is not in the value domain (use str, or int cents)"
        in (answer["message"])
    )
    [logged] = [r.getMessage() for r in caplog.records if "value domain" in r.message]
    assert logged.startswith("actor code produced a value outside the value domain")
    assert path in logged and "Decimal" in logged
    # What the client sends outside the domain is still the client's (400).
    with register_temporarily(Ledger):
        response = client.post(
            "/rivet/actors/firstHourLedger/actions/keep_decimal?key=a",
            {"args": [{"$bytes": "!"}]},
            content_type="application/json",
        )
    assert response.status_code == 400


@workflow(name="firstHourInvoice")
async def invoice(ctx, input):
    return await ctx.step("price", lambda: Decimal("9.99"), max_retries=0)


@pytest.mark.django_db
def test_a_workflow_step_returning_a_decimal_says_the_same_with_the_hint():
    with register_temporarily(invoice):
        handle = workflows.start("firstHourInvoice")
        assert run_until_idle(handle) == "failed"
    with pytest.raises(Exception) as failed:
        handle.result()
    message = str(failed.value)
    assert "Decimal is not in the value domain (use str, or int cents)" in message
    assert message.count("cannot be stored") == 1


# -- WebSockets: no channel layer, and the embedded worker ----------------------------
@pytest.mark.django_db(transaction=True)
async def test_a_websocket_without_a_channel_layer_is_refused_naming_the_setting(
    settings,
):
    from django_rivet.testing import RivetCommunicator

    settings.CHANNEL_LAYERS = {}  # a project that never defined them
    comm = RivetCommunicator("counter", ["no-layer"])
    frame = await comm.handshake()
    code = await comm.receive_close()
    await comm.disconnect()
    assert frame["group"] == "rivet" and frame["code"] == "no_channel_layer"
    assert "define CHANNEL_LAYERS" in frame["message"]
    assert code == 4500


@pytest.mark.django_db(transaction=True)
async def test_the_first_websocket_starts_the_embedded_worker(settings):
    from asgiref.sync import sync_to_async

    from django_rivet.testing import RivetCommunicator
    from django_rivet.upkeep import worker

    assert not worker.embedded_worker_running()
    settings.RIVET = {**settings.RIVET, "EMBEDDED_WORKER": True}
    comm = RivetCommunicator("counter", ["first-socket"])
    try:
        assert (await comm.handshake())["type"] == "init"
        assert worker.embedded_worker_running()
    finally:
        await comm.disconnect()
        await sync_to_async(worker.stop_embedded_worker)()
