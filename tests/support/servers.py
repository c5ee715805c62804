"""Real servers for the tests: Redis, daphne and Celery workers on loopback.

Every server is started from the project's own scripts or executables and
stopped by pid when the block exits, even when the test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.polling import await_for, wait_for

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def free_port() -> int:
    """Return a TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(
    port: int, timeout: float = 60.0, proc: subprocess.Popen | None = None
) -> None:
    """Wait until something listens on 127.0.0.1:port (``proc`` must not exit)."""

    def listening() -> bool:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited early with code {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
        except OSError:
            return False
        return True

    wait_for(listening, timeout, what=f"a server listening on port {port}")


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """TERM, wait, then KILL."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(5)


async def wait_until_no_connection_rows(timeout: float = 60.0) -> None:
    """Wait for servers to finish disconnect work before the test DB is flushed.

    A server runs ``on_disconnect`` after a socket closed; if the flush and
    that cleanup run at once they lock the same tables in opposite orders (a
    deadlock on PostgreSQL).
    """
    from asgiref.sync import sync_to_async

    from django_rivet.models import Connection

    await await_for(
        sync_to_async(lambda: not Connection.objects.exists()),
        timeout,
        what="the servers' disconnect work (no Connection row left)",
    )


def kill9(proc: subprocess.Popen) -> None:
    """Kill a server abruptly (a crash)."""
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait(10)


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """Start redis-server (installing it if missing); yield its URL."""
    folder = tempfile.mkdtemp(prefix="rivet-redis-")
    url = subprocess.run(
        [str(ROOT / "scripts" / "redis.sh"), "start", folder],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    try:
        yield url
    finally:
        subprocess.run(
            [str(ROOT / "scripts" / "redis.sh"), "stop", folder], check=False
        )


def run_python(code: str, env: dict[str, str], timeout: float = 120) -> Any:
    """Run ``python -c code`` in a fresh process; return its last line, as JSON.

    For what only a fresh process shows (imports, settings read at start-up):
    the script prints a JSON report last.
    """
    done = subprocess.run(
        [PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def server_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess server sharing this test's database."""
    from django.db import connection

    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    env["RIVET_SERVER_DB_NAME"] = str(connection.settings_dict["NAME"])
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), env.get("PYTHONPATH")])
    )
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@contextlib.contextmanager
def daphne_server(
    env: dict[str, str] | None = None, port: int | None = None
) -> Iterator[str]:
    """Run ``daphne tests.support.asgi:application``; yield ``http://127.0.0.1:port``."""
    with daphne_process(env, port) as (url, _proc):
        yield url


# The servers (and WebSocket implementations) docs/production.md supports.
SERVER_KINDS = ("daphne", "uvicorn")


def uvicorn_command(port: int, ws: str = "websockets-sansio") -> list[str]:
    """The command line of ``uvicorn tests.support.asgi:application`` on ``port``."""
    return [
        PYTHON, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
        "--ws", ws, "--lifespan", "off", "--log-level", "warning",
        "tests.support.asgi:application",
    ]  # fmt: skip


@contextlib.contextmanager
def uvicorn_server(
    env: dict[str, str] | None = None,
    port: int | None = None,
    ws: str = "websockets-sansio",
) -> Iterator[str]:
    """Run ``uvicorn tests.support.asgi:application``; yield ``http://127.0.0.1:port``.

    ``ws``: uvicorn's WebSocket implementation (``websockets-sansio``, its
    default, or ``wsproto``).
    """
    port = port or free_port()
    proc = subprocess.Popen(
        uvicorn_command(port, ws), cwd=ROOT, env=env or server_env()
    )
    try:
        wait_for_port(port, proc=proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


@contextlib.contextmanager
def asgi_process(
    kind: str, env: dict[str, str] | None = None, log: str | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """Run ``tests.support.asgi`` under ``kind``: daphne, uvicorn or uvicorn-wsproto.

    Yields ``(url, process)``; the process's output goes to ``log`` if given.
    """
    port = free_port()
    if kind == "daphne":
        command = daphne_command(port)
    else:
        ws = "wsproto" if kind.endswith("wsproto") else "websockets-sansio"
        command = uvicorn_command(port, ws)
    output = open(log, "wb") if log else None  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env or server_env(),
        stdout=output,
        stderr=subprocess.STDOUT if output else None,
    )
    try:
        wait_for_port(port, proc=proc)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        stop_process(proc)
        if output is not None:
            output.close()


def rss_kib(pid: int) -> int:
    """Resident memory of a process, in KiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@contextlib.contextmanager
def celery_worker(
    env: dict[str, str] | None = None,
    *,
    beat: bool = False,
    pool: str = "solo",
    concurrency: int = 1,
    name: str = "worker",
) -> Iterator[subprocess.Popen]:
    """Run a Celery worker of ``tests.support.celery_app`` on RIVET_TEST_REDIS_URL."""
    folder = tempfile.mkdtemp(prefix="rivet-celery-")
    args = [
        PYTHON, "-m", "celery", "-A", "tests.support.celery_app", "worker",
        "--pool", pool, "--concurrency", str(concurrency),
        "--without-mingle", "--without-gossip", "--loglevel", "INFO",
        "-n", f"{name}-{os.getpid()}-{time.monotonic_ns()}@%h",
    ]  # fmt: skip
    if beat:
        args += ["-B", "-s", os.path.join(folder, "beat-schedule")]
    proc = subprocess.Popen(args, cwd=ROOT, env=env or server_env())
    try:
        yield proc
    finally:
        stop_process(proc, timeout=12)
        shutil.rmtree(folder, ignore_errors=True)  # 200 of them a run otherwise


@contextlib.contextmanager
def celery_beat(env: dict[str, str], schedule_file: str | os.PathLike[str]):
    """Run ``celery beat`` (the sweep) alone, without a worker; stop it on exit."""
    proc = subprocess.Popen(
        [PYTHON, "-m", "celery", "-A", "tests.support.celery_app", "beat",
         "-s", str(schedule_file), "--loglevel", "WARNING"],
        cwd=ROOT,
        env=env,
    )  # fmt: skip
    try:
        yield proc
    finally:
        stop_process(proc)


def daphne_command(port: int) -> list[str]:
    """The command line of ``daphne tests.support.asgi:application`` on ``port``."""
    return [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
            "tests.support.asgi:application"]  # fmt: skip


@contextlib.contextmanager
def daphne_process(
    env: dict[str, str] | None = None, port: int | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """Like :func:`daphne_server`, yielding ``(url, process)`` for crash tests."""
    port = port or free_port()
    proc = subprocess.Popen(daphne_command(port), cwd=ROOT, env=env or server_env())
    try:
        wait_for_port(port, proc=proc)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        stop_process(proc)


@contextlib.contextmanager
def celery_broker(url: str) -> Iterator[None]:
    """Point this process's Celery app at ``url`` (tasks sent after commit)."""
    from tests.support.celery_app import app

    def reset_pools() -> None:
        # Connection and producer pools are cached per broker URL.
        app._pool = None
        app.amqp._producer_pool = None

    # Under the app's "CELERY" namespace, Celery 5.6 reads CELERY_BROKER_URL
    # before broker_url in every map: a plain broker_url set here lost to
    # the Django setting, and tasks went to the settings' broker.
    previous = app.conf.broker_url
    app.conf["CELERY_BROKER_URL"] = url
    reset_pools()
    try:
        yield
    finally:
        app.conf["CELERY_BROKER_URL"] = previous
        reset_pools()


@contextlib.contextmanager
def example_server(
    folder: str | os.PathLike[str], port: int | None = None
) -> Iterator[tuple[str, str, str]]:
    """Run ``scripts/run.sh`` (what ``make run`` runs) on a database in ``folder``.

    Yields ``(url, user, password)`` from its banner, once the banner is out.
    """
    port = port or free_port()
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DJANGO_", "RIVET_"))
        and name not in ("DATABASE_URL", "REDIS_URL")
    }
    env.update(
        PORT=str(port),
        HOST="127.0.0.1",
        SQLITE_PATH=os.path.join(folder, "example.sqlite3"),
        VENV=sys.prefix,
        PYTHONUNBUFFERED="1",
    )
    log = open(os.path.join(folder, "run.log"), "w+b")
    proc = subprocess.Popen(
        [str(ROOT / "scripts" / "run.sh")],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def read_log() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")

        def banner() -> str | None:
            if proc.poll() is not None:
                raise RuntimeError("scripts/run.sh failed:\n" + read_log())
            text = read_log()
            return text if "Ctrl-C stops everything" in text else None

        try:
            text = wait_for(banner, 120, what="scripts/run.sh's banner")
        except AssertionError:
            raise RuntimeError("scripts/run.sh failed:\n" + read_log()) from None
        url = re.search(r"ready in [\d.]+ s: (\S+)/\n", text).group(1)
        user, password = re.search(r"user (\S+), password (\S+)", text).groups()
        yield url, user, password
    finally:
        stop_process(proc, timeout=30)
        log.close()
