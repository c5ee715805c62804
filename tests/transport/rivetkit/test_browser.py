"""The official client in headless Chromium, from a page on another origin.

A small static server stands in for a Vite dev server: it serves
tests/rivetkit/page.html, the unchanged ``dist/browser/client.js`` of the
installed ``rivetkit`` and its dependencies as ES modules (pre-bundled one by
one with esbuild, as Vite does; the client itself is not bundled). Django
runs the example project under daphne on another port, with that origin in
``CORS_ALLOWED_ORIGINS`` (``RIVET_CORS_ALLOWED_ORIGINS``). The page connects
to the example's counter, calls an action over the WebSocket, and must show
the broadcast another caller causes. (Stateless ``handle.action()`` calls
are not made: the client sends them with a streaming request body, which
Chromium refuses to send over HTTP/1.1 -- ``net::ERR_ALPN_NEGOTIATION_FAILED``
-- whatever the server.)
"""

import contextlib
import functools
import http.server
import json
import os
import subprocess
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.browser import chromium, needs_chromium
from tests.support.rivetkit_node import SCRIPTS, install_rivetkit, run_node
from tests.support.servers import PYTHON, ROOT, free_port, stop_process, wait_for_port

pytestmark = pytest.mark.servers
EXAMPLE = ROOT / "example_project"


class FrontendHandler(http.server.SimpleHTTPRequestHandler):
    """Serve the page, the client's browser build and the dependencies."""

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
    }

    def __init__(self, *args, page, modules, deps, **kwargs):
        self.page, self.modules, self.deps = page, modules, deps
        super().__init__(*args, directory=str(deps), **kwargs)

    def translate_path(self, path):
        path = path.split("?", 1)[0]
        if path.startswith("/node_modules/rivetkit/dist/browser/"):
            return str(self.modules / path.removeprefix("/node_modules/"))
        if path.startswith("/deps/"):
            return str(self.deps / Path(path).name)
        return "/nonexistent"

    def do_GET(self):
        if self.path.split("?", 1)[0] == "/":
            body = self.page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def log_message(self, format, *args):
        pass


@contextlib.contextmanager
def frontend(modules, tmp_path):
    deps = tmp_path / "deps"
    import_map = run_node("prebundle.mjs", str(deps), modules=modules).stdout
    page = (SCRIPTS / "page.html").read_text().replace("__IMPORT_MAP__", import_map)
    handler = functools.partial(FrontendHandler, page=page, modules=modules, deps=deps)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def example_project(tmp_path: Path, cors_origin: str) -> Iterator[str]:
    """Serve the example project with daphne; yield its ``createClient`` endpoint."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL")
    }
    env.update(
        SQLITE_PATH=str(tmp_path / "example.sqlite3"),
        RIVET_EMBEDDED_WORKER="0",
        RIVET_CORS_ALLOWED_ORIGINS=cors_origin,
        PYTHONPATH=os.pathsep.join([str(EXAMPLE), str(ROOT)]),
    )
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "-v0"], cwd=EXAMPLE, env=env, check=True
    )
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "mysite.asgi:application"],
        cwd=EXAMPLE,
        env=env,
    )  # fmt: skip
    try:
        wait_for_port(port, proc=proc)
        yield f"http://127.0.0.1:{port}/rivet"
    finally:
        stop_process(proc)


@needs_chromium
@pytest.mark.parametrize("encoding", ["bare", "json"])
def test_page_on_another_origin_connects_and_sees_a_broadcast(tmp_path, encoding):
    from playwright.sync_api import expect

    modules = install_rivetkit("2.3.19")
    key = f"browser-{uuid.uuid4().hex[:8]}"
    with (
        frontend(modules, tmp_path) as page_origin,
        example_project(tmp_path, page_origin) as endpoint,
        chromium() as browser,
    ):
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{page_origin}/?endpoint={endpoint}&key={key}&encoding={encoding}")
        expect(page.locator("#status")).to_have_text("connected")
        expect(page.locator("#ws")).to_have_text("1")
        expect(page.locator("#count")).to_have_text("1")
        # Another caller (django-rivet's own HTTP protocol) increments.
        request = urllib.request.Request(
            f"{endpoint}/actors/counter/actions/increment?key={key}",
            data=json.dumps({"args": [41]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response) == {"output": 42}
        expect(page.locator("#count")).to_have_text("42")
        assert errors == [], errors
