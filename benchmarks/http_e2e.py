"""End to end: MCP ``tools/call`` over streamable HTTP on 127.0.0.1, one server process each.

    python -m benchmarks.http_e2e [--rounds 5] [--calls 200] [--clients 4] [--mode MODE]

Every server (see ``http_server.py``) runs in a process of its own under uvicorn; the
clients (the SDK's ``Client``) run in this process. Each server is verified before and
after timing (same result, each resolver once per call, the APP singleton once, the
resource torn down once per call). The rounds are interleaved in a freshly shuffled
order; in a round each server answers *calls* tool calls from *clients* concurrent
clients. Reported per server: requests per second, p50 and p99 latency, and the server's
CPU time per call (its threads' run time, from /proc), each also as a ratio to the
hand-written server in the same run. ``--mode`` picks the protocol revision the clients speak: ``auto``
(the SDK client's default: the newest the server offers), ``legacy`` (the initialize
handshake, revisions up to 2025-11-25) or a revision such as ``2026-07-28``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from .graphs import USER_ID, expected
from .http_server import VARIANTS, graph

ROOT = Path(__file__).resolve().parent.parent
NOT_EXPRESSIBLE = {
    "mcp-sdk": "the SDK's resolvers have no resources (generators) and no APP scope",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cpu_seconds(pid: int) -> float:
    """CPU time of process *pid* so far (Linux /proc): the sum of its threads' run time in
    nanoseconds (``schedstat``), or else user + system time in clock ticks (10 ms each,
    which a batch of a few hundred calls does not resolve to a few per cent)."""
    try:
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")
    return total / 1e9


@contextlib.asynccontextmanager
async def _server(variant: str) -> AsyncIterator[tuple[str, int]]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.http_server", variant, str(port)], cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the {variant} server did not start") from None
                await asyncio.sleep(0.05)
            else:
                writer.close()
                await writer.wait_closed()
                break
        yield f"http://127.0.0.1:{port}/mcp", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _value(result: Any) -> Any:
    structured = getattr(result, "structured_content", None)
    if isinstance(structured, dict) and "result" in structured:
        return structured["result"]
    text = result.content[0].text
    return json.loads(text)


class Live:
    def __init__(self, variant: str, url: str, pid: int, clients: list[Any]) -> None:
        self.variant = variant
        self.url = url
        self.pid = pid
        self.clients = clients
        self.calls = 0
        self.latencies: list[float] = []
        self.wall: list[float] = []
        self.cpu: list[float] = []

    async def call(self, client: Any) -> Any:
        return _value(await client.call_tool("graph", {"user_id": USER_ID}))

    async def verify(self) -> None:
        g = graph()
        want = expected(g)
        got = await asyncio.gather(*(self.call(c) for c in self.clients))
        self.calls += len(got)
        if any(v != want for v in got):
            raise AssertionError(f"{self.variant}: returned {got}, expected {want}")
        await self.check_counts()

    async def check_counts(self) -> None:
        g = graph()
        seen = _value(await self.clients[0].call_tool("counts", {}))
        for i, node in enumerate(g.nodes):
            runs = 1 if node.app else self.calls
            if seen["counts"][i] != runs:
                raise AssertionError(
                    f"{self.variant}: resolver n{i} ran {seen['counts'][i]} times "
                    f"for {self.calls} calls"
                )
            downs = runs if node.kind == "agen" else 0
            if seen["teardowns"][i] != downs:
                raise AssertionError(
                    f"{self.variant}: n{i} torn down {seen['teardowns'][i]} times "
                    f"for {self.calls} calls"
                )

    async def batch(self, calls: int) -> None:
        per = [calls // len(self.clients)] * len(self.clients)
        for k in range(calls % len(self.clients)):
            per[k] += 1

        async def worker(client: Any, n: int) -> None:
            for _ in range(n):
                t0 = time.perf_counter()
                await self.call(client)
                self.latencies.append(time.perf_counter() - t0)

        cpu0 = _cpu_seconds(self.pid)
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(c, n) for c, n in zip(self.clients, per, strict=True)))
        self.wall.append(time.perf_counter() - t0)
        self.cpu.append(_cpu_seconds(self.pid) - cpu0)
        self.calls += calls


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _start(
    stack: contextlib.AsyncExitStack, clients: int, mode: str = "auto"
) -> dict[str, Live]:
    """Start every server with its clients (speaking protocol *mode*), and verify each
    before anything is timed."""
    from mcp.client import Client

    # Constructing an MCPServer in this process (other scenarios do) configures logging at
    # INFO, and the SDK's HTTP client (httpx, or its fork httpx2) then logs every request:
    # keep the progress output readable.
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.WARNING)
    live: dict[str, Live] = {}
    for variant in VARIANTS:
        url, pid = await stack.enter_async_context(_server(variant))
        opened = [await stack.enter_async_context(Client(url, mode=mode)) for _ in range(clients)]
        live[variant] = Live(variant, url, pid, opened)
        await live[variant].verify()
        print(f"HTTP: {variant} verified", file=sys.stderr, flush=True)
    return live


async def verify_only(clients: int = 2) -> list[str]:
    """Start and verify every server (no timing); return the verified variants."""
    async with contextlib.AsyncExitStack() as stack:
        live = await _start(stack, clients)
        for each in live.values():
            await each.verify()
        return list(live)


async def run(
    rounds: int, calls: int, clients: int, seed: int = 0, mode: str = "auto"
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        live = await _start(stack, clients, mode)
        for each in live.values():  # warm up every server before the first timed round
            await each.batch(calls // 4 or 1)
            each.latencies.clear()
            each.wall.clear()
            each.cpu.clear()
        rng = random.Random(f"{seed}:HTTP")
        for r in range(rounds):
            order = list(live)
            rng.shuffle(order)
            for variant in order:
                print(f"HTTP: round {r + 1}/{rounds} {variant}", file=sys.stderr, flush=True)
                await live[variant].batch(calls)
        for each in live.values():
            await each.check_counts()
        base = live["hand-written"]
        for variant, each in live.items():
            rps = [calls / w for w in each.wall]
            cpu = [c / calls * 1e6 for c in each.cpu]
            results[variant] = {
                "status": "ok",
                "rps": statistics.median(rps),
                "p50_ms": _quantile(each.latencies, 0.5) * 1e3,
                "p99_ms": _quantile(each.latencies, 0.99) * 1e3,
                "cpu_us": statistics.median(cpu),
                "rps_ratio": statistics.median(
                    [b / w for w, b in zip(each.wall, base.wall, strict=True)]
                ),
                "cpu_ratio": statistics.median(
                    [c / b for c, b in zip(each.cpu, base.cpu, strict=True) if b > 0] or [0.0]
                ),
                "samples": {"wall_s": each.wall, "cpu_s": each.cpu},
            }
        for res in results.values():
            res["p50_ratio"] = res["p50_ms"] / results["hand-written"]["p50_ms"]
            res["p99_ratio"] = res["p99_ms"] / results["hand-written"]["p99_ms"]
    for name, reason in NOT_EXPRESSIBLE.items():
        results[name] = {"status": "n/a", "reason": reason}
    data = {"rounds": rounds, "calls": calls, "clients": clients, "results": results}
    if mode != "auto":
        data["mode"] = mode
    return data


def markdown(data: dict[str, Any]) -> str:
    protocol = f" (protocol {data['mode']})" if data.get("mode") else ""
    head = (
        f"MCP `tools/call` over streamable HTTP on 127.0.0.1 (stateless, JSON responses): "
        f"{data['rounds']} rounds of {data['calls']} calls from {data['clients']} concurrent "
        f"clients per server{protocol}; graph: an APP singleton, a per-call async-generator resource and "
        "3 async resolvers.\n\n"
        "Ratios to the hand-written server in the same run (requests/s: higher is faster; "
        "latency and CPU: lower is better).\n\n"
        "| server | requests/s | p50 latency | p99 latency | server CPU per call |\n"
        "| --- | ---: | ---: | ---: | ---: |\n"
    )
    rows = []
    notes = []
    order = ["hand-written", "resolvent", "mcp-sdk", "fastmcp"]
    for name in order:
        res = data["results"].get(name)
        if res is None:
            continue
        if res["status"] != "ok":
            rows.append(f"| {name} | n/a | n/a | n/a | n/a |")
            notes.append(f"- {name}: n/a: {res['reason']}")
            continue
        rows.append(
            f"| {name} | {res['rps']:,.0f} ({res['rps_ratio']:.2f}x) "
            f"| {res['p50_ms']:.2f} ms ({res['p50_ratio']:.2f}x) "
            f"| {res['p99_ms']:.2f} ms ({res['p99_ratio']:.2f}x) "
            f"| {res['cpu_us']:,.0f} µs ({res['cpu_ratio']:.2f}x) |"
        )
    return head + "\n".join(rows) + "\n" + ("\n" + "\n".join(notes) + "\n" if notes else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http_e2e")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--mode", default="auto", help="protocol: auto (default), legacy or a revision"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    bench = run(args.rounds, args.calls, args.clients, mode=args.mode)
    data = asyncio.run(asyncio.wait_for(bench, 600))
    print(markdown(data))
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
