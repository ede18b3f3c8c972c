"""A FastAPI app served by uvicorn with tracing on, for tests/test_tracing_web.py.

The process installs an OpenTelemetry SDK provider whose exporter writes each finished span
as one JSON line to the file in ``TRACE_FILE``; FastAPI opens the request's spans itself.
"""

import json
import os
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Any

from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from resolvent import Container, Resolve
from resolvent.starlette import inject


class ToFile(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            for span in spans:
                parent = span.parent.span_id if span.parent is not None else None
                line = {
                    "name": span.name,
                    "id": span.context.span_id,
                    "parent": parent,
                    "attributes": dict(span.attributes or {}),
                }
                out.write(json.dumps(line, default=str) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ToFile(os.environ["TRACE_FILE"])))
trace.set_tracer_provider(provider)

container = Container()


async def account(user: str) -> str:
    return f"account of {user}"


async def session() -> AsyncIterator[str]:
    yield "session"


@inject(container)
async def balance(
    user: str,
    a: Annotated[str, Resolve(account)],
    s: Annotated[str, Resolve(session)],
) -> dict[str, Any]:
    return {"account": a, "session": s}


app = FastAPI(lifespan=container.lifespan)
app.get("/balance/{user}")(balance)
