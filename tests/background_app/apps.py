import json
import os
import time

from django.apps import AppConfig


def record(entry):
    """Append one JSON line to RIVET_TEST_RECORD: outside the database, so
    failed attempts (whose writes roll back) leave a trace."""
    path = os.environ.get("RIVET_TEST_RECORD")
    if path:
        with open(path, "a") as file:
            file.write(json.dumps({**entry, "at": time.time()}) + "\n")


def on_work_failed(sender, kind, actor_id, action, id, error, **kwargs):
    record({"signal": "work_failed", "kind": kind, "id": str(id), "error": str(error)})


class BackgroundAppConfig(AppConfig):
    name = "tests.background_app"
    label = "background_app"

    def ready(self):
        from django_rivet.signals import work_failed

        work_failed.connect(on_work_failed, dispatch_uid="background_app")
