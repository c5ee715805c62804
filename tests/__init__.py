# Load the suite's Celery app with Django, as a project's package does, so
# management commands run with tests.settings see a configured broker.
from .support.celery_app import app as celery_app

__all__ = ["celery_app"]
