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
import sys
import time
from collections.abc import Callable
from urllib.parse import urlsplit

__all__ = ["read_events"]

Handler = Callable[[int | None, bytes, float], None]


async def read_events(
    url: str, on_message: Handler, opened: asyncio.Event | None = None
) -> None:
    """Read ``url`` as an event stream until ``event: close`` (or the end).

    ``on_message(id, event, received_at)`` per message; comments skipped.
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
    buffer = b""
    try:
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                return
            buffer += (await reader.readexactly(size + 2))[:-2]
            now = time.time()
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                ident, event = None, b"message"
                for line in block.split(b"\n"):
                    if line.startswith(b"id: "):
                        ident = int(line[4:])
                    elif line.startswith(b"event: "):
                        event = line[7:]
                if block.startswith(b":") or block.startswith(b"retry:"):
                    continue
                on_message(ident, event, now)
                if event == b"close":
                    return
    finally:
        writer.close()


async def _main(url: str, count: int) -> dict[str, object]:
    received: list[dict[int, float]] = [{} for _ in range(count)]
    duplicates = 0

    def handler(index: int) -> Handler:
        seen = received[index]

        def on_message(ident: int | None, event: bytes, at: float) -> None:
            nonlocal duplicates
            if event == b"message" and ident is not None:
                if ident in seen:
                    duplicates += 1
                seen[ident] = at

        return on_message

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
