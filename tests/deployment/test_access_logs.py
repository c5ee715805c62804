"""The servers' own access logs keep no gateway token, set up as docs/security.md says.

The RivetKit client writes its token in URLs (``gateway/{id}@{token}/...``,
``?rvt-token=``), which every access log would keep. daphne writes its
access log straight to a stream -- no logging filter reaches it -- so the
docs pipe it through ``python -m django_rivet.tokens``; uvicorn logs through
:mod:`logging`, so the docs' ``--log-config`` adds
``django_rivet.tokens.MaskGatewayTokens``. Each is run here and sent the
client's three forms: an action by id, an action by name, a WebSocket by id.
"""

from __future__ import annotations

import json
import subprocess
import threading

import httpx
import pytest
from websockets.sync.client import connect

from django_rivet import actors
from tests.support.polling import wait_for
from tests.support.servers import (
    PYTHON,
    ROOT,
    free_port,
    server_env,
    stop_process,
    wait_for_port,
)

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]

TOKEN = "open-sesame"  # what tests.testapp's vault opens for
APP = "tests.support.asgi:application"
# docs/security.md's uvicorn logging configuration.
UVICORN_LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"tokens": {"()": "django_rivet.tokens.MaskGatewayTokens"}},
    "formatters": {
        "default": {"()": "uvicorn.logging.DefaultFormatter",
                    "fmt": "%(levelprefix)s %(message)s"},
        "access": {"()": "uvicorn.logging.AccessFormatter",
                   "fmt": '%(client_addr)s - "%(request_line)s" %(status_code)s'},
    },
    "handlers": {
        "default": {"class": "logging.StreamHandler", "formatter": "default",
                    "filters": ["tokens"], "stream": "ext://sys.stdout"},
        "access": {"class": "logging.StreamHandler", "formatter": "access",
                   "filters": ["tokens"], "stream": "ext://sys.stdout"},
    },
    "loggers": {
        "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
        "uvicorn.access": {"handlers": ["access"], "level": "INFO",
                           "propagate": False},
    },
}  # fmt: skip


def calls(url, actor_id):
    """The client's three forms of a token in a URL; each is let in."""
    by_name = (
        "?rvt-namespace=default&rvt-method=getOrCreate&rvt-runner=default"
        f"&rvt-key=logs&rvt-token={TOKEN}"
    )
    with httpx.Client(timeout=30) as client:
        for target, query in [(f"{actor_id}@{TOKEN}", ""), ("vault", by_name)]:
            response = client.post(
                f"{url}/rivet/gateway/{target}/action/open{query}",
                json={"args": []},
                headers={"x-rivet-encoding": "json"},
            )
            assert response.status_code == 200, response.text
    ws = url.replace("http://", "ws://")
    with connect(
        f"{ws}/rivet/gateway/{actor_id}@{TOKEN}/connect",
        subprotocols=["rivet", "rivet_encoding.json"],
    ) as socket:
        assert json.loads(socket.recv(30))["body"]["tag"] == "Init"


def logged(lines, count):
    wait_for(lambda: len(lines) >= count, 30, what=f"{count} access log lines")
    return "".join(lines)


def test_daphnes_access_log_piped_through_the_mask_keeps_no_token(tmp_path):
    actor_id = actors.get_or_create("vault", "logs").actor_id
    port = free_port()
    # docs/security.md: daphne --access-log /dev/stdout ... | python -m
    # django_rivet.tokens (a thread here stands between the two, to show
    # what daphne wrote).
    daphne = subprocess.Popen(
        [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "--access-log", "/dev/stdout", APP],
        cwd=ROOT, env=server_env(), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    mask = subprocess.Popen(
        [PYTHON, "-m", "django_rivet.tokens"],
        cwd=ROOT, env=server_env(), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    raw, masked = [], []

    def tee():
        for line in daphne.stdout:
            raw.append(line)
            mask.stdin.write(line)
            mask.stdin.flush()
        mask.stdin.close()

    threads = [
        threading.Thread(target=tee),
        threading.Thread(target=lambda: masked.extend(mask.stdout)),
    ]
    for thread in threads:
        thread.start()
    try:
        wait_for_port(port, proc=daphne)
        calls(f"http://127.0.0.1:{port}", actor_id)
        # Two HTTP lines, WSCONNECTING and WSCONNECT (and WSDISCONNECT).
        assert TOKEN in logged(raw, 4)  # daphne's own line keeps it
        text = logged(masked, 4)
    finally:
        stop_process(daphne)
        for thread in threads:
            thread.join(30)
        stop_process(mask)
    assert TOKEN not in text, text
    assert f"/rivet/gateway/{actor_id}@***/action/open" in text
    assert "rvt-token=***" in text
    assert f"WSCONNECT /rivet/gateway/{actor_id}@***/connect" in text


def test_uvicorns_logs_with_the_filter_keep_no_token(tmp_path):
    actor_id = actors.get_or_create("vault", "logs").actor_id
    port = free_port()
    config = tmp_path / "logging.json"
    config.write_text(json.dumps(UVICORN_LOGGING))
    uvicorn = subprocess.Popen(
        [PYTHON, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
         "--lifespan", "off", "--log-config", str(config), APP],
        cwd=ROOT, env=server_env(), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(uvicorn.stdout))
    reader.start()
    try:
        wait_for_port(port, proc=uvicorn)
        calls(f"http://127.0.0.1:{port}", actor_id)
        wait_for(lambda: "[accepted]" in "".join(lines), 30, what="the WS line")
        text = logged(lines, 3)
    finally:
        stop_process(uvicorn)
        reader.join(30)
    assert TOKEN not in text, text
    assert f"/rivet/gateway/{actor_id}@***/action/open" in text
    assert "rvt-token=***" in text
    assert f'"WebSocket /rivet/gateway/{actor_id}@***/connect" [accepted]' in text
