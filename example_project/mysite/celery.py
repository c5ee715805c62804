"""The Celery app of the example project (``make run-celery``)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")

app = Celery("mysite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def add_rivet_sweep(sender, **kwargs):
    """Let beat (``celery worker -B``) run the django-rivet sweep."""
    from django_rivet.tasks import beat_schedule

    sender.conf.beat_schedule = {**beat_schedule(), **sender.conf.beat_schedule}
