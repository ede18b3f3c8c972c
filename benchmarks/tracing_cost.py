"""What tracing on costs, in instructions: per span, and per call for S2 and for one MCP
``tools/call`` over streamable HTTP, beside the MCP SDK's own per-message span.

    python -m benchmarks.tracing_cost [--out FILE]

Each variant is counted the way `benchmarks.instructions` counts (a process under
callgrind, warm calls, the counted calls between two markers), one process per variant:
OpenTelemetry lets a process install its tracer provider once. A provider is the SDK's
``TracerProvider`` with a ``SimpleSpanProcessor`` and an exporter that drops every span
(and counts them, which is how the table knows the spans per call); no meter provider is
installed, so the metrics go to the API's no-op meter.

- ``S2``: the 8-resolver diamond through ``container.run``: no provider (tracing off), and
  a provider (tracing on: the call's span and one per resolver).
- ``span``: the SDK's own span alone (``start_as_current_span`` around nothing), less an
  empty call: what one span costs in this SDK, the unit the others are read in.
- ``MCP HTTP``: one ``tools/call`` of the end-to-end scenario's tool (an APP singleton, a
  per-call resource and three CALL resolvers; see `benchmarks.http_server`) from the SDK's
  client to the SDK's server under uvicorn on 127.0.0.1, both in the counted process: no
  provider; a provider with ``Container(tracing=False)`` (the SDK's own spans: the server's
  ``tools/call graph`` and the client's request); and a provider with tracing on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from .instructions import _Counting

Once = Callable[[], Awaitable[Any]]

VARIANTS: dict[str, tuple[bool, list[tuple[str, int]]]] = {
    # process: (a provider installed?, [(what is counted, calls)])
    "S2 off": (False, [("S2", 2000)]),
    "S2 on": (True, [("S2", 50), ("span", 500), ("empty", 2000)]),
    "MCP off": (False, [("MCP HTTP", 20)]),
    "MCP SDK spans": (True, [("MCP HTTP untraced", 20)]),
    "MCP on": (True, [("MCP HTTP", 20)]),
}


class _Dropped:
    """A span exporter that drops every span, counting them."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def _install() -> _Dropped:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    dropped = _Dropped()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(dropped))  # type: ignore[arg-type]
    trace.set_tracer_provider(provider)
    return dropped


async def _s2(stack: contextlib.AsyncExitStack) -> Once:
    from . import impls
    from .graphs import diamond

    inst = await impls.resolvent(diamond(), stack)
    if isinstance(inst, str):
        raise SystemExit(inst)
    return inst.once


async def _span(stack: contextlib.AsyncExitStack) -> Once:
    from opentelemetry import trace

    tracer = trace.get_tracer("bench")

    async def once() -> None:
        with tracer.start_as_current_span("span"):
            pass

    return once


async def _empty(stack: contextlib.AsyncExitStack) -> Once:
    async def once() -> None:
        pass

    return once


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _mcp_http(stack: contextlib.AsyncExitStack, tracing: bool | None) -> Once:
    import anyio
    import uvicorn
    from mcp.client import Client
    from mcp.server.mcpserver import MCPServer

    from resolvent.mcp import inject

    from .graphs import USER_ID, expected
    from .http_server import graph
    from .impls import resolvent_setup

    g = graph()
    container, handler, _ = resolvent_setup(g)
    container.tracing = tracing
    server = MCPServer("bench-resolvent", lifespan=container.lifespan)
    server.tool(name="graph")(inject(container)(handler))
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    logging.getLogger().setLevel(logging.WARNING)
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.WARNING)
    port = _free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", access_log=False
    )
    served = uvicorn.Server(config)
    group = await stack.enter_async_context(anyio.create_task_group())
    group.start_soon(served.serve)
    with anyio.fail_after(30):
        while not served.started:
            await anyio.sleep(0.01)

    async def stop() -> None:
        served.should_exit = True

    stack.push_async_callback(stop)
    client = await stack.enter_async_context(Client(f"http://127.0.0.1:{port}/mcp"))
    want = expected(g)
    args = {"user_id": USER_ID}

    async def once() -> None:
        result = await client.call_tool("graph", args)
        structured = getattr(result, "structured_content", None)
        got = structured.get("result") if isinstance(structured, dict) else None
        if got is None:
            got = json.loads(result.content[0].text)
        if got != want:
            raise AssertionError(f"tools/call returned {got}, expected {want}")

    return once


async def _build(name: str, stack: contextlib.AsyncExitStack) -> Once:
    if name == "S2":
        return await _s2(stack)
    if name == "span":
        return await _span(stack)
    if name == "empty":
        return await _empty(stack)
    if name == "MCP HTTP":
        return await _mcp_http(stack, None)
    if name == "MCP HTTP untraced":
        return await _mcp_http(stack, False)
    raise SystemExit(f"unknown: {name}")


async def _child(spec: list[tuple[str, str, int]], out: Path, provider: bool) -> None:
    dropped = _install() if provider else None
    gc.collect()
    spans: list[int] = []
    async with contextlib.AsyncExitStack() as stack:
        built = []
        for name, _, calls in spec:
            once = await _build(name, stack)
            for _ in range(max(2 * calls, 20)):
                await once()
            built.append(once)
        print(f"ready {os.getpid()}", flush=True)
        sys.stdin.readline()
        for once, (_, _, calls) in zip(built, spec, strict=True):
            gc.collect()
            gc.disable()
            for _ in range(50):
                await once()
            before = dropped.spans if dropped is not None else 0
            os.getppid()  # marker: callgrind dumps what ran before
            for _ in range(calls):
                await once()
            os.getppid()  # marker: the dump of the counted calls
            gc.enable()
            spans.append((dropped.spans if dropped is not None else 0) - before)
    (out / "spans.json").write_text(json.dumps(spans), encoding="utf-8")


def count() -> dict[str, tuple[float, float]]:
    """{what: (instructions per call, spans per call)} for every variant."""
    found: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="tracing-cost-") as tmp:
        for process, (provider, items) in VARIANTS.items():
            out = Path(tmp) / process.replace(" ", "-")
            spec = [(name, "provider" if provider else "none", calls) for name, calls in items]
            counting = _Counting(spec, 0, out, child="benchmarks.tracing_cost")
            counting.start()
            figures = counting.result()
            spans = json.loads((out / "spans.json").read_text(encoding="utf-8"))
            for (name, path, calls), n in zip(spec, spans, strict=True):
                found[f"{process}: {name}"] = (figures[name, path], n / calls)
            print(f"tracing_cost: {process} counted", file=sys.stderr, flush=True)
    return found


def report(found: dict[str, tuple[float, float]]) -> str:
    empty = found["S2 on: empty"][0]
    span = found["S2 on: span"][0] - empty
    off, on = found["S2 off: S2"], found["S2 on: S2"]
    mcp_off, mcp_sdk, mcp_on = (
        found["MCP off: MCP HTTP"],
        found["MCP SDK spans: MCP HTTP untraced"],
        found["MCP on: MCP HTTP"],
    )
    sdk_spans = mcp_sdk[1]
    ours = mcp_on[1] - sdk_spans
    lines = [
        "| | instructions per call | spans per call | per span | ratio |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| the SDK's own span alone (`start_as_current_span`) | | 1 | {span:,.0f} | |",
        f"| S2, tracing off | {off[0]:,.0f} | 0 | | 1 |",
        f"| S2, tracing on | {on[0]:,.0f} | {on[1]:g} | {(on[0] - off[0]) / on[1]:,.0f} "
        f"| {on[0] / off[0]:,.1f} |",
        f"| MCP `tools/call` over HTTP, no provider | {mcp_off[0]:,.0f} | 0 | | 1 |",
        f"| the same, a provider, `tracing=False`: the SDK's own spans | {mcp_sdk[0]:,.0f} "
        f"| {sdk_spans:g} | {(mcp_sdk[0] - mcp_off[0]) / sdk_spans:,.0f} "
        f"| {mcp_sdk[0] / mcp_off[0]:.2f} |",
        f"| the same, tracing on: the SDK's spans and resolvent's | {mcp_on[0]:,.0f} "
        f"| {mcp_on[1]:g} | {(mcp_on[0] - mcp_sdk[0]) / ours:,.0f} (resolvent's {ours:g}) "
        f"| {mcp_on[0] / mcp_off[0]:.2f} ({mcp_on[0] / mcp_sdk[0]:.2f} over the SDK's spans) |",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tracing_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", type=Path, help="write the table here too")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        data = json.loads(args.child.read_text(encoding="utf-8"))
        spec = [tuple(s) for s in data["spec"]]
        provider = spec[0][1] == "provider"
        asyncio.run(_child(spec, args.child.parent, provider))
        return 0
    found = count()
    text = report(found)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
