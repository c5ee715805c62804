"""Node, npm packages (the official ``rivetkit``, ``typescript``), a restartable daphne.

Each package (rivetkit is about 340 MB with its dependencies) is installed
once per machine and version into ``RIVET_NODE_CACHE`` (default
``~/.cache/django-rivet/node``; put it inside the work tree only under the
git-ignored ``.cache/``), with ``npm install --ignore-scripts``, under a file
lock so parallel test sessions share one install. Tests skip when node or
npm is missing, or when ``RIVET_SKIP_NODE`` is set.

:func:`restartable_daphne` keeps the listening socket in the test process
and hands it to daphne with ``--fd``: a restart then refuses no connection
(new ones wait in the socket's backlog), as with systemd socket activation.
The official client needs that: its reconnect loop gives up when the first
attempt after a drop fails at the transport level.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.polling import wait_for
from tests.support.servers import ROOT, kill9, server_env, stop_process

# The version @rivetkit/react 2.3.11 pins, and the newest 2.3.x.
VERSIONS = ("2.3.11", "2.3.19")
SCRIPTS = ROOT / "tests" / "rivetkit"
NODE_TIMEOUT = 120


def cache_dir() -> Path:
    """Return the folder holding one npm install per rivetkit version."""
    configured = os.environ.get("RIVET_NODE_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "django-rivet" / "node"


def require_node() -> None:
    """Skip the calling test unless node and npm can run."""
    if os.environ.get("RIVET_SKIP_NODE"):
        pytest.skip("RIVET_SKIP_NODE is set")
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("node and npm are needed for the RivetKit-client tests")


def install_rivetkit(version: str) -> Path:
    """Install ``rivetkit@version`` once; return its ``node_modules`` folder."""
    return install_package("rivetkit", version)


def install_package(package: str, version: str) -> Path:
    """Install npm ``package@version`` once; return its ``node_modules`` folder."""
    require_node()
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"{package}-{version}"
    modules = target / "node_modules"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _installed_version(modules, package) == version:
            return modules
        staging = root / f"{package}-{version}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        (staging / "package.json").write_text('{"private": true}\n')
        subprocess.run(
            ["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund",
             "--loglevel=error", f"{package}@{version}"],
            cwd=staging, check=True, timeout=600,
        )  # fmt: skip
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    assert _installed_version(modules, package) == version
    return modules


def _installed_version(modules: Path, package: str = "rivetkit") -> str | None:
    try:
        data = json.loads((modules / package / "package.json").read_text())
    except (OSError, ValueError):
        return None
    return data.get("version")


def run_node(
    script: str, *args: str, modules: Path, timeout: float = NODE_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run ``tests/rivetkit/<script>``; fail the test with its output if it fails."""
    env = dict(os.environ, RIVETKIT_MODULES=str(modules))
    proc = subprocess.run(
        ["node", str(SCRIPTS / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"node {script} {' '.join(args)} exited {proc.returncode}\n"
            f"--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


def last_json_line(output: str) -> dict:
    """Return the last line of ``output`` that is a JSON object."""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON result in:\n{output[-3000:]}")


# -- a daphne that can restart without refusing connections --------------------------
@dataclass
class Server:
    """A daphne process serving ``tests.support.asgi`` on a socket the test owns."""

    url: str
    sock: socket.socket
    env: dict[str, str]
    proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        """The ``createClient`` endpoint: where django_rivet.urls is mounted."""
        return f"{self.url}/rivet"

    def start(self) -> None:
        """Start daphne on the shared socket and wait until it answers."""
        fd = self.sock.fileno()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "--fd",
                str(fd),
                "tests.support.asgi:application",
            ],
            cwd=ROOT,
            env=self.env,
            pass_fds=(fd,),
        )

        def serving() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daphne exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/metadata", timeout=5):
                    return True
            except (OSError, urllib.error.URLError):
                return False

        wait_for(serving, what="daphne serving /metadata")

    def crash(self) -> None:
        """Kill daphne abruptly; the socket stays open, so nothing is refused."""
        if self.proc is not None:
            kill9(self.proc)

    def stop(self) -> None:
        """Stop daphne (TERM, then KILL)."""
        if self.proc is not None:
            stop_process(self.proc)


@contextlib.contextmanager
def restartable_daphne(**extra_env: str) -> Iterator[Server]:
    """Yield a started :class:`Server` sharing the test database."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    env = server_env(DJANGO_SETTINGS_MODULE="tests.settings.rivetkit", **extra_env)
    server = Server(f"http://127.0.0.1:{sock.getsockname()[1]}", sock, env)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        sock.close()
