"""A production-shaped deployment on loopback, for the load and fault tests.

PostgreSQL (a private cluster, so a test can stop and start it), Redis (on a
fixed port, so a test can restart it), N daphne processes and optionally
Celery workers and beat, all sharing one database and one channel layer, as
docs/production.md describes. Servers are started from the project's own
scripts and executables and stopped by pid, even when a test fails.

The test process reaches the database with psycopg directly (:meth:`sql`):
its own Django settings point at the suite's database, not at this one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.polling import wait_for
from tests.support.servers import (
    PYTHON,
    ROOT,
    daphne_command,
    free_port,
    stop_process,
    wait_for_port,
)

SETTINGS = "tests.settings.load"


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.getuid() == 0 else args


def _pg_bin() -> Path:
    versions = sorted(Path("/usr/lib/postgresql").iterdir(), key=lambda p: p.name)
    return versions[-1] / "bin"


class Postgres:
    """A throwaway cluster from ``scripts/pg.sh`` that can be stopped and started."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.url = subprocess.run(
            [str(ROOT / "scripts" / "pg.sh"), "start", folder],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        self.port = int(Path(folder, "port").read_text())

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            _as_postgres(
                [str(_pg_bin() / "pg_ctl"), "-D", f"{self.folder}/data", *args]
            ),
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        """Stop the server (fast shutdown: sessions are cut, as in an outage)."""
        self._ctl("-m", "fast", "-w", "stop")

    def start(self) -> None:
        """Start it again on the same port, as ``scripts/pg.sh`` configured it."""
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} "
            "-c max_connections=200 -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off"
        )
        self._ctl("-l", f"{self.folder}/data/server.log", "-o", options, "-w", "start")

    def destroy(self) -> None:
        """Stop the server and delete the cluster."""
        subprocess.run(
            [str(ROOT / "scripts" / "pg.sh"), "stop", self.folder], check=False
        )


class Redis:
    """redis-server on a fixed port: restartable (its data is lost, as a crash)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.start()

    @property
    def pidfile(self) -> str:
        return os.path.join(self.folder, "redis.pid")

    def start(self) -> None:
        """Start redis-server (no persistence: a restart forgets everything)."""
        subprocess.run(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
             "--save", "", "--appendonly", "no", "--daemonize", "yes",
             "--pidfile", self.pidfile, "--logfile", f"{self.folder}/redis.log",
             "--dir", self.folder],
            check=True,
        )  # fmt: skip
        wait_for_port(self.port, timeout=10)

    def stop(self) -> None:
        """Stop the server by its pid and wait for it to exit."""
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            pid = int(Path(self.pidfile).read_text())
            os.kill(pid, signal.SIGTERM)

            def gone() -> bool:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return True
                return False

            wait_for(gone, what="redis-server exiting")

    def restart(self, down_for: float = 0.0) -> None:
        """Stop, stay down ``down_for`` seconds, start on the same port."""
        self.stop()
        time.sleep(down_for)
        self.start()


class Web:
    """One daphne process of the deployment, restartable on its port."""

    def __init__(self, env: dict[str, str], folder: str, index: int) -> None:
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(folder, f"daphne-{index}.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        """Start daphne on this web's port and wait until it listens."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            daphne_command(self.port),
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        wait_for_port(self.port, timeout=60, proc=self.proc)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """Kill the process abruptly (a crash: no cleanup runs)."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        """Stop the process gracefully."""
        if self.proc is not None:
            stop_process(self.proc)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss_kib(self) -> int:
        """Resident memory of the process, in KiB."""
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the process has used."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")


class Cluster:
    """PostgreSQL + Redis + daphne processes (+ Celery) on loopback."""

    def __init__(self, folder: str, webs: int, rivet: dict[str, Any] | None) -> None:
        self.folder = folder
        self.pg: Postgres | None = None
        self.redis: Redis | None = None
        self.webs: list[Web] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        try:
            self._start(webs, rivet)
        except BaseException:
            self.close()
            raise

    def _start(self, webs: int, rivet: dict[str, Any] | None) -> None:
        self.pg = Postgres(os.path.join(self.folder, "pg"))
        os.makedirs(os.path.join(self.folder, "redis"))
        self.redis = Redis(os.path.join(self.folder, "redis"))
        self.env = dict(os.environ)
        for name in ("RIVET_SERVER_DB_NAME", "DJANGO_SETTINGS_MODULE"):
            self.env.pop(name, None)
        self.env.update(
            DJANGO_SETTINGS_MODULE=SETTINGS,
            RIVET_TEST_DATABASE_URL=self.pg.url,
            RIVET_TEST_REDIS_URL=self.redis.url,
            RIVET_LOAD_RIVET=json.dumps(rivet or {}),
            PYTHONPATH=os.pathsep.join(
                filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
            ),
            PYTHONUNBUFFERED="1",
        )
        self.manage("migrate", "--noinput", "-v", "0")
        for index in range(webs):
            self.webs.append(Web(self.env, self.folder, index))

    # -- helpers for the tests --------------------------------------------------------
    def manage(self, *args: str) -> str:
        """Run ``django-admin <args>`` against this deployment; return its output."""
        done = subprocess.run(
            [PYTHON, "-m", "django", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode:
            raise RuntimeError(f"manage {args} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one query on the deployment's database; return the rows."""
        import psycopg

        with psycopg.connect(self.pg.url, autocommit=True, connect_timeout=10) as conn:
            cursor = conn.execute(query, params)  # type: ignore[arg-type]
            return list(cursor.fetchall()) if cursor.description else []

    def connection_rows(self) -> int:
        return int(self.sql("SELECT count(*) FROM django_rivet_connection")[0][0])

    def celery(self, *args: str, name: str) -> subprocess.Popen[bytes]:
        """Start ``celery -A tests.support.celery_app``; stopped with the cluster."""
        log = open(os.path.join(self.folder, f"celery-{name}.log"), "ab")  # noqa: SIM115
        proc = subprocess.Popen(
            [PYTHON, "-m", "celery", "-A", "tests.support.celery_app", *args],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        self.workers.append(proc)
        return proc

    def logs(self) -> str:
        """Every server log of the deployment (for failure messages)."""
        parts = []
        for path in sorted(Path(self.folder).glob("*.log")):
            parts.append(
                f"--- {path.name}\n{path.read_text(errors='replace')[-20000:]}"
            )
        return "\n".join(parts)

    def close(self) -> None:
        """Stop every server that was started (also after a failed start)."""
        for proc in self.workers:
            stop_process(proc, timeout=12)
        for web in self.webs:
            web.stop()
        if self.redis is not None:
            self.redis.stop()
        if self.pg is not None:
            self.pg.destroy()


@contextlib.contextmanager
def cluster(webs: int = 2, rivet: dict[str, Any] | None = None) -> Iterator[Cluster]:
    """Start a deployment; stop every server and delete its files afterwards."""
    folder = tempfile.mkdtemp(prefix="rivet-cluster-")
    os.chmod(folder, 0o755)  # the postgres user writes its cluster below
    try:
        started = Cluster(folder, webs, rivet)
        try:
            yield started
        finally:
            started.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
