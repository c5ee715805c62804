"""PostgreSQL stopped and started under load (issues 12 and 18).

A private PostgreSQL cluster, a daphne on it with persistent connections
(tests/settings/outage.py), and six clients calling ``increment`` on actors
of their own the whole time -- three over django-rivet's HTTP API, one over
the RivetKit gateway, one over each WebSocket flavour. While the server is
down every failed call must say ``actor/unavailable`` (503 with
``Retry-After`` over HTTP, an error frame on the still-open sockets); once
it is back every call succeeds, none failing on a connection that went
stale in the outage; and each actor's count equals the calls that were
acknowledged: none lost, none doubled.

This test starts its own cluster (it has to stop it), so it needs no test
database and runs once, in the SQLite leg.
"""

import json
import os
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from tests.support.servers import PYTHON, ROOT, free_port, stop_process, wait_for_port

pytestmark = pytest.mark.servers

OUTAGE_SECONDS = 3.0
# After PostgreSQL is back: keep calling this long, and give up (fail) if
# some client has not succeeded again by the deadline.
AFTER_SECONDS = 3.0
RECOVERY_DEADLINE = 60.0
GATEWAY = "rvt-namespace=default&rvt-method=getOrCreate&rvt-key={key}"


# -- a PostgreSQL cluster we may stop --------------------------------------------------
class Cluster:
    """scripts/pg.sh's cluster, plus stop and start of the same data directory."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.url = subprocess.run(
            [str(ROOT / "scripts" / "pg.sh"), "start", str(folder)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        data = folder / "data"
        words = shlex.split((data / "postmaster.opts").read_text())
        # The options pg.sh started it with, minus the binary and -D.
        options = [w for i, w in enumerate(words[1:]) if w != "-D" and words[i] != "-D"]
        self.options = " ".join(shlex.quote(w) for w in options)
        self.pg_ctl = str(Path(words[0]).with_name("pg_ctl"))
        self.data = str(data)

    def _pg_ctl(self, *args: str) -> None:
        command = [self.pg_ctl, "-D", self.data, *args]
        if os.getuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=60)

    def stop(self) -> None:
        self._pg_ctl("-m", "fast", "-w", "stop")

    def start(self) -> None:
        log = os.path.join(self.data, "server.log")
        self._pg_ctl("-l", log, "-o", self.options, "-w", "start")

    def remove(self) -> None:
        subprocess.run(
            [str(ROOT / "scripts" / "pg.sh"), "stop", str(self.folder)], check=False
        )


# -- the clients ---------------------------------------------------------------------
@dataclass
class Call:
    sent: float
    done: float
    ok: bool
    code: str | None = None  # group/code of a failure
    retry_after: str | None = None


class Traffic:
    """Lets the clients run, pause (nothing in flight) and stop."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.running = threading.Event()
        self.running.set()

    def proceed(self) -> bool:
        """Block while paused; tell whether to go on calling."""
        while not self.running.is_set() and not self.stopped.is_set():
            time.sleep(0.02)
        return not self.stopped.is_set()


@dataclass
class Client:
    name: str
    key: str
    calls: list[Call] = field(default_factory=list)

    @property
    def acknowledged(self) -> int:
        return sum(call.ok for call in self.calls)


def http_client(base: str, client: Client, traffic: Traffic, gateway: bool):
    if gateway:
        path = (
            f"/rivet/gateway/counter/action/increment?{GATEWAY.format(key=client.key)}"
        )
        headers = {"Content-Type": "application/json", "x-rivet-encoding": "json"}
    else:
        path = f"/rivet/actors/counter/actions/increment?key={client.key}"
        headers = {"Content-Type": "application/json"}
    with httpx.Client(base_url=base, timeout=30) as http:
        while traffic.proceed():
            sent = time.monotonic()
            try:
                response = http.post(path, content=b'{"args": []}', headers=headers)
            except httpx.HTTPError as exc:  # the server itself failing: a finding
                client.calls.append(Call(sent, time.monotonic(), False, repr(exc)))
                continue
            done = time.monotonic()
            if response.status_code == 200:
                client.calls.append(Call(sent, done, True))
            else:
                body = response.json()
                client.calls.append(
                    Call(
                        sent,
                        done,
                        False,
                        f"{response.status_code} {body['group']}/{body['code']}",
                        response.headers.get("Retry-After"),
                    )
                )
                time.sleep(0.02)


def ws_client(base: str, client: Client, traffic: Traffic, rivetkit: bool):
    ws_base = base.replace("http://", "ws://")
    if rivetkit:
        url = (
            f"{ws_base}/rivet/gateway/counter/connect?{GATEWAY.format(key=client.key)}"
        )
        protocols = ["rivet", "rivet_encoding.json"]
    else:
        url = f"{ws_base}/rivet/actors/counter/connect?key={client.key}&encoding=json"
        protocols = ["rivet"]
    number = 0
    while not traffic.stopped.is_set():
        try:
            with ws_connect(url, subprotocols=protocols, open_timeout=30) as ws:
                ws.recv(timeout=30)  # init (or the refusal's error frame)
                while traffic.proceed():
                    number += 1
                    sent = time.monotonic()
                    if rivetkit:
                        request = {"id": ["$BigInt", str(number)], "name": "increment",
                                   "args": []}  # fmt: skip
                        ws.send(
                            json.dumps(
                                {"body": {"tag": "ActionRequest", "val": request}}
                            )
                        )
                        body = json.loads(ws.recv(timeout=30))["body"]
                        ok, error = body["tag"] == "ActionResponse", body["val"]
                    else:
                        ws.send(json.dumps({"type": "action", "id": number,
                                            "name": "increment"}))  # fmt: skip
                        error = json.loads(ws.recv(timeout=30))
                        ok = error["type"] == "action_response"
                    done = time.monotonic()
                    if ok:
                        client.calls.append(Call(sent, done, True))
                    else:
                        code = f"frame {error['group']}/{error['code']}"
                        client.calls.append(Call(sent, done, False, code))
                        time.sleep(0.02)
        except (ConnectionClosed, OSError, TimeoutError) as exc:
            # The socket closed under us: the consumer should not need to.
            client.calls.append(Call(time.monotonic(), time.monotonic(), False,
                                     f"socket {exc!r}"))  # fmt: skip
            time.sleep(0.2)


def burst(base: str) -> list[int]:
    """64 concurrent calls, so every invocation thread gets one; the statuses."""
    import asyncio

    async def calls():
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            path = "/rivet/actors/counter/actions/getCount?key=burst{}"
            responses = await asyncio.gather(
                *(http.post(path.format(n % 4), json={}) for n in range(64))
            )
            return [response.status_code for response in responses]

    return asyncio.run(calls())


def test_postgresql_restart_under_load(tmp_path):
    folder = Path(f"/tmp/rivet-outage-{os.getpid()}")
    cluster = Cluster(folder)
    server = None
    try:
        env = dict(os.environ)
        for name in ("RIVET_SERVER_DB_NAME", "DJANGO_SETTINGS_MODULE"):
            env.pop(name, None)
        env.update(
            DJANGO_SETTINGS_MODULE="tests.settings.outage",
            RIVET_TEST_DATABASE_URL=cluster.url,
            RIVET_SERVER_DB_NAME="postgres",
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
        )
        subprocess.run(
            [PYTHON, "-m", "django", "migrate", "-v", "0"],
            cwd=ROOT, env=env, check=True, timeout=120,
        )  # fmt: skip
        port = free_port()
        log = open(tmp_path / "daphne.log", "wb")
        server = subprocess.Popen(
            [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
             "tests.support.asgi:application"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_for_port(port, proc=server)
        base = f"http://127.0.0.1:{port}"
        assert set(burst(base)) == {200}

        clients = [Client(f"http-{n}", f"http-{n}") for n in range(3)]
        clients += [Client("gateway", "gateway"), Client("ws", "ws")]
        clients.append(Client("kit-ws", "kit-ws"))
        traffic = Traffic()
        targets = [http_client] * 4 + [ws_client] * 2
        flavours = [False, False, False, True, False, True]
        threads = [
            threading.Thread(target=target, args=(base, client, traffic, flavour))
            for target, client, flavour in zip(targets, clients, flavours, strict=True)
        ]
        for thread in threads:
            thread.start()
        try:
            # 1. Stopped under load: the calls made meanwhile fail, coded.
            time.sleep(2.0)
            down = time.monotonic()
            cluster.stop()
            time.sleep(OUTAGE_SECONDS)
            cluster.start()
            back = time.monotonic()
            deadline = back + RECOVERY_DEADLINE
            while time.monotonic() < deadline and not all(
                any(call.ok and call.sent > back for call in c.calls) for c in clients
            ):
                time.sleep(0.1)
            time.sleep(1.0)
            # 2. Restarted while idle: every invocation thread holds a
            #    connection that died in the restart; none may fail a call.
            traffic.running.clear()
            time.sleep(0.5)
            assert set(burst(base)) == {200}
            quiet_down = time.monotonic()
            cluster.stop()
            cluster.start()
            quiet_back = time.monotonic()
            after_restart = burst(base)
            traffic.running.set()
            time.sleep(AFTER_SECONDS)
        finally:
            traffic.stopped.set()
            for thread in threads:
                thread.join(60)

        report = {}
        for client in clients:
            before = [c for c in client.calls if c.done < down]
            during = [c for c in client.calls if c.done >= down and c.sent < back]
            after = [c for c in client.calls if c.sent >= back]
            recovered = min((c.done for c in after if c.ok), default=None)
            report[client.name] = {
                "calls": len(client.calls),
                "failed_before": [c.code for c in before if not c.ok],
                "codes_during": sorted({c.code for c in during if not c.ok}),
                "failed_during": sum(not c.ok for c in during),
                "failed_after": [c.code for c in after if not c.ok],
                "recovered_after_s": None
                if recovered is None
                else round(recovered - back, 3),
            }
        report["burst after the quiet restart"] = sorted(set(after_restart))
        print("outage report", json.dumps(report, indent=1))
        quiet = quiet_back - quiet_down
        print(f"outage: stopped {back - down:.2f} s, quiet restart {quiet:.2f} s")

        with httpx.Client(base_url=base, timeout=30) as http:
            finals = {
                c.name: http.post(
                    f"/rivet/actors/counter/actions/getCount?key={c.key}", json={}
                ).json()["output"]
                for c in clients
            }
        log.close()
        assert set(after_restart) == {200}, after_restart
        for client in clients:
            seen = report[client.name]
            assert seen["failed_before"] == [], (client.name, seen)
            # Once PostgreSQL is back, no call fails: not on a stale
            # connection of some invocation thread, not at all.
            assert seen["failed_after"] == [], (client.name, seen)
            assert seen["recovered_after_s"] is not None, (client.name, seen)
            # During the outage: only the retryable code.
            allowed = {"503 actor/unavailable", "frame actor/unavailable"}
            assert set(seen["codes_during"]) <= allowed, (client.name, seen)
            # Exactly the acknowledged increments, none lost or doubled.
            assert finals[client.name] == client.acknowledged, (client.name, finals)
        http_failures = [c for client in clients[:4] for c in client.calls if not c.ok]
        assert http_failures, "the outage produced no failed HTTP call"
        assert {c.retry_after for c in http_failures} == {"1"}
        ws_failures = [c for client in clients[4:] for c in client.calls if not c.ok]
        assert ws_failures, "the outage produced no error frame"
        log_text = (tmp_path / "daphne.log").read_text(errors="replace")
        assert "internal error in actor code" not in log_text
    finally:
        if server is not None:
            stop_process(server)
        cluster.remove()
