"""Run the benchmarks: ``python -m benchmarks [--quick] [--soak] [--only KEY,...]``.

Writes a Markdown table to stdout, JSON to benchmarks/results/latest.json and the chain
plot to benchmarks/results/chain.png (``--quick`` writes quick.json / quick-chain.png).
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import logging
import os
import platform
import statistics
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from . import appscale, extras, fastapi_routes, http_e2e, report, scenarios, state_tools
from .runner import Progress, Scenario, Settings, run_scenario

RESULTS = Path(__file__).resolve().parent / "results"
PACKAGES = (
    "resolvent",
    "mcp",
    "dishka",
    "wireup",
    "fast-depends",
    "diwire",
    "that-depends",
    "svcs",
    "modern-di",
    "fastmcp",
    "uncalled-for",
    "fastapi",
    "anyio",
)


def _git() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{rev}{' + uncommitted changes in src' if dirty else ''}" if rev else "unknown"


def environment() -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "missing"
    return {
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "load": round(os.getloadavg()[0], 2),  # the 1-minute load average at the start
        "commit": _git(),
        "versions": versions,
    }


def chain_summary(results: list[dict[str, Any]], lengths: tuple[int, ...]) -> dict[str, Any]:
    by_key = {r["key"]: r for r in results}
    rows = [by_key.get(f"S3 chain {n:,}") for n in lengths]
    names = sorted({name for r in rows if r for name in r["results"]})
    per_call: dict[str, list[Any]] = {}
    per_node: dict[str, list[Any]] = {}
    for name in names:
        per_call[name], per_node[name] = [], []
        for n, row in zip(lengths, rows, strict=True):
            res = row["results"].get(name) if row else None
            if res is None:
                value: Any = "-"
            elif res["status"] == "ok":
                value = res["us"]
            else:
                value = res["status"]
            per_call[name].append(value)
            per_node[name].append(value / n if isinstance(value, float) else value)
    marginal: dict[str, float | None] = {}
    if len(lengths) >= 2:
        lo, hi = lengths[-2], lengths[-1]
        for name in names:
            a, b = per_call[name][-2], per_call[name][-1]
            ok = isinstance(a, float) and isinstance(b, float)
            marginal[name] = (b - a) / (hi - lo) if ok else None
    base = marginal.get("hand-written")
    ratio = {n: (m / base if m is not None and base else None) for n, m in marginal.items()}
    return {
        "lengths": list(lengths),
        "per_call_us": per_call,
        "per_node_us": per_node,
        "marginal_us": marginal,
        "marginal_ratio": ratio,
    }


def _ratio(results: list[dict[str, Any]], key: str, name: str = "resolvent") -> float | None:
    for r in results:
        if r["key"] == key:
            res = r["results"].get(name, {})
            return res.get("ratio") if res.get("status") == "ok" else None
    return None


def _ratio_to(results: list[dict[str, Any]], key: str, name: str, floor: str) -> float | None:
    """The median of per-round ratios of *name* to *floor*, timed in the same rounds:
    the keyed State edit against the keyed edit by hand, which also keeps a receipt."""
    for r in results:
        if r["key"] == key:
            a, b = r["results"].get(name, {}), r["results"].get(floor, {})
            if a.get("status") != "ok" or b.get("status") != "ok":
                return None
            return statistics.median(
                x / y for x, y in zip(a["samples_us"], b["samples_us"], strict=False)
            )
    return None


def targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    res = data["scenarios"]
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, limit: float, fmt: str = "{:.2f}x") -> None:
        out.append(
            {
                "name": name,
                "limit": fmt.format(limit),
                "measured": fmt.format(value) if value is not None else "-",
                "value": value,
                "met": None if value is None else value <= limit,
            }
        )

    add("S1 one async resolver", _ratio(res, "S1"), 1.4)
    add("S2 diamond", _ratio(res, "S2"), 1.2)
    add("S3 chain 100", _ratio(res, "S3 chain 100"), 1.05)
    chain = data.get("chain") or {}
    add(
        "S3 chain 10,000: marginal cost per node",
        chain.get("marginal_ratio", {}).get("resolvent"),
        1.1,
    )
    add("S4 singleton + CALL resolvers", _ratio(res, "S4"), 1.4)
    add("S5 inline", _ratio(res, "S5 inline"), 1.2)
    add("S5 thread (vs one bare to_thread.run_sync hop)", _ratio(res, "S5 thread"), 1.3)
    hops = data.get("thread_hops", {}).get("hops_per_call")
    add("S5 thread: worker-thread hops per call", hops, 1, "{}")
    add("S6 50 leaves", _ratio(res, "S6"), 1.2)
    add("S7 resource per call", _ratio(res, "S7"), 1.2)
    s8 = next((r for r in res if r["key"] == "S8 concurrent"), None)
    conc = None
    if s8:
        a, b = s8["results"].get("resolvent", {}), s8["results"].get("one sleep", {})
        if a.get("status") == "ok" and b.get("status") == "ok":
            conc = a["us"] / b["us"]
    add("S8 concurrent (vs one 10 ms sleep)", conc, 1.3)
    add("MCP tools/call (vs graph in the tool body)", _ratio(res, "MCP"), 1.03)
    add("FastAPI route (vs the hand-written route)", _ratio(res, "FastAPI"), 1.02)
    app = data.get("app_scale", {}).get("sizes", {}).get("300")
    add(
        "cold start, 300 handlers (compile + first call, vs dishka's build + first call)",
        app["cold_ratio"] if app else None,
        3.0,
    )
    for store in state_tools.STORES:
        add(f"State edit, {store} (vs the same update by hand)", _ratio(res, f"State {store}"), 1.3)
        add(
            f"State edit with an idempotency key, {store} (vs the same keyed update by hand)",
            _ratio_to(
                res, f"State {store}", "resolvent, idempotency key", "hand-written, idempotency key"
            ),
            1.3,
        )
    imp = data.get("import_time", {})
    add("import resolvent (wall, minus python -c pass)", imp.get("ms"), 50.0, "{:.1f} ms")
    if imp.get("importtime_ms") is not None:
        add("import resolvent (-X importtime, cumulative)", imp["importtime_ms"], 50.0, "{:.1f} ms")
    mem = data.get("plan_memory", {}).get("bytes")
    add("compiled S2 plan", mem / 1024 if mem is not None else None, 10.0, "{:.1f} KB")
    grow = data.get("growth")
    if grow:
        add(f"memory growth over {grow['calls']:,} calls", grow["bytes"] / 1024, 16.0, "{:.1f} KB")
    return out


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true", help="fewer rounds, shorter batches (< 1 min)")
    p.add_argument("--soak", action="store_true", help="memory growth over 1,000,000 calls")
    p.add_argument("--rounds", type=int, help="timed rounds per implementation")
    p.add_argument("--batch-ms", type=float, help="target duration of one timed batch")
    p.add_argument(
        "--only",
        help="comma-separated scenario key prefixes, e.g. S2,S3,MCP,FastAPI,HTTP (end to end),"
        " App (cold start at application scale), Paths (resolvent's other paths on S1-S7),"
        " Ask (an MCP tool that may ask, over both protocols)",
    )
    p.add_argument("--json", type=Path, help="where to write the JSON results")
    p.add_argument("--plot", type=Path, help="where to write the chain plot (PNG)")
    p.add_argument("--no-extras", action="store_true", help="skip import time and memory")
    p.add_argument("--traceback", action="store_true", help="print tracebacks of failures")
    return p.parse_args(argv)


class FailedBefore(Exception):
    """A peer is not run on a longer chain after failing a shorter one."""


async def _failed_before(why: str, stack: Any) -> Any:
    raise FailedBefore(f"already failed at {why}")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    env = environment()  # before the run: its load average is the machine's, not the run's
    settings = Settings(
        rounds=args.rounds or (5 if args.quick else 15),
        batch_ns=int((args.batch_ms or (4 if args.quick else 25)) * 1e6),
    )
    chains = (1, 10, 100, 1_000, 10_000)
    todo: list[Scenario] = scenarios.all_scenarios(chains)
    skipped: list[str] = []
    mcp = scenarios.mcp_scenario()
    if isinstance(mcp, str):
        skipped.append(f"MCP scenario: {mcp}")
        print(f"MCP scenario skipped: {mcp}", file=sys.stderr)
    else:
        todo.append(mcp)
    todo.append(fastapi_routes.scenario())
    todo += state_tools.scenarios()
    todo += scenarios.path_scenarios()
    http = True
    app_scale = True
    if args.only:
        keys = [k.strip() for k in args.only.split(",")]
        todo = [s for s in todo if any(s.key.startswith(k) for k in keys)]
        http = "HTTP" in keys
        app_scale = "App" in keys
    extra_steps = 0 if args.no_extras else 4
    progress = Progress(len(todo) + extra_steps)
    results = []
    failed_chain: dict[str, str] = {}
    for scenario in todo:
        if scenario.key.startswith("S3 chain"):
            # A peer that failed a shorter chain is not built again for a longer one
            # (diwire takes minutes to compile 10,000 providers before it fails too).
            for name, why in failed_chain.items():
                if name in scenario.factories:
                    scenario.factories[name] = functools.partial(_failed_before, why)
        result = await run_scenario(scenario, settings, progress)
        results.append(result)
        if scenario.key.startswith("S3 chain"):
            for name, res in result["results"].items():
                if res["status"] == "fails" and name not in failed_chain:
                    failed_chain[name] = f"{scenario.key}: {res['reason']}"
        progress.step()
    data: dict[str, Any] = {
        "environment": env,
        "quick": args.quick,
        "settings": {"rounds": settings.rounds, "batch_ms": settings.batch_ns / 1e6},
        "scenarios": results,
        "skipped": skipped,
    }
    if any(r["key"].startswith("S3") for r in results):
        done = tuple(n for n in chains if any(r["key"] == f"S3 chain {n:,}" for r in results))
        data["chain"] = chain_summary(results, done)
    if not args.no_extras:
        progress.show("import time of resolvent")
        data["import_time"] = extras.import_time(3 if args.quick else 7)
        progress.step()
        progress.show("memory of a compiled plan")
        data["plan_memory"] = extras.plan_memory_fresh()
        progress.step()
        calls = 1_000_000 if args.soak else (20_000 if args.quick else 100_000)
        progress.show(f"memory growth over {calls:,} calls (traced)")
        data["growth"] = await extras.growth(calls)
        progress.step()
        progress.show("worker-thread hops in thread mode")
        data["thread_hops"] = await extras.thread_hops()
        progress.step()
    if app_scale:
        progress.show("App: cold start at application scale, beside dishka")
        sizes = appscale.SIZES[:-1] if args.quick else appscale.SIZES
        data["app_scale"] = await appscale.run(rounds=3 if args.quick else 7, sizes=sizes)
    if http:
        progress.show("HTTP: MCP tools/call over streamable HTTP")
        data["http"] = await http_e2e.run(
            rounds=2 if args.quick else 7,
            calls=60 if args.quick else 300,
            clients=2 if args.quick else 4,
        )
    data["targets"] = targets(data)
    progress.finish("benchmarks finished")
    return data


def quiet_http_clients() -> None:
    """Keep httpx from logging each request. Constructing an MCPServer (the MCP scenarios
    do) sets the root logger to INFO with a rich handler; after that every request of the
    FastAPI route (through ``httpx.ASGITransport``) printed a formatted log line inside the
    timed loop, the same cost for every implementation, which pulled all their ratios
    toward 1 (a run with ``--only FastAPI`` alone logged nothing)."""
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    quiet_http_clients()
    data = asyncio.run(run(args))
    stem = "quick" if args.quick else "latest"
    json_path = args.json or RESULTS / f"{stem}.json"
    report.write_json(data, json_path)
    text = report.markdown(data)
    print(text)
    if data.get("chain"):
        plot_path = args.plot or RESULTS / ("quick-chain.png" if args.quick else "chain.png")
        report.plot(data["chain"], plot_path)
        print(f"plot: {plot_path}", file=sys.stderr)
    print(f"json: {json_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
