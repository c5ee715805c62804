"""docs/quickstart.md, followed to the letter on a brand-new project.

The page's shell commands run as written (``pip install`` excepted: this
environment has the package), its code blocks are written to the files
their first line names, and the commands and outputs it shows are checked
against a real server: ``runserver`` (daphne's) for development, then
``daphne`` plus a Celery worker on Redis for production. Only the port and
the Redis URL are replaced, and ``--noreload`` is added to ``runserver`` so
that stopping it stops everything.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.servers import ROOT, free_port, stop_process, wait_for_port

pytestmark = pytest.mark.servers

QUICKSTART = ROOT / "docs" / "quickstart.md"
PYTHON = sys.executable
WORKFLOW_ID = re.compile(r'\{"output":"([0-9a-f]{32})"\}')


# -- reading the page -----------------------------------------------------------------
def section(number: int) -> str:
    """Return the text of the section headed ``## <number>.``."""
    text = QUICKSTART.read_text()
    match = re.search(rf"^## {number}\. .*?(?=^## |\Z)", text, re.S | re.M)
    assert match, f"docs/quickstart.md has no section {number}"
    return match.group(0)


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def shell_commands(text: str) -> list[list[str]]:
    return [
        shlex.split(line)
        for block in code_blocks(text, "sh")
        for line in block.splitlines()
        if line.strip()
    ]


def console_commands(text: str) -> list[tuple[str, str]]:
    """Return ``(command, expected output)`` pairs of the console blocks."""
    pairs: list[tuple[str, str]] = []
    for block in code_blocks(text, "console"):
        command = None
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("$ "):
                command = line[2:]
                pairs.append((command, ""))
            elif command is not None:
                pairs[-1] = (command, (pairs[-1][1] + "\n" + line).strip())
    return pairs


# -- doing what it says ---------------------------------------------------------------
def project_env(**extra: str) -> dict[str, str]:
    """The environment of a shell in the new project (not the test suite's)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DJANGO_", "RIVET_")) and name != "REDIS_URL"
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def argv(command: list[str]) -> list[str]:
    """Run the page's programs with this interpreter's environment."""
    program, *args = command
    if program == "python":
        return [PYTHON, *args]
    if program == "django-admin":
        return [PYTHON, "-m", "django", *args]
    if program in ("daphne", "celery"):
        return [PYTHON, "-m", program, *args]
    raise AssertionError(f"unexpected command in docs/quickstart.md: {command}")


def write_files(project: Path) -> None:
    """Apply every python block whose first line names a file."""
    for block in code_blocks(QUICKSTART.read_text(), "python"):
        first, body = block.split("\n", 1)
        target = re.fullmatch(r"# ([\w/]+\.py)(?:: (.+))?", first)
        assert target, f"a quickstart python block does not say its file: {first}"
        path, how = project / target.group(1), target.group(2)
        if how is None:
            path.write_text(body)
        elif how == "add at the end":
            path.write_text(path.read_text() + "\n" + body)
        elif how == "replace INSTALLED_APPS":
            text = path.read_text()
            found = re.search(r"^INSTALLED_APPS = \[.*?^\]\n", text, re.S | re.M)
            assert found, "startproject's settings have no INSTALLED_APPS"
            path.write_text(text[: found.start()] + body + text[found.end() :])
        else:
            raise AssertionError(f"unknown instruction in the quickstart: {how}")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """Sections 1 to 4: a new project with the settings, wiring and app."""
    cwd = tmp_path_factory.mktemp("quickstart")
    for command in shell_commands(section(1)):
        if command[:2] == ["pip", "install"]:
            continue  # installed here already (the test runs in its venv)
        if command[0] == "cd":
            cwd = cwd / command[1]
            continue
        subprocess.run(argv(command), cwd=cwd, env=project_env(), check=True)
    write_files(cwd)
    return cwd


@pytest.fixture
def project(built, tmp_path) -> Path:
    """A copy of the built project, with a database of its own."""
    return Path(shutil.copytree(built, tmp_path / "mysite"))


@contextlib.contextmanager
def server(command: list[str], cwd: Path, env: dict[str, str], log: Path):
    with log.open("wb") as output:
        proc = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT
        )
    try:
        yield proc
    finally:
        stop_process(proc, timeout=12)


@contextlib.contextmanager
def run_page(project: Path, number: int, env: dict[str, str], port: int):
    """Run a run-it section's commands, then wait for its web server."""
    with contextlib.ExitStack() as stack:
        web = None
        for index, command in enumerate(shell_commands(section(number))):
            if command[0] == "export":
                continue  # the test passes the environment itself
            if command[:3] == ["python", "manage.py", "runserver"]:
                command = [*command, f"127.0.0.1:{port}", "--noreload"]
            if command[0] == "daphne":
                command = [str(port) if part == "8000" else part for part in command]
            if command[0] in ("daphne", "celery") or "runserver" in command:
                log = project / f"server-{index}-{command[0]}.log"
                proc = stack.enter_context(server(argv(command), project, env, log))
                web = web if command[0] == "celery" else proc
            else:
                subprocess.run(argv(command), cwd=project, env=env, check=True)
        wait_for_port(port, proc=web)
        yield


def try_it(project: Path, env: dict[str, str], port: int) -> None:
    """Section 5's console session and WebSocket script, checked."""
    base = f"http://127.0.0.1:{port}"
    (add, added), (checkout, _), (inspect, _) = console_commands(section(5))
    with httpx.Client(timeout=30) as http:
        for command, expected in [(add, added), (checkout, None)]:
            parts = shlex.split(command)
            url = parts[parts.index("-X") + 2].replace("http://127.0.0.1:8000", base)
            body = parts[parts.index("-d") + 1]
            response = http.post(
                url, content=body, headers={"Content-Type": "application/json"}
            )
            assert response.status_code == 200, response.text
            if expected is not None:
                assert response.text == expected
        workflow_id = WORKFLOW_ID.fullmatch(response.text).group(1)

    # "Two seconds later the workflow is completed": poll the inspector.
    command = argv(shlex.split(inspect.replace(inspect.split()[-1], workflow_id)))
    deadline = time.monotonic() + 60
    while True:
        shown = subprocess.run(
            command, cwd=project, env=env, check=True, capture_output=True, text=True
        ).stdout
        if re.search(r"^\s*status: completed$", shown, re.M):
            break
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
    assert re.search(
        r'^\s*output: \{"total":5,"receipt":"1 items, 5 EUR"\}$', shown, re.M
    )
    assert re.search(r"^\s+step\s+receipt\s+completed", shown, re.M)

    script = project / "try_cart.py"
    script.write_text(script.read_text().replace("127.0.0.1:8000", f"127.0.0.1:{port}"))
    printed = subprocess.run(
        [PYTHON, script.name], cwd=project, env=env, check=True, capture_output=True,
        text=True, timeout=60,
    ).stdout  # fmt: skip
    assert printed == "count: 1\nevent: added scones (1)\n"


def test_the_development_path_serves_actors_workflows_and_static_files(project):
    env = project_env()
    port = free_port()
    with run_page(project, 5, env, port):
        try_it(project, env, port)
        with httpx.Client() as http:
            css = http.get(f"http://127.0.0.1:{port}/static/admin/css/base.css")
        assert css.status_code == 200  # the admin is styled under runserver


def test_the_production_path_runs_workflows_on_a_celery_worker(project, redis_url):
    # A database number of its own: other tests' workers use the default one.
    env = project_env(REDIS_URL=redis_url.rsplit("/", 1)[0] + "/5")
    port = free_port()
    with run_page(project, 6, env, port):
        try_it(project, env, port)
    assert (project / "staticfiles" / "django_rivet" / "rivet.js").exists()
    daphne_log = next(project.glob("server-*-daphne.log")).read_text()
    # The web process reached the broker (mysite/__init__.py loads Celery),
    # so the dispatch backend chose Celery rather than "none" (rivet.W004).
    assert "could not send task" not in daphne_log
    checked = subprocess.run(
        [PYTHON, "manage.py", "check"], cwd=project, env=env, check=True,
        capture_output=True, text=True,
    )  # fmt: skip
    assert "rivet.W004" not in checked.stdout + checked.stderr
