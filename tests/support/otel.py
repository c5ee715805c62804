"""OpenTelemetry SDK set-ups for the observability tests.

In the pytest process, one tracer provider (set once: OpenTelemetry allows
that per process) records spans in memory only while a test holds the
``spans`` fixture, so the rest of the suite neither fills memory nor pays
more than span creation. In servers started by the tests,
``tests.settings.otel`` exports every span as one JSON line to the file
named by ``RIVET_TEST_SPAN_FILE``, which the test reads back.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)


class _Armed(SimpleSpanProcessor):
    """Export ended spans only while armed."""

    armed = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.armed:
            super().on_end(span)


_lock = threading.Lock()
_memory: tuple[InMemorySpanExporter, _Armed] | None = None


def memory_exporter() -> tuple[InMemorySpanExporter, _Armed]:
    """Install (once) the process's provider; return its exporter and switch."""
    global _memory
    with _lock:
        if _memory is None:
            exporter = InMemorySpanExporter()
            processor = _Armed(exporter)
            provider = TracerProvider()
            provider.add_span_processor(processor)
            trace.set_tracer_provider(provider)
            _memory = exporter, processor
        return _memory


def as_dict(span: ReadableSpan) -> dict:
    """Describe a finished span with what the tests compare (ids in hex)."""
    context = span.get_span_context()
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "kind": span.kind.name,
        "attributes": dict(span.attributes or {}),
        "links": [
            {
                "trace_id": f"{link.context.trace_id:032x}",
                "span_id": f"{link.context.span_id:016x}",
            }
            for link in span.links
        ],
        "status": span.status.status_code.name,
    }


class FileSpanExporter(SpanExporter):
    """Append each span as one JSON line, with the exporting process's pid."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        pid = os.getpid()
        lines = "".join(
            json.dumps({**as_dict(span), "pid": pid}) + "\n" for span in spans
        )
        with self._lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS


def export_to_file(path: str) -> None:
    """Install a provider exporting every span of this process to ``path``."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    trace.set_tracer_provider(provider)


def read_spans(path: str) -> list[dict]:
    """Return the spans a server exported to ``path`` so far."""
    try:
        with open(path, encoding="utf-8") as spans:
            return [json.loads(line) for line in spans if line.strip()]
    except FileNotFoundError:
        return []
