"""Soak: memory and cache bounds over many resolutions.

    python -m benchmarks.soak                      # 1,000,000 resolutions (a few minutes)
    python -m benchmarks.soak --resolutions 50000  # shorter
    python -m benchmarks.soak --json benchmarks/results/soak.json

One container serves two kinds of traffic at once, in batches of 1,000 resolutions:

- core: SESSION scopes opened and closed in turn, each running calls whose handler uses an
  APP, a SESSION and a CALL resource (``session.run``);
- MCP: ``tools/call`` through the SDK's in-memory client on 2026-07-28, with SESSION
  scopes shared by a ``session_key`` that cycles over many more keys than the adapter's
  session table may hold, so the table keeps evicting.

After a warm-up the traced memory (tracemalloc) is sampled after every batch; the run
reports the growth from warm-up to the end, the largest size the adapter's session table
and the container's plan cache reached, and the resources still open at the end (0). The
harness's ``--soak`` mode (``python -m benchmarks --soak``) measures the S2 diamond alone;
this one covers resources at every scope and the MCP adapter's tables.
"""

import argparse
import gc
import itertools
import json
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import anyio

from resolvent import Container, Resolve, Scope

BATCH = 1_000
MCP_SHARE = 10  # percent of each batch sent through the MCP client
SESSION_KEYS = 500
MAX_SESSIONS = 32


class Gauges:
    """Opened and closed counts of the resources at each scope."""

    def __init__(self) -> None:
        self.opened = {"app": 0, "session": 0, "call": 0}
        self.closed = {"app": 0, "session": 0, "call": 0}

    def open_now(self) -> dict[str, int]:
        return {scope: self.opened[scope] - self.closed[scope] for scope in self.opened}


def build(gauges: Gauges) -> tuple[Any, Any, Any]:
    """A container, an MCPServer with one injected tool, and a core handler.

    Resolvers are defined here, so their annotations must be evaluated eagerly: this
    module does not use ``from __future__ import annotations``.
    """
    from mcp.server.mcpserver import MCPServer

    from resolvent.mcp import inject

    container = Container()
    server = MCPServer("soak", lifespan=container.lifespan)

    @container.provider(scope=Scope.APP)
    async def pool() -> AsyncIterator[str]:
        gauges.opened["app"] += 1
        try:
            yield "pool"
        finally:
            gauges.closed["app"] += 1

    @container.provider(scope=Scope.SESSION)
    async def visitor(p: Annotated[str, Resolve(pool)]) -> AsyncIterator[str]:
        gauges.opened["session"] += 1
        try:
            yield f"{p}/visitor"
        finally:
            gauges.closed["session"] += 1

    async def connection(v: Annotated[str, Resolve(visitor)]) -> AsyncIterator[str]:
        gauges.opened["call"] += 1
        try:
            yield f"{v}/conn"
        finally:
            gauges.closed["call"] += 1

    async def handler(n: int, conn: Annotated[str, Resolve(connection)]) -> int:
        return n + len(conn)

    keys = itertools.cycle(range(SESSION_KEYS))

    @server.tool()
    @inject(container, session_key=lambda ctx: next(keys), max_sessions=MAX_SESSIONS)
    async def job(n: int, conn: Annotated[str, Resolve(connection)]) -> int:
        return n + len(conn)

    return container, server, handler


async def soak(resolutions: int, *, warmup: int = 5 * BATCH) -> dict[str, Any]:
    """Run *resolutions* after *warmup*; return the figures."""
    from mcp.client import Client

    from resolvent.mcp._sessions import _tables

    gauges = Gauges()
    container, server, handler = build(gauges)
    table = None
    expected = len("pool/visitor/conn")
    samples: list[int] = []
    max_sessions = max_plans = mcp_calls = core_calls = 0
    started = time.perf_counter()

    async def batch(client: Any, first: int) -> None:
        nonlocal mcp_calls, core_calls, max_sessions, max_plans, table
        mcp = BATCH * MCP_SHARE // 100
        for n in range(first, first + mcp):
            result = await client.call_tool("job", {"n": n})
            if result.is_error or result.structured_content != {"result": n + expected}:
                raise AssertionError(f"MCP call {n} answered {result}")
        mcp_calls += mcp
        for start in range(first + mcp, first + BATCH, 100):
            async with container.session() as session:
                for n in range(start, start + 100):
                    if await session.run(handler, n=n) != n + expected:
                        raise AssertionError(f"core call {n} answered wrongly")
        core_calls += BATCH - mcp
        table = table or _tables.get(container)
        max_sessions = max(max_sessions, len(table.entries) if table else 0)
        max_plans = max(max_plans, len(container._plans))

    async with container, Client(server, mode="2026-07-28") as client:
        # Trace from the start, so the objects alive at the baseline (the session table's
        # sessions, caches) were traced too and replacing them is not counted as growth.
        tracemalloc.start()
        try:
            for first in range(0, warmup, BATCH):
                await batch(client, first)
            gc.collect()
            baseline = tracemalloc.get_traced_memory()[0]
            for first in range(warmup, warmup + resolutions, BATCH):
                await batch(client, first)
                if (first // BATCH) % 10 == 0:
                    gc.collect()
                    samples.append(tracemalloc.get_traced_memory()[0] - baseline)
            gc.collect()
            final = tracemalloc.get_traced_memory()[0] - baseline
        finally:
            tracemalloc.stop()
        open_before_exit = gauges.open_now()
    return {
        "resolutions": resolutions,
        "warmup": warmup,
        "mcp_calls": mcp_calls,
        "core_calls": core_calls,
        "growth_bytes": final,
        "max_growth_bytes": max(samples, default=final),
        "growth_samples": samples,
        "session_table_max": max_sessions,
        "session_table_bound": MAX_SESSIONS,
        "session_keys": SESSION_KEYS,
        "plan_cache_max": max_plans,
        "open_call_resources_between_calls": open_before_exit["call"],
        "resources_leaked": gauges.open_now(),
        "resources_opened": dict(gauges.opened),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    p.add_argument("--resolutions", type=int, default=1_000_000)
    p.add_argument("--json", type=Path, help="where to write the figures (JSON)")
    args = p.parse_args(argv)
    figures = anyio.run(soak, args.resolutions)
    text = json.dumps(figures, indent=2, sort_keys=True)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    leaked = any(figures["resources_leaked"].values())
    over = figures["session_table_max"] > figures["session_table_bound"]
    return 1 if leaked or over else 0


if __name__ == "__main__":
    sys.exit(main())
