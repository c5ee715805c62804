"""docs/quickstart.md, followed to the letter on a brand-new project.

The package is what users get: the sdist and wheel ``make dist`` builds
(``python -m build``, once per module), the wheel installed by the page's
``pip install`` line (through uv's pip interface when the suite's venv
has uv) into a fresh virtualenv -- not the source tree, which is never on
that interpreter's path. The page's shell commands then run as
written with that virtualenv's programs, its code blocks are written to the
files their first line names, and the commands and outputs it shows are
checked against a real server: ``runserver`` (daphne's) for development,
then ``daphne`` plus a Celery worker on Redis for production. Only the
wheel's path, the port and the Redis URL are replaced, and ``--noreload`` is
added to ``runserver`` so that stopping it stops everything.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import httpx
import pytest

from tests.support.polling import wait_for
from tests.support.servers import ROOT, free_port, stop_process, wait_for_port

pytestmark = pytest.mark.servers

QUICKSTART = ROOT / "docs" / "quickstart.md"
RIVET_CHECK = re.compile(r"rivet\.[EW]\d{3}")
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


# -- the package users install ---------------------------------------------------------
@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Build the wheel as ``make dist`` does (PEP 517, isolated).

    ``make dist`` goes through the sdist first; building the wheel straight
    from the tree gives the same files in a third of the time.
    """
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    [built_wheel] = out.glob("django_rivet-*.whl")
    return built_wheel


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> Path:
    """The interpreter of a fresh virtualenv (section 1 installs into it)."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    # Without pip of its own: this interpreter's pip installs into it
    # (pip --python), which saves seeding a copy of pip.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True
    )
    return venv / "bin" / "python"


def pip_install(command: list[str], python: Path, wheel: Path) -> None:
    """Run section 1's ``pip install <wheel>[extras]`` with the built wheel.

    With uv's pip interface when the suite's venv has it (``make`` installs
    it): the same requirement, resolved from the wheel's metadata against
    the same index, in a few seconds instead of pip's ~25. Compiled as
    pip compiles (the servers would compile every module they import at
    each start where ``PYTHONDONTWRITEBYTECODE`` is set).
    """
    [requirement] = command[2:]
    found = re.fullmatch(r".*/dist/django_rivet-[^/]*\.whl(\[[\w,]+\])", requirement)
    assert found, f"section 1 does not install the built wheel: {requirement}"
    target = f"{wheel}{found.group(1)}"
    uv = Path(sys.executable).parent / "uv"
    if uv.exists():
        installer = [str(uv), "pip", "install", "-q", "--compile-bytecode",
                     "--python", str(python)]  # fmt: skip
    else:
        installer = [sys.executable, "-m", "pip", "--python", str(python), "install",
                     "-q", "--disable-pip-version-check"]  # fmt: skip
    subprocess.run([*installer, target], check=True)


# -- doing what it says ---------------------------------------------------------------
def project_env(**extra: str) -> dict[str, str]:
    """The environment of a shell in the new project (not the test suite's)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DJANGO_", "RIVET_"))
        and name not in ("REDIS_URL", "PYTHONPATH", "VIRTUAL_ENV")
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def argv(command: list[str], python: Path) -> list[str]:
    """Run the page's programs with the new virtualenv's interpreter."""
    program, *args = command
    if program == "python":
        return [str(python), *args]
    if program == "django-admin":
        return [str(python), "-m", "django", *args]
    if program in ("daphne", "celery"):
        return [str(python), "-m", program, *args]
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
def built(tmp_path_factory, wheel, python) -> Path:
    """Sections 1 to 4: the package installed, a new project, its files."""
    cwd = tmp_path_factory.mktemp("quickstart")
    for command in shell_commands(section(1)):
        if command[:2] == ["pip", "install"]:
            pip_install(command, python, wheel)
            continue
        if command[0] == "cd":
            cwd = cwd / command[1]
            continue
        subprocess.run(argv(command, python), cwd=cwd, env=project_env(), check=True)
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
def run_page(project: Path, number: int, env: dict[str, str], port: int, python: Path):
    """Run a run-it section's commands, then wait for its web server.

    Yields what each other command printed, by its arguments.
    """
    printed: dict[str, str] = {}
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
                proc = stack.enter_context(
                    server(argv(command, python), project, env, log)
                )
                web = web if command[0] == "celery" else proc
            else:
                done = subprocess.run(
                    argv(command, python), cwd=project, env=env, check=True,
                    capture_output=True, text=True,
                )  # fmt: skip
                printed[" ".join(command)] = done.stdout + done.stderr
        wait_for_port(port, proc=web)
        yield printed


def manage(project: Path, python: Path, *args: str, **env: str) -> str:
    """Run ``python manage.py <args>`` in the project; return what it printed."""
    done = subprocess.run(
        [str(python), "manage.py", *args], cwd=project, env=project_env(**env),
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout + done.stderr


def try_it(project: Path, env: dict[str, str], port: int, python: Path) -> str:
    """Section 5's console session and WebSocket script, checked.

    Returns the id of the workflow the checkout started.
    """
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

    # "Two seconds later the workflow is completed": the worker's log line
    # (the quickstart's LOGGING prints it) says when, then the inspector
    # shows it. Reading the logs is cheaper than starting the inspector in
    # a loop.
    ran = f"workflow ran workflow={workflow_id} name=checkout state=completed"
    wait_for(
        lambda: any(ran in log.read_text() for log in project.glob("server-*.log")),
        what="the worker's log line for the workflow",
    )
    command = argv(
        shlex.split(inspect.replace(inspect.split()[-1], workflow_id)), python
    )
    shown = subprocess.run(
        command, cwd=project, env=env, check=True, capture_output=True, text=True
    ).stdout
    assert re.search(r"^\s*status: completed$", shown, re.M), shown
    assert re.search(
        r'^\s*output: \{"total":5,"receipt":"1 items, 5 EUR"\}$', shown, re.M
    )
    assert re.search(r"^\s+step\s+receipt\s+completed", shown, re.M)

    script = project / "try_cart.py"
    script.write_text(script.read_text().replace("127.0.0.1:8000", f"127.0.0.1:{port}"))
    printed = subprocess.run(
        [str(python), script.name], cwd=project, env=env, check=True,
        capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    assert printed == "count: 1\nevent: added scones (1)\n"
    return workflow_id


def test_the_wheel_holds_the_app_and_says_where_it_lives(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for expected in [
        "django_rivet/py.typed",
        "django_rivet/migrations/0001_initial.py",
        "django_rivet/static/django_rivet/rivet.js",
        "django_rivet/templates/admin/django_rivet/retention_change_list.html",
    ]:
        assert expected in names
    assert not [n for n in names if n.startswith(("tests/", "example_project/"))]
    [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
    meta = Parser().parsestr(zipfile.ZipFile(wheel).read(metadata).decode())
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert {"Documentation", "Source", "Changelog"} <= set(urls)
    classifiers = meta.get_all("Classifier")
    assert "Framework :: Django :: 5.2" in classifiers
    assert "Framework :: Django :: 6.1" in classifiers
    assert set(meta.get_all("Provides-Extra")) >= {"redis", "client", "postgres"}
    assert meta["Description-Content-Type"] == "text/markdown"


def test_the_quickstart_runs_from_the_wheel_not_the_source_tree(built, python):
    found = subprocess.run(
        [str(python), "-c", "import django_rivet; print(django_rivet.__file__)"],
        cwd=built, env=project_env(), check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    assert Path(found).is_relative_to(python.parent.parent)
    assert not Path(found).is_relative_to(ROOT)


def test_the_development_path_serves_actors_workflows_and_static_files(project, python):
    env = project_env()
    port = free_port()
    with run_page(project, 5, env, port, python) as printed:
        workflow_id = try_it(project, env, port, python)
        with httpx.Client() as http:
            css = http.get(f"http://127.0.0.1:{port}/static/admin/css/base.css")
        assert css.status_code == 200  # the admin is styled under runserver
    # migrate on a new database says nothing about rivet (no rivet.W401
    # telling people to run the command they are running).
    assert not RIVET_CHECK.search(printed["python manage.py migrate"])
    # The quickstart's LOGGING shows what the embedded worker did (try_it
    # waited for the line in the server logs: here, runserver's own).
    runserver_log = next(project.glob("server-*-python.log")).read_text()
    # Each line once: the quickstart's LOGGING does not also propagate to a
    # root handler.
    ran = [line for line in runserver_log.splitlines() if workflow_id in line]
    assert len(ran) == len(set(ran)) >= 2  # sleeping, then completed


def test_the_production_settings_pass_every_rivet_check(project, python):
    printed = manage(project, python, "check", "--deploy", REDIS_URL="redis://x:1/0")
    assert not RIVET_CHECK.search(printed)


def test_the_production_path_runs_workflows_on_a_celery_worker(
    project, redis_url, python
):
    # A database number of its own: other tests' workers use the default one.
    env = project_env(REDIS_URL=redis_url.rsplit("/", 1)[0] + "/5")
    port = free_port()
    with run_page(project, 6, env, port, python):
        try_it(project, env, port, python)
    assert (project / "staticfiles" / "django_rivet" / "rivet.js").exists()
    # Each line once, although Celery (and daphne) give the root logger a
    # handler of their own.
    celery_log = next(project.glob("server-*-celery.log")).read_text()
    ran = re.findall(r"workflow ran workflow=\w+ name=checkout state=\w+", celery_log)
    assert len(ran) == len(set(ran)) >= 2  # sleeping, then completed
    daphne_log = next(project.glob("server-*-daphne.log")).read_text()
    # The web process reached the broker (mysite/__init__.py loads Celery),
    # so the dispatch backend chose Celery rather than "none" (rivet.W004).
    assert "could not send task" not in daphne_log
    checked = manage(project, python, "check", REDIS_URL=env["REDIS_URL"])
    assert "rivet.W004" not in checked


def test_a_page_that_only_opens_websockets_gets_its_work_run(project, python):
    # The embedded worker starts with the server (the quickstart's asgi.py
    # wraps the application in EmbeddedWorkerApp): here no HTTP request is
    # ever made, yet the workflow an action over a WebSocket starts runs.
    port = free_port()
    script = project / "ws_only.py"
    script.write_text(
        "import asyncio\n"
        "from django_rivet.client import Client\n"
        "async def main():\n"
        f"    cart = Client('http://127.0.0.1:{port}/rivet').actor('cart', 'bo')\n"
        "    conn = await cart.connect()\n"
        "    await conn.call('add', 'tea')\n"
        "    print(await conn.call('checkout'))\n"
        "    await conn.close()\n"
        "asyncio.run(main())\n"
    )
    env = project_env()
    manage(project, python, "migrate", "-v", "0")
    log = project / "server-ws-only.log"
    command = [str(python), "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    with server(command, project, env, log) as proc:
        wait_for_port(port, proc=proc)
        workflow_id = subprocess.run(
            [str(python), script.name], cwd=project, env=env, check=True,
            capture_output=True, text=True, timeout=60,
        ).stdout.strip()  # fmt: skip
        wait_for(
            lambda: (
                f"workflow ran workflow={workflow_id} name=checkout "
                "state=sleeping" in log.read_text()
            ),
            what="the embedded worker running the workflow",
        )
    assert "HTTP POST" not in log.read_text()
