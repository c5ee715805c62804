"""Reading Server-Sent Events in tests: parse ``text/event-stream`` bytes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass
class Message:
    """One SSE message: ``event`` ("message" when unnamed), ``id``, JSON ``data``."""

    event: str
    id: int | None
    data: Any


class Parser:
    """Feed chunks; collect messages, comments and the ``retry`` field."""

    def __init__(self) -> None:
        self.buffer = b""
        self.messages: list[Message] = []
        self.comments: list[str] = []
        self.retry: int | None = None

    def feed(self, chunk: bytes) -> list[Message]:
        """Parse ``chunk``; return the messages it completed."""
        self.buffer += chunk
        done = []
        while b"\n\n" in self.buffer:
            block, self.buffer = self.buffer.split(b"\n\n", 1)
            fields: dict[str, str] = {}
            for line in block.decode("utf-8").split("\n"):
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                    continue
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value
            if "retry" in fields:
                self.retry = int(fields["retry"])
            if "data" in fields:
                raw_id = fields.get("id")
                done.append(
                    Message(
                        fields.get("event", "message"),
                        None if raw_id is None else int(raw_id),
                        json.loads(fields["data"]),
                    )
                )
        self.messages += done
        return done
