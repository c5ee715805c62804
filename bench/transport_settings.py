"""Settings of the transport benchmark: bench.settings plus its routes."""

from bench.settings import *  # noqa: F403

ROOT_URLCONF = "bench.transport_site"
ASGI_APPLICATION = "bench.transport_asgi.application"
# Keep the database connection between requests, as a deployment would; the
# baselines and rivet get the same treatment.
DATABASES["default"]["CONN_MAX_AGE"] = None  # noqa: F405
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
