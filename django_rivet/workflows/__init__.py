"""The Django side of durable workflows (SPEC 5.2).

- :mod:`.registry`: workflow name -> definition, discovered from apps;
- :mod:`.driver`: :class:`DjangoDriver`, the engine driver on the
  ``WorkflowKV`` / ``WorkflowMessage`` tables, fenced by the run's lease;
- :mod:`.leases`: claim, renew (heartbeat) and release a ``Workflow`` row;
- :mod:`.execution`: run a workflow until it pauses (the Celery task, the
  in-process worker, ``run_until_idle``);
- :mod:`.wakeups`: Celery tasks for due workflows and the sweep step;
- :mod:`.operations`: cancel, recover, replay, send, wake (handles, admin).

The public API is :mod:`django_rivet.workflows`; the engine core
(:mod:`django_rivet.workflow`) stays free of Django.
"""
