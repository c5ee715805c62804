"""App configuration: autodiscovery, and the wiring of the layers.

``ready()`` is the one place that knows every layer. It binds what ``ctx``
offers from the layers above the actor runtime (schedules, cron, queues,
workflows, the server-side client: :mod:`django_rivet.actors.services`) and
registers the workflow runtime's and the transport's sweep steps and due
work with the scheduler, so that no lower layer imports a higher one.
"""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class RivetConfig(AppConfig):
    """Discover ``actors.py`` and ``workflows.py`` in every installed app."""

    name = "django_rivet"
    label = "django_rivet"
    verbose_name = "Rivet actors and workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register checks, discover definitions and wire the layers.

        No database I/O here, and safe to run twice: every registration
        replaces its own earlier one.
        """
        # Imported here, not at module level: the app config module is
        # imported before the app registry is ready, and these import models.
        from . import (
            checks,  # noqa: F401  (registers the system checks)
            observability,
            workflows,
        )
        from .actors import cache, client, connections, registry, services, spine
        from .scheduling import (
            cron,
            queues,
            schedules,
            sweeper,
            worker,
            workflow_schedules,
        )
        from .workflow_runtime import execution, wakeups
        from .workflow_runtime import queues as workflow_queues
        from .workflow_runtime import registry as workflow_registry

        autodiscover_modules("actors", "workflows")
        registry.register_discovered()
        workflow_registry.discover()

        services.bind(
            actors=client,
            schedule=schedules.ScheduleAPI,
            cron=cron.CronAPI,
            queue=queues.QueueAPI,
            queue_sender=queues,
            workflows=workflows,
        )
        sweeper.register_step(
            sweeper.SweepStep("workflow_schedules", workflow_schedules.sweep),
            before="purge_finished",
        )
        sweeper.register_step(
            sweeper.SweepStep("workflow_queues", workflow_queues.admit_due),
            before="purge_finished",
        )
        sweeper.register_step(
            sweeper.SweepStep("workflows", wakeups.sweep), before="purge_finished"
        )
        sweeper.register_step(
            sweeper.SweepStep("connections", connections.sweep_stale_connections),
            before="purge_finished",
        )
        worker.register_due_work(
            worker.DueWork(
                "workflow_schedules",
                lambda limit: workflow_schedules.run_due_ticks(limit),
                workflow_schedules.next_tick_due,
            )
        )
        worker.register_due_work(
            worker.DueWork(
                "workflow_queues",
                lambda limit: workflow_queues.admit_due(limit),
                workflow_queues.next_admission_at,
            )
        )
        worker.register_due_work(
            worker.DueWork(
                "workflows",
                lambda limit: execution.run_due(limit=limit),
                wakeups.next_due_at,
            )
        )
        # Spans and counts of workflow steps, when an observability extra is in.
        observability.install()
        # Idle processes evict their actors too (not only after invocations).
        cache.watch_idle(spine.evict_idle)
        # RIVET["EMBEDDED_WORKER"]: the worker thread starts with the first
        # request this process serves (never in commands or tests otherwise).
        worker.connect_embedded_worker()
