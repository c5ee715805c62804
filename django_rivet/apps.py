"""App configuration: autodiscovery, and the wiring of the layers.

``ready()`` binds what ``ctx`` offers from the layers above the actor
runtime (schedules, cron, queues, workflows, the server-side client:
:mod:`django_rivet.actors.services`), so that the actor runtime never
imports them. The sweeper's steps and the worker's due work are listed in
:mod:`django_rivet.upkeep`, which sits above every layer it serves.
"""

from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.utils.module_loading import autodiscover_modules


class RivetConfig(AppConfig):
    """Discover ``actors.py`` and ``workflows.py`` in every installed app."""

    name = "django_rivet"
    label = "django_rivet"
    verbose_name = "Rivet actors and workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register checks, discover definitions and wire the layers.

        No database I/O here, and safe to run twice: every binding replaces
        its own earlier one.
        """
        # Imported here, not at module level: the app config module is
        # imported before the app registry is ready, and these import models.
        from . import (
            checks,  # noqa: F401  (registers the system checks)
            observability,
        )
        from .actors import cache, client, registry, services, spine
        from .models import db
        from .scheduling import cron, queues, schedules
        from .task_backend import compat as tasks_compat
        from .task_backend import register_workflow as register_task_workflow
        from .upkeep import worker
        from .workflows import client as workflows
        from .workflows import registry as workflow_registry

        autodiscover_modules("actors", "workflows")
        registry.register_discovered()
        workflow_registry.discover()
        if tasks_compat.AVAILABLE:
            # Django's tasks run as the built-in ``rivet.task`` workflow.
            register_task_workflow()

        services.bind(
            actors=client,
            schedule=schedules.ActorSchedules,
            cron=cron.ActorCron,
            queue=queues.ActorQueue,
            queue_sender=queues,
            workflows=workflows,
        )
        # Django's SQLite test database (in memory, shared cache) fails at
        # once on a locked table; its statements wait as on a file instead.
        connection_created.connect(
            db.wait_for_shared_cache_locks, dispatch_uid="rivet_shared_cache_locks"
        )
        # Spans and counts of workflow steps, when an observability extra is in.
        observability.install()
        # Idle processes evict their actors too (not only after invocations).
        cache.watch_idle(spine.evict_idle)
        # RIVET["EMBEDDED_WORKER"]: the worker thread starts with the first
        # request this process serves (never in commands or tests otherwise).
        worker.connect_embedded_worker()
