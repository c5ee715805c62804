# Load the Celery app with Django so @shared_task (django_rivet.tasks) sends
# to the configured broker from the web process too.
from .celery import app as celery_app

__all__ = ["celery_app"]
