"""Celery app of the test suite, for real workers started by the tests."""

import os
from typing import Any

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

app = Celery("tests")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


# Beat (``celery worker -B`` in the scheduling tests) runs the django-rivet
# sweep; added once the configuration is read, not at import time.
@app.on_after_configure.connect
def _add_rivet_sweep(sender: Any, **kwargs: Any) -> None:
    from django_rivet.tasks import beat_schedule

    sender.conf.beat_schedule = {**beat_schedule(), **sender.conf.beat_schedule}
