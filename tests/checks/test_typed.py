"""rivet.E105-E107: state versions and annotations that cannot be converted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass

from django.core import checks

from django_rivet import Actor, action
from django_rivet import checks as rivet_checks
from django_rivet.testing import register_temporarily
from django_rivet.workflows import workflow
from tests.support.servers import ROOT


class Opaque:
    """A class pydantic has no schema for."""


@dataclass
class Fine:
    n: int


def typed_messages():
    return [
        m
        for m in checks.run_checks()
        if m.id in ("rivet.E105", "rivet.E106", "rivet.E107")
    ]


class Versioned(Actor):
    name = "checkVersioned"
    state_version = 3


class BadVersion(Actor):
    name = "checkBadVersion"
    state_version = 0


class BadStateType(Actor):
    name = "checkBadStateType"
    state_type = "Cart"


class Unconvertible(Actor):
    name = "checkUnconvertible"
    events = {"fine": Fine}

    @action
    def take(self, ctx, thing: Opaque) -> Fine:
        return Fine(1)


class Unresolved(Actor):
    name = "checkUnresolved"

    @action
    def take(self, ctx, thing: NotDefinedAnywhere) -> int:  # noqa: F821
        return 1


def test_state_version_above_one_without_migrate_state_is_e105():
    with register_temporarily(Versioned):
        [found] = typed_messages()
    assert found.id == "rivet.E105"
    assert found.msg == rivet_checks.E105.format(
        cls="tests.checks.test_typed.Versioned", version=3
    )
    assert "migrate_state(self, ctx, state, from_version)" in found.hint


def test_a_state_version_or_state_type_of_the_wrong_kind_is_e107():
    with register_temporarily(BadVersion, BadStateType):
        found = typed_messages()
    assert [m.id for m in found] == ["rivet.E107", "rivet.E107"]
    assert "state_version = 0: it must be an integer, 1 or more" in found[0].msg
    assert "state_type = 'Cart': it must be a class" in found[1].msg


def test_annotations_that_cannot_be_converted_are_e106_at_start_up():
    with register_temporarily(Unconvertible, Unresolved):
        found = typed_messages()
    assert [m.id for m in found] == ["rivet.E106", "rivet.E106"]
    first, second = (m.msg for m in found)
    assert first.startswith(
        "Action 'take' of tests.checks.test_typed.Unconvertible cannot be converted: "
        "The annotation Opaque cannot be converted"
    )
    assert second.startswith(
        "Action 'take' of tests.checks.test_typed.Unresolved cannot be converted: "
        "The annotations of Unresolved.take cannot be resolved"
    )


@workflow(name="checkOpaqueWorkflow")
async def opaque_workflow(ctx, input: Opaque) -> int:
    return 1


def test_a_workflow_whose_input_cannot_be_converted_is_e106():
    with register_temporarily(opaque_workflow):
        [found] = typed_messages()
    assert found.msg.startswith(
        "The input or output of workflow 'checkOpaqueWorkflow' cannot be converted"
    )


# -- without pydantic -----------------------------------------------------------------
WITHOUT_PYDANTIC = textwrap.dedent(
    """
    import importlib.abc, json, sys
    from decimal import Decimal

    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("pydantic", "pydantic_core"):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, Blocked())
    from django.conf import settings
    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth",
                        "channels", "django_rivet"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                               "NAME": sys.argv[1]}},
        CHANNEL_LAYERS={"default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer"}},
        RIVET={"DISPATCH_BACKEND": "none"},
        USE_TZ=True,
    )
    import django
    django.setup()
    from django.core import checks
    from django.core.management import call_command
    from django_rivet import Actor, action, actors
    from django_rivet.actors import registry

    class Plain(Actor):
        name = "plain"
        initial_state = {"n": 0}

        @action
        def add(self, ctx, by: int, note: str | None = None) -> int:
            ctx.state["n"] += by
            return ctx.state["n"]

    class Priced(Actor):
        name = "priced"

        @action
        def pay(self, ctx, amount: Decimal) -> str:
            return str(amount)

    registry.register(Plain)
    registry.register(Priced)
    call_command("migrate", verbosity=0)
    found = [(m.id, m.msg, m.hint) for m in checks.run_checks()
             if m.id == "rivet.E106"]
    plain = actors.get_or_create("plain", "k").call("add", 2)
    try:
        actors.get_or_create("priced", "k").call("pay", "1.5")
    except ImportError as exc:
        refused = str(exc)
    print(json.dumps({"found": found, "plain": plain, "refused": refused,
                      "loaded": [m for m in sys.modules if m.startswith("pydantic")]}))
    """
)


def test_without_pydantic_builtin_annotations_work_and_others_are_e106(tmp_path):
    env = dict(os.environ)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), env.get("PYTHONPATH")])
    )
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_PYDANTIC, str(tmp_path / "db.sqlite3")],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["plain"] == 2
    assert result["loaded"] == []
    [(check_id, text, hint)] = result["found"]
    assert text.startswith("Action 'pay' of ")
    assert "needs pydantic: pip install 'django-rivet[types]'" in text
    assert hint.startswith("Install the types extra: pip install 'django-rivet[types]'")
    assert "pip install 'django-rivet[types]'" in result["refused"]
