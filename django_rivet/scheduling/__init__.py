"""Scheduling: durable timers and queues of actors, and what fires them.

- :mod:`.schedules` (``ctx.schedule``), :mod:`.cron` (``ctx.cron``, with the
  timing rules in :mod:`django_rivet.crontab`) and :mod:`.queues` (``ctx.queue``,
  ``handle.send``) write their rows in the invoking transaction;
- :mod:`.claims` is the one "claim, invoke, record" protocol every firing
  follows (:mod:`.schedule_runs`, :mod:`.cron_runs`, :mod:`.queue_delivery`);
- :mod:`.due` is what the sweeper and the worker (:mod:`django_rivet.upkeep`)
  ask of scheduling: repair lost work, say when the next is due. The Celery
  tasks (:mod:`django_rivet.tasks`) are thin entry points over these;
- :mod:`.retries` is the retry policy of failed work (attempts, backoff,
  tracebacks).

This package builds on the actor runtime (every firing goes through
``invoke``), dispatch, storage and the foundation, never on the workflow
runtime: ``@workflow(cron=...)`` ticks live beside the workflow queues
(:mod:`django_rivet.workflows.scheduled`). The transport and upkeep build
on it.
"""
