"""An OpenTelemetry SDK installed for one test at a time, and its spans as a tree.

OpenTelemetry lets a process set its global tracer provider once; these helpers install one
provider (with an in-memory exporter) and one meter provider for the duration of a test and
take them out again, so other tests see no provider (and their plans are not traced).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import opentelemetry.metrics._internal as metrics_globals
import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.util._once import Once

EXPORTER = InMemorySpanExporter()
_INSTALLED = [False]


class _WhileInstalled(Sampler):
    """Records only while a test has the provider installed: a tracer taken from the global
    proxy (the MCP SDK's) keeps the first provider it found, also in later tests."""

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        if not _INSTALLED[0]:
            return SamplingResult(Decision.DROP)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "while a test has it installed"


# One provider for the process, for that reason.
PROVIDER = TracerProvider(sampler=_WhileInstalled())
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))


def _reset() -> None:
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    metrics_globals._METER_PROVIDER = None
    metrics_globals._METER_PROVIDER_SET_ONCE = Once()


class Installed:
    """What a test reads: the finished spans, the metrics."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self.reader = reader

    def spans(self) -> list[ReadableSpan]:
        return list(EXPORTER.get_finished_spans())

    def metrics(self) -> dict[str, list[Any]]:
        """Metric name -> its data points."""
        out: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    out.setdefault(metric.name, []).extend(metric.data.data_points)
        return out


@pytest.fixture
def otel() -> Iterator[Installed]:
    """An SDK tracer provider (and meter provider) installed for this test only."""
    _reset()
    EXPORTER.clear()
    reader = InMemoryMetricReader()
    trace.set_tracer_provider(PROVIDER)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    _INSTALLED[0] = True
    try:
        yield Installed(reader)
    finally:
        _INSTALLED[0] = False
        _reset()
        EXPORTER.clear()


def tree(spans: list[ReadableSpan], root: ReadableSpan | None = None) -> list[Any]:
    """The spans under *root* (None: the roots) as nested ``(name, [children])``, siblings
    sorted by name (concurrent siblings start in any order)."""
    parent = root.context.span_id if root is not None else None
    out = []
    for span in spans:
        above = span.parent.span_id if span.parent is not None else None
        if above == parent:
            out.append((span.name, tree(spans, span)))
    return sorted(out, key=repr)


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    """The one span named *name*."""
    (found,) = [s for s in spans if s.name == name]
    return found


def assert_nothing_secret(spans: list[ReadableSpan], *secrets: str) -> None:
    """No attribute, event attribute or status of any span carries one of *secrets* (an
    argument value, a handle, a principal)."""
    for span in spans:
        texts = [repr(v) for v in (span.attributes or {}).values()]
        texts += [repr(v) for e in span.events for v in (e.attributes or {}).values()]
        texts += [span.name, str(span.status.description)]
        for secret in secrets:
            for text in texts:
                assert secret not in text, f"{span.name} carries {secret!r}: {text}"


def _otlp_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # OTLP JSON: 64-bit integers as strings
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, tuple | list):
        return {"arrayValue": {"values": [_otlp_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _otlp_attributes(attributes: Any) -> list[dict[str, Any]]:
    return [{"key": k, "value": _otlp_value(v)} for k, v in (attributes or {}).items()]


def otlp_json(spans: list[ReadableSpan]) -> str:
    """*spans* as one line of OTLP JSON, the OpenTelemetry Collector's file exporter's
    format (an ``ExportTraceServiceRequest``: hex ids, enums as numbers, times as strings)."""
    encoded = [
        {
            "traceId": f"{s.context.trace_id:032x}",
            "spanId": f"{s.context.span_id:016x}",
            "parentSpanId": f"{s.parent.span_id:016x}" if s.parent is not None else "",
            "name": s.name,
            "kind": s.kind.value + 1,  # OTLP counts from SPAN_KIND_UNSPECIFIED = 0
            "startTimeUnixNano": str(s.start_time),
            "endTimeUnixNano": str(s.end_time),
            "attributes": _otlp_attributes(s.attributes),
            "events": [
                {
                    "timeUnixNano": str(e.timestamp),
                    "name": e.name,
                    "attributes": _otlp_attributes(e.attributes),
                }
                for e in s.events
            ],
            "status": {"code": s.status.status_code.value},
        }
        for s in spans
    ]
    resource = _otlp_attributes(spans[0].resource.attributes) if spans else []
    document = {
        "resourceSpans": [
            {
                "resource": {"attributes": resource},
                "scopeSpans": [{"scope": {"name": "resolvent"}, "spans": encoded}],
            }
        ]
    }
    return json.dumps(document) + "\n"
