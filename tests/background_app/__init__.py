"""Actors and workflows the background-work tests run on real Celery workers.

Installed only by ``tests.settings.background`` (the workers' settings): its
scheduled workflow must not tick in the rest of the suite. The test process
registers the same definitions temporarily.
"""
