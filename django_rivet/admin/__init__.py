"""The inspector: every runtime record in the Django admin.

Importing this package registers the model admins (Django's admin
autodiscovery imports ``django_rivet.admin``). Runtime records are
read-only; state and history are shown decoded; the actions (destroy an
actor, fire a schedule now, retry failed schedules, messages and Django
tasks, cancel/recover/wake/replay a workflow, send it a message, pause,
resume or run a scheduled workflow) go through the runtime, never around
it. The overview page (:mod:`.overview`) sums up what needs attention.
"""

from . import actors, overview, scheduling, tasks, workflow_scheduling, workflows

__all__ = [
    "actors",
    "overview",
    "scheduling",
    "tasks",
    "workflow_scheduling",
    "workflows",
]
