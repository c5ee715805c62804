"""The Django side of durable workflows (SPEC 5.2).

- :mod:`.registry`: workflow name -> definition, discovered from apps;
- :mod:`.driver`: :class:`DjangoDriver`, the engine driver on the
  ``WorkflowKV`` / ``WorkflowMessage`` tables, fenced by the run's lease;
- :mod:`.leases`: claim, renew and release the lease on a ``Workflow`` row;
- :mod:`.execution`: run a workflow until it pauses (Celery task, worker,
  ``run_until_idle``), schedule its wake-up, and the operations handles and
  the admin use (cancel, recover, replay from a step).

The public API is :mod:`django_rivet.workflows`; the engine core
(:mod:`django_rivet.workflow`) stays free of Django.
"""
