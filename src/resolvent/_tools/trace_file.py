"""A trace file read back: the spans resolvent's tracing emitted in production, summed per
resolver, for ``resolvent graph --traces`` and ``resolvent bench --traces``.

It reads what an OpenTelemetry exporter wrote to a file: OTLP JSON (the OpenTelemetry
Collector's ``file`` exporter: one ``{"resourceSpans": [...]}`` document per line, or one
document), or the Python SDK's ``ConsoleSpanExporter`` writing to a file (one JSON object
per span). It never imports OpenTelemetry, and never runs a plan.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import datetime
from typing import Any, NamedTuple, cast

__all__ = ("TraceFileError", "Traffic", "read_spans", "render_traffic", "traffic")

_FUNCTION = "code.function.name"
_MEMO_HIT = "resolvent.memo.hit"


class TraceFileError(Exception):
    """The trace file cannot be read, or holds no call of the function; the text says why."""


class Span(NamedTuple):
    """One span of the file: what the summary needs of it."""

    trace: str
    id: str
    parent: str | None
    name: str
    start: int  # ns since the epoch
    end: int
    attributes: dict[str, Any]
    error: bool
    events: tuple[tuple[str, dict[str, Any]], ...]


# --- reading -----------------------------------------------------------------------------


def _documents(text: str) -> Iterator[Any]:
    """Every JSON value in *text*: one document, JSON lines, or objects one after another
    (the console exporter's, each printed over several lines)."""
    decoder = json.JSONDecoder()
    at, end = 0, len(text)
    while True:
        while at < end and text[at].isspace():
            at += 1
        if at >= end:
            return
        value, at = decoder.raw_decode(text, at)
        yield value


def _otlp_value(value: dict[str, Any]) -> Any:
    """An OTLP ``AnyValue`` as Python (OTLP JSON writes 64-bit integers as strings)."""
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return tuple(_otlp_value(v) for v in value["arrayValue"].get("values", ()))
    return None


def _otlp_attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {item["key"]: _otlp_value(item.get("value", {})) for item in items or ()}


def _otlp_error(status: dict[str, Any] | None) -> bool:
    code = (status or {}).get("code")
    return code in (2, "STATUS_CODE_ERROR")


def _otlp_spans(document: dict[str, Any]) -> Iterator[Span]:
    for resource in document.get("resourceSpans") or ():
        for scope in resource.get("scopeSpans") or ():
            for span in scope.get("spans") or ():
                yield Span(
                    trace=span.get("traceId", ""),
                    id=span.get("spanId", ""),
                    parent=span.get("parentSpanId") or None,
                    name=span.get("name", ""),
                    start=int(span.get("startTimeUnixNano", 0)),
                    end=int(span.get("endTimeUnixNano", 0)),
                    attributes=_otlp_attributes(span.get("attributes")),
                    error=_otlp_error(span.get("status")),
                    events=tuple(
                        (event.get("name", ""), _otlp_attributes(event.get("attributes")))
                        for event in span.get("events") or ()
                    ),
                )


def _instant(text: str) -> int:
    """The console exporter's ISO 8601 time, in ns since the epoch."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    seconds = math.floor(moment.timestamp())
    return seconds * 1_000_000_000 + moment.microsecond * 1_000


def _console_span(span: dict[str, Any]) -> Span:
    context: dict[str, Any] = span.get("context") or {}
    status: dict[str, Any] = span.get("status") or {}
    return Span(
        trace=context.get("trace_id", ""),
        id=context.get("span_id", ""),
        parent=span.get("parent_id") or None,
        name=span.get("name", ""),
        start=_instant(span["start_time"]),
        end=_instant(span["end_time"]),
        attributes=dict(span.get("attributes") or {}),
        error=status.get("status_code") == "ERROR",
        events=tuple(
            (event.get("name", ""), dict(event.get("attributes") or {}))
            for event in span.get("events") or ()
        ),
    )


def _items(document: object) -> list[object]:
    return [*cast("list[object]", document)] if isinstance(document, list) else [document]


def _object(item: object) -> dict[str, Any]:
    return {**cast("dict[str, Any]", item)} if isinstance(item, dict) else {}


def read_spans(path: str) -> list[Span]:
    """Every span in the trace file at *path*.

    Raises:
        TraceFileError: the file cannot be read, or is neither OTLP JSON nor the
            console exporter's JSON.
    """
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        raise TraceFileError(f"cannot read the trace file {path!r}: {exc.strerror}") from None
    spans: list[Span] = []
    try:
        for document in _documents(text):
            for item in _items(document):
                found = _object(item)
                if "resourceSpans" in found:
                    spans.extend(_otlp_spans(found))
                elif "context" in found and "name" in found:
                    spans.append(_console_span(found))
                else:
                    raise ValueError("an object that is neither OTLP JSON nor a span")
    except (ValueError, KeyError, TypeError) as exc:
        raise TraceFileError(
            f"the trace file {path!r} is not OTLP JSON (the OpenTelemetry Collector's file "
            f"exporter) nor the SDK console exporter's JSON: {exc}\n"
            "  fix: export spans with one of them, each span or document as JSON"
        ) from None
    return spans


# --- summing ------------------------------------------------------------------------------


class Figures(NamedTuple):
    """Durations of one kind of span (µs): how many, their mean, p50 and p99, errors."""

    runs: int
    errors: int
    mean: float
    p50: float
    p99: float


def _figures(durations: list[float], errors: int) -> Figures:
    ordered = sorted(durations)
    mean = sum(ordered) / len(ordered) if ordered else 0.0
    return Figures(len(ordered), errors, mean, _quantile(ordered, 0.5), _quantile(ordered, 0.99))


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


class Traffic(NamedTuple):
    """One function's calls in a trace file: the calls, and under them each resolver's
    spans by name (``resolve NAME``, ``setup NAME``, ``state.load cart``, ...) and how
    often a call took its value from an outer scope's memo instead."""

    calls: Figures
    resolvers: dict[str, dict[str, Figures]]  # resolver -> span name -> figures
    memo_hits: dict[str, int]


def _us(span: Span) -> float:
    return (span.end - span.start) / 1_000


def traffic(spans: list[Span], function: str, path: str = "the trace file") -> Traffic:
    """The calls of *function* (a handler's qualified name) among *spans*, summed.

    Raises:
        TraceFileError: no call of *function* is in them (the text names those that are).
    """
    calls = [
        s
        for s in spans
        if s.name.startswith("call ") and s.attributes.get(_FUNCTION, s.name[5:]) == function
    ]
    if not calls:
        others = sorted(
            {s.attributes.get(_FUNCTION, s.name[5:]) for s in spans if s.name.startswith("call ")}
        )
        found = (
            f"it holds calls of {', '.join(others)}"
            if others
            else "it holds no span of resolvent's (tracing was off, or the spans were filtered out)"
        )
        raise TraceFileError(
            f"{path} holds no call of {function}; {found}.\n"
            "  fix: name the function whose calls the file traced"
        )
    children: dict[tuple[str, str], list[Span]] = {}
    for span in spans:
        if span.parent is not None:
            children.setdefault((span.trace, span.parent), []).append(span)
    durations: dict[str, dict[str, list[float]]] = {}
    errors: dict[tuple[str, str], int] = {}
    hits: dict[str, int] = {}
    for call in calls:
        for _, attributes in call.events:
            name = attributes.get(_FUNCTION)
            if isinstance(name, str) and _ == _MEMO_HIT:
                hits[name] = hits.get(name, 0) + 1
        stack = list(children.get((call.trace, call.id), ()))
        while stack:  # every span under the call (a lease wait is under its load)
            span = stack.pop()
            stack.extend(children.get((span.trace, span.id), ()))
            owner = span.attributes.get(_FUNCTION)
            if not isinstance(owner, str):
                continue  # another library's span (the SDK's request it sent)
            durations.setdefault(owner, {}).setdefault(span.name, []).append(_us(span))
            if span.error:
                errors[owner, span.name] = errors.get((owner, span.name), 0) + 1
    resolvers = {
        owner: {
            name: _figures(values, errors.get((owner, name), 0)) for name, values in kinds.items()
        }
        for owner, kinds in durations.items()
    }
    return Traffic(
        _figures([_us(c) for c in calls], sum(1 for c in calls if c.error)), resolvers, hits
    )


# --- rendering ----------------------------------------------------------------------------


def _time(us: float) -> str:
    if us >= 10_000:
        return f"{us / 1000:,.1f} ms"
    if us >= 100:
        return f"{us:,.0f} µs"
    return f"{us:.2f} µs"


def render_traffic(
    found: Traffic,
    order: list[tuple[str, str]],
    source: str,
    bench: dict[str, float] | None = None,
) -> str:
    """*found* as text, one row per span kind of each resolver in *order* (the plan's
    steps: name and scope), with the mean *bench* measured for each (µs), if given."""
    calls = found.calls
    lines = [
        f"from the traces in {source}: {calls.runs:,} call(s), "
        f"{_time(calls.mean)} mean, {_time(calls.p99)} p99"
        + (f", {calls.errors:,} failed" if calls.errors else "")
    ]
    width = max([len("resolver"), *(len(name) for name, _ in order)])
    span_width = max(
        [
            len("memo hit"),
            *(len(_verb(kind)) for kinds in found.resolvers.values() for kind in kinds),
        ]
    )
    bench_head = f"{'bench mean':>11}" if bench is not None else ""
    lines.append(
        f"  {'resolver':<{width}}  {'scope':<7}  {'span':<{span_width}}  {'per call':>8}  "
        f"{'mean':>10}  {'p50':>10}  {'p99':>10}  {'errors':>6}{bench_head}"
    )
    for name, scope in order:
        kinds = found.resolvers.get(name, {})
        hits = found.memo_hits.get(name, 0)
        if not kinds and not hits:
            lines.append(f"  {name:<{width}}  {scope:<7}  (not in the traces)")
            continue
        first = True
        for kind, figures in sorted(kinds.items(), key=lambda item: _kind_order(item[0])):
            measured = ""
            if bench is not None and first:
                mean = bench.get(name)
                measured = f"{_time(mean):>11}" if mean is not None else f"{'-':>11}"
            lines.append(
                f"  {name if first else '':<{width}}  {scope if first else '':<7}  "
                f"{_verb(kind):<{span_width}}  {figures.runs / calls.runs:>8.2f}  "
                f"{_time(figures.mean):>10}  {_time(figures.p50):>10}  "
                f"{_time(figures.p99):>10}  {figures.errors:>6}{measured}"
            )
            first = False
        if hits:
            label = "memo hit"
            lines.append(
                f"  {name if first else '':<{width}}  {scope if first else '':<7}  "
                f"{label:<{span_width}}  {hits / calls.runs:>8.2f}  (taken from the "
                f"{scope} scope's memo, no span)"
            )
    return "\n".join(lines)


def _verb(name: str) -> str:
    """A span's kind: its name without the resolver's (``setup``, ``state.load``)."""
    return name.partition(" ")[0]


_KINDS = ("resolve", "setup", "state.new", "state.load", "state.lease_wait", "ask")


def _kind_order(name: str) -> tuple[int, str]:
    kind = _verb(name)
    return (_KINDS.index(kind) if kind in _KINDS else len(_KINDS), name)
