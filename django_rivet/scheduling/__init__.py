"""Scheduling: durable timers and queues of actors, and what fires them.

- :mod:`.schedules` (``ctx.schedule``), :mod:`.cron` (``ctx.cron``, with the
  timing rules in :mod:`.crontab`) and :mod:`.queues` (``ctx.queue``,
  ``handle.send``) write their rows in the invoking transaction;
- :mod:`.claims` is the one "claim, invoke, record" protocol every firing
  follows (:mod:`.schedule_runs`, :mod:`.cron_runs`, :mod:`.queue_delivery`);
- :mod:`.sweeper` repairs what a broker or a crash lost; :mod:`.worker` is
  the in-process loop (``rivet_worker``, the embedded worker). The Celery
  tasks (:mod:`django_rivet.tasks`) are thin entry points over these;
- :mod:`.retries` is the retry policy of failed work (attempts, backoff,
  tracebacks); :mod:`.workflow_schedules` starts ``@workflow(cron=...)``
  workflows on their ticks.

This package builds on the actor runtime (every firing goes through
``invoke``), dispatch, storage and the foundation. Only
:mod:`.workflow_schedules` imports the workflow runtime (it starts
workflows); the transport never. The app config registers the workflow
runtime's and the transport's sweep steps and due work at start-up.
"""
