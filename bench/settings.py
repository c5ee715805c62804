"""Django settings of the benchmarks (one database per process).

The runner passes everything through the environment:

* ``RIVET_BENCH_DATABASE_URL=postgres://...`` selects PostgreSQL (started
  with default durability by the runner); otherwise SQLite in WAL mode at
  ``RIVET_BENCH_SQLITE``;
* ``RIVET_BENCH_REDIS_URL`` selects the Redis channel layer and Celery
  broker; otherwise the in-memory layer and no broker.
"""

import importlib.util
import os
import sys
from urllib.parse import unquote, urlsplit

# The quickstart installs no observability extra (django-rivet[redis,client]),
# so its invocations trace and count nothing. The development install has
# both packages; hide them from every bench process (servers included) so a
# measure sees what the quickstart runs. RIVET_BENCH_OBSERVABILITY=1 keeps
# them (spans without an SDK, Prometheus metrics).
if os.environ.get("RIVET_BENCH_OBSERVABILITY") != "1":
    for _package in ("opentelemetry", "prometheus_client"):
        sys.modules.setdefault(_package, None)  # type: ignore[assignment]

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
# The quickstart's project (``startproject`` plus django-rivet): the apps and
# the middleware every request of a deployment goes through, so each measure
# serves the stack users run (bench/asgi.py is the quickstart's asgi.py).
INSTALLED_APPS = [
    "daphne",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "channels",
    "django_rivet",
    "bench.benchapp",
]
# P16: Django's Tasks framework (built in from Django 6.0, the backport on
# 5.2) on django-rivet ("default") and on django-tasks-db ("db", its own
# worker), side by side on one database.
if importlib.util.find_spec("django.tasks") is None:
    INSTALLED_APPS.append("django_tasks")
if importlib.util.find_spec("django_tasks_db") is not None:
    INSTALLED_APPS.append("django_tasks_db")
TASKS = {
    "default": {"BACKEND": "django_rivet.task_backend.RivetTaskBackend"},
    "db": {"BACKEND": "django_tasks_db.DatabaseBackend"},
}
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "bench.site"
ASGI_APPLICATION = "bench.asgi.application"

REDIS_URL = os.environ.get("RIVET_BENCH_REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py >= 8 defaults socket_timeout to 5 s, as long as
                # channels_redis's BZPOPMIN wait: every consumer idle for 5 s
                # then dies with 1011. No read timeout, as redis-py < 8 had.
                "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
                "capacity": 5000,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_IGNORE_RESULT = True

_url = os.environ.get("RIVET_BENCH_DATABASE_URL", "")
if _url:
    _parts = urlsplit(_url)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _parts.path.lstrip("/") or "postgres",
            "USER": unquote(_parts.username or ""),
            "HOST": _parts.hostname,
            "PORT": str(_parts.port),
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("RIVET_BENCH_SQLITE", "/tmp/rivet-bench.sqlite3"),
            "OPTIONS": {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"},
        }
    }
# Keep the database connection between requests, as a deployment would; the
# baselines and rivet get the same treatment.
DATABASES["default"]["CONN_MAX_AGE"] = None

# The embedded worker's dispatch (no broker) unless a leg runs Celery: a
# Celery dispatch without a configured app would try a default AMQP broker.
RIVET = {
    "EMBEDDED_WORKER": os.environ.get("RIVET_BENCH_EMBEDDED", "1") == "1",
    # P14: queues whose limits admit every start at once (the second one
    # partitioned).
    "WORKFLOW_QUEUES": {
        "bench": {"concurrency": 1_000_000},
        "benchPartitioned": {
            "concurrency": 1_000_000,
            "partition_concurrency": 1_000_000,
        },
    },
}
if os.environ.get("RIVET_BENCH_SLEEP_TIMEOUT"):
    RIVET["SLEEP_TIMEOUT"] = float(os.environ["RIVET_BENCH_SLEEP_TIMEOUT"])
if os.environ.get("RIVET_BENCH_ACTOR_CACHE_SIZE"):
    RIVET["ACTOR_CACHE_SIZE"] = int(os.environ["RIVET_BENCH_ACTOR_CACHE_SIZE"])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
