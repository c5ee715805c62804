"""Django settings for the benchmarks (one database per process).

``RIVET_BENCH_DATABASE_URL=postgres://...`` selects PostgreSQL (started with
default durability by the bench); otherwise SQLite in WAL mode at
``RIVET_BENCH_SQLITE``.
"""

import os
from urllib.parse import unquote, urlsplit

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "channels",
    "django_rivet",
    "bench.benchapp",
]
ROOT_URLCONF = "bench.urls"
ASGI_APPLICATION = "bench.asgi.application"
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
CELERY_BROKER_URL = os.environ.get("RIVET_BENCH_REDIS_URL", "memory://")

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
