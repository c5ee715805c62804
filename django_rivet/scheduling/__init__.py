"""Scheduling: durable timers and queues of actors, and what fires them.

- :mod:`.schedules` (``ctx.schedule``), :mod:`.cron` (``ctx.cron``, with the
  timing rules in :mod:`.crontab`) and :mod:`.queues` (``ctx.queue``,
  ``handle.send``) write their rows in the invoking transaction;
- :mod:`.claims` is the one "claim, invoke, record" protocol every firing
  follows (:mod:`.schedules`, :mod:`.cron_runs`, :mod:`.queues`);
- :mod:`.sweeper` repairs what a broker or a crash lost; :mod:`.worker` is
  the in-process loop (``rivet_worker``, the embedded worker). The Celery
  tasks (:mod:`django_rivet.tasks`) are thin entry points over these.

This package builds on the actor runtime (every firing goes through
``invoke``), dispatch, storage and the foundation. It never imports the
workflow runtime or the transport: the app config registers their sweep
steps and due work here at start-up.
"""
