"""``manage.py rivet_inspect``: lists and details of actors and workflows."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_rivet import actors, workflows
from django_rivet.models import Actor
from django_rivet.testing import run_until_idle

pytestmark = pytest.mark.django_db(transaction=True)


def inspect(*args):
    out = StringIO()
    call_command("rivet_inspect", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def world():
    counter = actors.get_or_create("counter", ["acme", "inspect"])
    counter.call("increment", 7)
    done = workflows.start("greet", {"name": "ann"}, id="inspected")
    run_until_idle(done)
    workflows.start("approval", {}, id="waiting")
    run_until_idle(workflows.get("waiting"))
    return counter


def test_lists_actors_and_workflows(world):
    text = inspect()
    assert "Actors:" in text and "Workflows:" in text
    assert str(world.actor_id) in text
    assert "inspected  greet  completed" in text
    assert "waiting  approval  sleeping waiting_for=approve" in text


def test_lists_filter_by_status_and_name(world):
    data = json.loads(inspect("workflows", "--status", "sleeping", "--json"))
    assert [w["id"] for w in data["workflows"]] == ["waiting"]
    data = json.loads(inspect("actors", "--name", "counter", "--json"))
    assert [a["key"] for a in data["actors"]] == [["acme", "inspect"]]
    assert "workflows" not in data


def test_shows_one_workflow_with_its_history(world):
    text = inspect("workflow", "inspected")
    assert "status: completed" in text
    assert 'output: "hello ann"' in text
    assert "history:" in text and "step" in text and "greet" in text
    data = json.loads(inspect("workflow", "inspected", "--json"))
    assert data["input"] == {"name": "ann"}
    assert [(e["kind"], e["location"]) for e in data["history"]] == [("step", "greet")]


def test_shows_one_actor_by_id_or_by_name_and_key(world):
    by_id = json.loads(inspect("actor", str(world.actor_id), "--json"))
    by_key = json.loads(inspect("actor", "counter", "acme", "inspect", "--json"))
    assert by_id == by_key
    assert by_id["state"] == {"count": 7}
    assert "count" in inspect("actor", str(world.actor_id))


def test_unknown_ids_are_command_errors(world):
    with pytest.raises(CommandError):
        inspect("workflow", "nope")
    with pytest.raises(CommandError):
        inspect("actor", "counter", "nobody")
    with pytest.raises(CommandError):
        inspect("workflow")


@pytest.mark.pg
def test_rivet_inspect_does_not_print_terminal_escapes_from_stored_values():
    counter = actors.get_or_create("counter", ["\x1b[31mred", "\x9b2J"])
    counter.call("increment", 1)
    Actor.objects.filter(pk=counter.actor_id).update(name="counter")
    out = StringIO()
    call_command("rivet_inspect", "actor", str(counter.actor_id), stdout=out)
    call_command("rivet_inspect", "actors", stdout=out)
    call_command("rivet_inspect", "actors", "--json", stdout=out)
    text = out.getvalue()
    assert "\x1b" not in text and "\x9b" not in text
    # Still shown, escaped.
    assert "\\u001b[31mred" in text
