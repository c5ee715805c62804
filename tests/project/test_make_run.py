"""``make run``'s start-up script refuses a busy port before anything else.

A newcomer with port 8000 taken saw a "ready" banner answered by the other
server, then a failure. ``scripts/run.sh`` now checks the port first and
names ``PORT=`` in its message; the banner (checked by
tests/project/test_example_browser.py, which runs the example through this script)
only comes once its own daphne answers.
"""

import os
import socket
import subprocess
import sys

import pytest

from tests.support.servers import ROOT

pytestmark = pytest.mark.servers


def run_script(*args: str, port: int) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "VENV": sys.prefix,
    }
    return subprocess.run(
        [str(ROOT / "scripts" / "run.sh"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def busy_port():
    with socket.socket() as other_server:
        other_server.bind(("127.0.0.1", 0))
        other_server.listen()
        yield other_server.getsockname()[1]


def test_a_busy_port_stops_make_run_with_a_message_naming_port(busy_port):
    result = run_script(port=busy_port)
    assert result.returncode == 1
    assert f"Port {busy_port} on 127.0.0.1 is already in use" in result.stderr
    assert f"make run PORT={busy_port + 1}" in result.stderr
    # Nothing was started or announced: no migration, no banner.
    assert "migrating" not in result.stdout
    assert "django-rivet example" not in result.stdout  # the banner


def test_make_run_checks_the_port_before_installing(busy_port, tmp_path):
    venv = tmp_path / "venv"  # does not exist: make would create and install it
    result = subprocess.run(
        ["make", "--no-print-directory", "run", f"PORT={busy_port}", f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert f"make run PORT={busy_port + 1}" in result.stderr
    assert "installing" not in result.stdout
    assert not venv.exists()
