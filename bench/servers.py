"""Servers the benchmarks start and stop themselves: PostgreSQL, Redis, daphne.

PostgreSQL runs with its default durability (``scripts/pg.sh --durable``:
fsync and synchronous commit on), never the test suite's fsync=off. Each
measure leg gets a database of its own, cloned from a migrated template
(``CREATE DATABASE ... TEMPLATE`` on PostgreSQL, a file copy on SQLite), so
rows one measure leaves behind never slow another.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(
    port: int, proc: subprocess.Popen | None, timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited early")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    """Stop a server we started: TERM, wait, then KILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def python_env(**extra: str) -> dict[str, str]:
    """The environment of a child Python process of the benchmarks."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else ""),
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        **extra,
    }


@contextlib.contextmanager
def daphne(
    env: dict[str, str], threads: int | None = None
) -> Iterator[tuple[str, int]]:
    """Serve ``bench.asgi`` with daphne; yield its base URL and its pid.

    Its stderr goes to a file whose tail is printed when the block fails, so
    a server-side error shows up in the leg's report.
    """
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="rivet-bench-daphne-", suffix=".log")
    full = python_env(**env)
    if threads is not None:  # sync_to_async's pool: ASGI_THREADS
        full["ASGI_THREADS"] = str(threads)
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "bench.asgi:application"],
        cwd=ROOT,
        env=full,
        # Access logs would cost the server time and flood the output.
        stdout=subprocess.DEVNULL,
        stderr=log,
    )  # fmt: skip
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}", proc.pid
    except BaseException:
        log.flush()
        tail = Path(log.name).read_text(errors="replace")[-4000:]
        print(f"daphne's stderr (tail):\n{tail}", file=sys.stderr, flush=True)
        raise
    finally:
        stop_process(proc)
        log.close()


@contextlib.contextmanager
def spy(
    pids: list[int], output: Path, rate: int = 250, idle: bool = False
) -> Iterator[None]:
    """Sample the Python stacks of ``pids`` with py-spy while the block runs.

    Writes py-spy's collapsed stacks (``--format raw``, one file per pid:
    ``output`` with ``-<pid>`` before the suffix) for :mod:`bench.flame`.
    ``--nonblocking`` reads the stacks without pausing the server; ``idle``
    keeps the samples of waiting threads too (a wall-clock view).
    """
    exe = Path(sys.executable).with_name("py-spy")
    if not exe.exists():
        raise RuntimeError("py-spy is missing: run scripts/bench.sh (the bench extra)")
    procs = []
    for pid in pids:
        target = output.with_name(f"{output.stem}-{pid}{output.suffix}")
        procs.append(
            subprocess.Popen(
                [str(exe), "record", "--pid", str(pid), "--rate", str(rate),
                 "--format", "raw", "--threads", "--nolineno", "--nonblocking",
                 "--output", str(target), *(["--idle"] if idle else [])],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )  # fmt: skip
    try:
        time.sleep(1.0)  # py-spy attaches
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"py-spy failed: {proc.stderr.read().decode()}")
        yield
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Servers:
    """PostgreSQL, Redis and the per-leg databases of one benchmark run.

    Servers start on first use and stop in :meth:`close` (the runner calls it
    in a ``finally``, also on Ctrl-C and SIGTERM).
    """

    def __init__(self) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="rivet-bench-"))
        os.chmod(self.work, 0o755)
        self._pg_url: str | None = None
        self._redis_url: str | None = None
        self._templates: dict[str, dict[str, str]] = {}
        self._counter = itertools.count(1)
        # --quick runs measures in threads: servers and templates start once.
        self._lock = threading.RLock()

    # PostgreSQL and Redis ------------------------------------------------------
    def postgres(self) -> str:
        with self._lock:
            return self._start_postgres()

    def _start_postgres(self) -> str:
        if self._pg_url is None:
            folder = self.work / "pg"
            self._pg_url = subprocess.run(
                [str(SCRIPTS / "pg.sh"), "start", str(folder), "--durable"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        return self._pg_url

    def redis(self) -> str:
        with self._lock:
            return self._start_redis()

    def _start_redis(self) -> str:
        if self._redis_url is None:
            self._redis_url = subprocess.run(
                [str(SCRIPTS / "redis.sh"), "start", str(self.work / "redis")],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        return self._redis_url

    def close(self) -> None:
        if self._pg_url is not None:
            subprocess.run(
                [str(SCRIPTS / "pg.sh"), "stop", str(self.work / "pg")], check=False
            )
            self._pg_url = None
        if self._redis_url is not None:
            subprocess.run(
                [str(SCRIPTS / "redis.sh"), "stop", str(self.work / "redis")],
                check=False,
            )
            self._redis_url = None
        shutil.rmtree(self.work, ignore_errors=True)

    # Databases -------------------------------------------------------------------
    def database(self, kind: str) -> dict[str, str]:
        """Return the environment selecting a fresh, migrated database."""
        with self._lock:
            template = self._template(kind)
            number = next(self._counter)
        if kind == "sqlite":
            path = self.work / f"leg{number}.sqlite3"
            shutil.copyfile(template["RIVET_BENCH_SQLITE"], path)
            return {"RIVET_BENCH_SQLITE": str(path)}
        name = f"leg{number}"
        self._psql(f"CREATE DATABASE {name} TEMPLATE rivet_template")
        return {
            "RIVET_BENCH_DATABASE_URL": self.postgres().rsplit("/", 1)[0] + "/" + name
        }

    def _template(self, kind: str) -> dict[str, str]:
        if kind not in self._templates:
            if kind == "sqlite":
                env = {"RIVET_BENCH_SQLITE": str(self.work / "template.sqlite3")}
            elif kind == "postgresql":
                self._psql("CREATE DATABASE rivet_template")
                url = self.postgres().rsplit("/", 1)[0] + "/rivet_template"
                env = {"RIVET_BENCH_DATABASE_URL": url}
            else:
                raise ValueError(kind)
            subprocess.run(
                [sys.executable, "-m", "bench.leg", "--migrate"],
                check=True,
                cwd=ROOT,
                env=python_env(**env),
            )
            self._templates[kind] = env
        return self._templates[kind]

    def _psql(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(
            self.postgres().replace("postgres://", "postgresql://", 1),
            autocommit=True,
        ) as conn:
            conn.execute(sql)
