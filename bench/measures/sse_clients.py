"""P15's readers: many Server-Sent Events clients in a process of their own.

``python -m bench.measures.sse_clients URL READERS`` opens ``READERS``
responses of ``URL`` (a workflow's stream), prints ``ready`` once every one
is open, and records when each message arrives (``time.time()``, per
chunk). When every reader got ``event: close`` it reads the commit times of
the offsets (JSON ``{offset: time}``) from stdin, written by the writer once
its run ended, and prints the summary: latency from commit to receipt over
every (reader, value), duplicates and gaps. A raw asyncio HTTP/1.1 client
(chunked bodies), so the readers cost this process little next to the
server.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Callable
from urllib.parse import urlsplit

__all__ = ["read_events"]

Handler = Callable[[bytes, float], None]
# Whole messages are handed on; their fields are found with regular
# expressions (C speed: a hundred readers of 10,000 values each would
# otherwise cost this process more than the server).
IDS = re.compile(rb"^id: (\d+)$", re.M)


async def read_events(
    url: str, on_messages: Handler, opened: asyncio.Event | None = None
) -> None:
    """Read ``url`` as an event stream until ``event: close`` (or its end).

    ``on_messages(data, received_at)`` gets each run of whole messages.
    """
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"{url}: {head.splitlines()[0]!r}")
    if opened is not None:
        opened.set()
    raw, rest = b"", b""
    try:
        while True:
            # Whole reads, however many chunks they hold: one await each.
            data = await reader.read(1 << 16)
            if not data:
                return
            raw += data
            body = []
            while True:
                line_end = raw.find(b"\r\n")
                if line_end < 0:
                    break
                size = int(raw[:line_end], 16)
                if size == 0:
                    raw = b""
                    break
                if len(raw) < line_end + 2 + size + 2:
                    break
                body.append(raw[line_end + 2 : line_end + 2 + size])
                raw = raw[line_end + 2 + size + 2 :]
            messages = rest + b"".join(body)
            cut = messages.rfind(b"\n\n") + 2
            messages, rest = messages[:cut], messages[cut:]
            if messages:
                on_messages(messages, time.time())
                if b"event: close\n" in messages:
                    return
    finally:
        writer.close()


async def _main(url: str, count: int) -> dict[str, object]:
    received: list[dict[int, float]] = [{} for _ in range(count)]
    duplicates = 0

    def handler(index: int) -> Handler:
        seen = received[index]

        def on_messages(data: bytes, at: float) -> None:
            nonlocal duplicates
            for raw in IDS.findall(data):
                ident = int(raw)
                if ident in seen:
                    duplicates += 1
                seen[ident] = at

        return on_messages

    opened = [asyncio.Event() for _ in range(count)]
    tasks = [
        asyncio.ensure_future(read_events(url, handler(i), opened[i]))
        for i in range(count)
    ]
    await asyncio.gather(*(event.wait() for event in opened))
    print("ready", flush=True)
    await asyncio.gather(*tasks)
    commits = {int(k): v for k, v in json.loads(sys.stdin.readline()).items()}
    latencies = sorted(
        (seen[offset] - at) * 1000
        for seen in received
        for offset, at in commits.items()
        if offset in seen
    )
    expected = len(commits) * count
    return {
        "latencies_ms": [
            latencies[min(len(latencies) - 1, int(q * len(latencies)))]
            for q in (0.5, 0.99)
        ],
        "missing": expected - len(latencies),
        "duplicates": duplicates,
    }


if __name__ == "__main__":
    found = asyncio.run(_main(sys.argv[1], int(sys.argv[2])))
    print(json.dumps(found), flush=True)
