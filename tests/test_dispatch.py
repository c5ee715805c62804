"""Dispatch without a broker (issue 12): requests never wait for AMQP.

Reproduced in a fresh process, as a project without ``CELERY_BROKER_URL``
starts: Celery would otherwise try amqp://localhost:5672 for ~6 s per
published task. Every socket connection the process attempts is recorded
with an audit hook.
"""

import os
import textwrap

import pytest

from tests.support.servers import ROOT, run_python

SCRIPT = textwrap.dedent(
    """
    import json, os, sys

    connects = []
    sys.addaudithook(
        lambda event, args: connects.append(repr(args[1]))
        if event == "socket.connect" else None
    )
    import django

    django.setup()
    if os.environ.get("WITH_CELERY_APP"):
        from celery import Celery

        app = Celery("project")
        app.config_from_object("django.conf:settings", namespace="CELERY")
        app.set_current()
    from django.core import checks
    from django.core.management import call_command

    from django_rivet import actors, dispatch

    call_command("migrate", verbosity=0)
    alarm = actors.get_or_create("alarmClock", "no-broker")
    alarm.call("set_alarm", 60, "later")  # publishes a wake-up after commit
    print(json.dumps({
        "backend": dispatch.configured_name(),
        "checks": sorted({m.id for m in checks.run_checks()}),
        "connects": connects,
    }))
    """
)


@pytest.mark.parametrize("with_celery_app", [False, True], ids=["no-app", "app"])
def test_without_a_broker_scheduling_publishes_nothing_and_w004_says_so(
    tmp_path, with_celery_app
):
    (tmp_path / "nobroker_settings.py").write_text(
        "from tests.settings import *  # noqa\n"
        "del CELERY_BROKER_URL\n"
        "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3',"
        " 'NAME': ':memory:'}}\n"
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CELERY_", "RIVET_", "DJANGO_"))
    }
    env["DJANGO_SETTINGS_MODULE"] = "nobroker_settings"
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    if with_celery_app:
        env["WITH_CELERY_APP"] = "1"
    report = run_python(SCRIPT, env)
    assert report["backend"] == "none"
    assert "rivet.W004" in report["checks"]
    assert report["connects"] == []  # no broker connection was even tried
