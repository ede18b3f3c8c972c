"""Cold start at application scale: N handlers over one shared graph of resolvers.

A server has ``RESOLVERS`` resolvers; resolver *i* depends on up to 3 resolvers before
it, and each of N handlers depends directly on 5 of them (a fixed random draw, the same
for every implementation and every round). For each N this measures, side by side in
one process and interleaved round by round:

- **compile**: resolvent's ``container.compile`` of every handler; dishka's
  ``make_async_container`` (its graph build and validation) of the same providers;
- **first call**: the first call of every handler, each in its own call (resolvent's
  ``container.run``; dishka's request scope resolving the handler's 5 dependencies);
- **cold start**: the two together, what a fresh process pays before it has served each
  handler once;
- **steady state**: the mean time of one call once every handler has been called
  many times.

Every round executes fresh function objects, so nothing read or generated in an earlier
round is reused. ``python -m benchmarks --only App`` runs it alone;
``python -m benchmarks.appscale --count 300,1000`` counts the instructions of the same
phases under callgrind instead of timing them (which the machine's load does not move).
"""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

RESOLVERS = 50
DIRECT = 5
SIZES = (10, 100, 300, 1_000)
SEED = 27


def draw(handlers: int, resolvers: int = RESOLVERS) -> tuple[list[list[int]], list[list[int]]]:
    """The resolvers' dependencies and each handler's direct dependencies."""
    rng = random.Random(SEED)
    deps = [sorted(rng.sample(range(i), min(i, rng.randint(0, 3)))) for i in range(resolvers)]
    uses = [sorted(rng.sample(range(resolvers), DIRECT)) for _ in range(handlers)]
    return deps, uses


def _expr(i: int, ds: list[int]) -> str:
    return " + ".join([str(i), *(f"d{j}" for j in ds)])


def resolvent_source(deps: list[list[int]], uses: list[list[int]]) -> str:
    out = []
    for i, ds in enumerate(deps):
        params = ", ".join(f"d{j}: Annotated[int, Resolve(r{j})]" for j in ds)
        out.append(f"async def r{i}({params}) -> int:\n    return {_expr(i, ds)}\n")
    for k, ds in enumerate(uses):
        params = ", ".join(["user_id: str", *(f"d{j}: Annotated[int, Resolve(r{j})]" for j in ds)])
        out.append(f"async def h{k}({params}) -> int:\n    return {_expr(0, ds)}\n")
    return "\n".join(out)


def dishka_source(deps: list[list[int]], uses: list[list[int]]) -> str:
    out = [f"class T{i}(int): pass\n" for i in range(len(deps))]
    for i, ds in enumerate(deps):
        params = ", ".join(f"d{j}: T{j}" for j in ds)
        out.append(f"async def r{i}({params}) -> T{i}:\n    return T{i}({_expr(i, ds)})\n")
    for k, ds in enumerate(uses):
        params = ", ".join(["user_id", *(f"d{j}" for j in ds)])
        out.append(f"async def h{k}({params}):\n    return {_expr(0, ds)}\n")
    return "\n".join(out)


def _exec(source: str, ns: dict[str, Any]) -> dict[str, Any]:
    exec(compile(source, "<benchmark appscale>", "exec", dont_inherit=True), ns)
    return ns


def expected(deps: list[list[int]], uses: list[list[int]]) -> list[int]:
    vals: list[int] = []
    for i, ds in enumerate(deps):
        vals.append(i + sum(vals[j] for j in ds))
    return [sum(vals[j] for j in ds) for ds in uses]


Phase = Callable[[], Awaitable[Any]]


async def _resolvent(deps: list[list[int]], uses: list[list[int]]) -> tuple[Phase, Phase, Phase]:
    from resolvent import Container, Resolve

    ns = _exec(resolvent_source(deps, uses), {"Annotated": Annotated, "Resolve": Resolve})
    handlers = [ns[f"h{k}"] for k in range(len(uses))]
    box: list[Any] = []

    async def compile_all() -> None:
        container = Container()
        for h in handlers:
            container.compile(h)
        box.append(container)

    async def first() -> list[int]:
        run = box[0].run
        return [await run(h, user_id="u") for h in handlers]

    return compile_all, first, first


async def _dishka(deps: list[list[int]], uses: list[list[int]]) -> tuple[Phase, Phase, Phase]:
    from dishka import Provider, Scope, make_async_container

    ns = _exec(dishka_source(deps, uses), {})
    types = [ns[f"T{i}"] for i in range(len(deps))]
    wanted = [([types[j] for j in ds], ns[f"h{k}"]) for k, ds in enumerate(uses)]
    box: list[Any] = []

    async def compile_all() -> None:
        provider = Provider(scope=Scope.REQUEST)
        for i in range(len(deps)):
            provider.provide(ns[f"r{i}"], provides=types[i])
        box.append(make_async_container(provider))

    async def first() -> list[int]:
        container = box[0]
        out = []
        for ts, h in wanted:
            async with container() as request:
                out.append(await h("u", *[await request.get(t) for t in ts]))
        return out

    return compile_all, first, first


BUILDERS = {"resolvent": _resolvent, "dishka": _dishka}

SPLIT = ("reading signatures", "checks", "building steps", "walk and plan", "first calls")
"""The parts of resolvent's cold start, in the order a compile pays them (see `split`)."""


class _Timers:
    """Exclusive time per part: each timed function's own time, less the timed functions
    it calls (a check made while building steps counts as a check)."""

    def __init__(self) -> None:
        self.spent: dict[str, int] = dict.fromkeys(SPLIT, 0)
        self.calls = 0
        self._inner: list[int] = []

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock, inner, spent = time.thread_time_ns, self._inner, self.spent

        def timed(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            t0 = clock()
            inner.append(0)
            try:
                return fn(*args, **kwargs)
            finally:
                took = clock() - t0
                spent[part] += took - inner.pop()
                if inner:
                    inner[-1] += took

        return timed


async def split(n: int) -> dict[str, float]:
    """resolvent's cold start at *n* handlers in parts (ms of this thread's CPU time, which
    other work on the machine moves less than wall time): reading each function's
    signature (`read`), the compiler's checks (types, lifetimes, asking), building the
    steps of each plan (`build`), the rest of compiling (the walk over the graph, reusing
    what earlier plans checked, and making the plan), and the first call of each handler.
    Each part is timed with a wrapper around its functions (the wrappers' own cost, about
    a fraction of a microsecond per wrapped call, is in the figures: `wrapped_calls`)."""
    from resolvent._graph import compiler as _compiler
    from resolvent._graph import registry as _registry
    from resolvent._graph import steps as _steps

    timers = _Timers()
    patched: list[tuple[Any, str, Any]] = [
        (_registry, "read", "reading signatures"),
        (_compiler, "read", "reading signatures"),
        (_compiler, "check_type", "checks"),
        (_compiler, "check_lifetime", "checks"),
        (_compiler, "check_asks", "checks"),
        (_compiler, "captive_source", "checks"),
        (_steps, "refuse_unclosable", "checks"),
        (_compiler, "build_steps", "building steps"),
        (_compiler, "join_pieces", "building steps"),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patched]
    deps, uses = draw(n)
    compile_all, first, _ = await _resolvent(deps, uses)
    try:
        for owner, name, part in patched:
            setattr(owner, name, timers.wrap(part, getattr(owner, name)))
        gc.collect()
        gc.disable()
        t0 = time.thread_time_ns()
        await compile_all()
        t1 = time.thread_time_ns()
        got = await first()
        t2 = time.thread_time_ns()
    finally:
        gc.enable()
        for owner, name, original in saved:
            setattr(owner, name, original)
    if got != expected(deps, uses):
        raise AssertionError(f"resolvent computed something else at N={n}")
    out = {part: ns / 1e6 for part, ns in timers.spent.items()}
    out["walk and plan"] = (t1 - t0) / 1e6 - sum(out.values())
    out["first calls"] = (t2 - t1) / 1e6
    out["wrapped_calls"] = timers.calls
    return out


async def _one(name: str, n: int, steady_calls: int) -> dict[str, float]:
    deps, uses = draw(n)
    compile_all, first, again = await BUILDERS[name](deps, uses)
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        await compile_all()
        t1 = time.perf_counter_ns()
        got = await first()
        t2 = time.perf_counter_ns()
    finally:
        gc.enable()
    if got != expected(deps, uses):
        raise AssertionError(f"{name} computed something else at N={n}")
    for _ in range(3):  # past any warm-up tier
        await again()
    repeats = max(1, steady_calls // n)
    t3 = time.perf_counter_ns()
    for _ in range(repeats):
        await again()
    t4 = time.perf_counter_ns()
    return {
        "compile_ms": (t1 - t0) / 1e6,
        "first_ms": (t2 - t1) / 1e6,
        "cold_ms": (t2 - t0) / 1e6,
        "steady_us": (t4 - t3) / 1e3 / (repeats * n),
    }


async def run(
    rounds: int, sizes: tuple[int, ...] = SIZES, steady_calls: int = 3_000
) -> dict[str, Any]:
    """Medians over *rounds* of each figure, per N and implementation, and the ratios."""
    out: dict[str, Any] = {"resolvers": RESOLVERS, "direct": DIRECT, "rounds": rounds, "sizes": {}}
    for n in sizes:
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in BUILDERS}
        for r in range(rounds):
            order = list(BUILDERS) if r % 2 == 0 else list(reversed(BUILDERS))
            for name in order:
                samples[name].append(await _one(name, n, steady_calls))
        row: dict[str, Any] = {}
        for name, got in samples.items():
            row[name] = {k: statistics.median(s[k] for s in got) for k in got[0]}
        # Same-round ratios, then their median: the load on the machine cancels out.
        row["cold_ratio"] = statistics.median(
            a["cold_ms"] / b["cold_ms"]
            for a, b in zip(samples["resolvent"], samples["dishka"], strict=True)
        )
        row["steady_ratio"] = statistics.median(
            a["steady_us"] / b["steady_us"]
            for a, b in zip(samples["resolvent"], samples["dishka"], strict=True)
        )
        parts = [await split(n) for _ in range(rounds)]
        row["split"] = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
        out["sizes"][str(n)] = row
    return out


COUNTED = ("compile", "first calls")


async def _count_child(sizes: tuple[int, ...]) -> None:
    """Under callgrind (see `count`): each library's compile and first calls at each
    size, between markers (``os.getppid()``, on which callgrind writes its counters),
    after a warm-up at 10 handlers that pays the one-time imports."""
    import os

    for n in (10, *sizes):
        for name in BUILDERS:
            deps, uses = draw(n)
            compile_all, first, _ = await BUILDERS[name](deps, uses)
            gc.collect()
            gc.disable()
            os.getppid()
            await compile_all()
            os.getppid()
            got = await first()
            os.getppid()
            gc.enable()
            if got != expected(deps, uses):
                raise AssertionError(f"{name} computed something else at N={n}")


def count(sizes: tuple[int, ...] = (300, 1_000)) -> dict[str, dict[str, dict[str, int]]]:
    """Instructions of each library's compile and first calls, per size, counted under
    ``valgrind --tool=callgrind`` (which the machine's load does not move):
    ``{size: {library: {"compile": ..., "first calls": ...}}}``."""
    import json
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root)])
    with tempfile.TemporaryDirectory(prefix="callgrind-") as tmp:
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--dump-before=getppid", "-q",
             f"--callgrind-out-file={tmp}/cg.%p", sys.executable, "-m", "benchmarks.appscale",
             "--count-child", json.dumps(list(sizes))],
            cwd=root, env=env, check=True,
        )  # fmt: skip
        parts = sorted(Path(tmp).glob("cg.*.*"), key=lambda p: int(p.suffix[1:]))
        totals = []
        for part in parts:
            for line in part.read_text(encoding="utf-8").splitlines():
                if line.startswith("totals:"):
                    totals.append(int(line.split()[1]))
    out: dict[str, dict[str, dict[str, int]]] = {}
    i = 0
    for n in (10, *sizes):
        for name in BUILDERS:
            # Three markers per library and size: before compiling, after, after the calls.
            if n != 10:
                out.setdefault(str(n), {})[name] = {
                    "compile": totals[i + 1],
                    "first calls": totals[i + 2],
                }
            i += 3
    return out


def count_table(counted: dict[str, dict[str, dict[str, int]]]) -> str:
    lines = [
        "| N | resolvent compile | first calls | cold start | dishka build | first calls | "
        "cold start | ratio |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, row in counted.items():
        a, b = row["resolvent"], row["dishka"]
        ta, tb = sum(a.values()), sum(b.values())
        lines.append(
            f"| {int(n):,} | {a['compile'] / 1e6:.1f} M | {a['first calls'] / 1e6:.1f} M | "
            f"{ta / 1e6:.1f} M | {b['compile'] / 1e6:.1f} M | {b['first calls'] / 1e6:.1f} M | "
            f"{tb / 1e6:.1f} M | {ta / tb:.2f}x |"
        )
    return "\n".join(lines)


def table(data: dict[str, Any]) -> str:
    lines = [
        f"Application scale: N handlers over {data['resolvers']} shared resolvers "
        f"({data['direct']} direct dependencies each), median of {data['rounds']} rounds",
        "",
        "| N | resolvent compile | first calls | cold start | per handler | dishka build | "
        "first calls | cold start | cold ratio | steady resolvent | steady dishka |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, row in data["sizes"].items():
        a, b = row["resolvent"], row["dishka"]
        lines.append(
            f"| {int(n):,} | {a['compile_ms']:.1f} ms | {a['first_ms']:.1f} ms | "
            f"{a['cold_ms']:.1f} ms | {a['cold_ms'] * 1000 / int(n):.0f} µs | "
            f"{b['compile_ms']:.1f} ms | {b['first_ms']:.1f} ms | {b['cold_ms']:.1f} ms | "
            f"{row['cold_ratio']:.2f}x | {a['steady_us']:.1f} µs | {b['steady_us']:.1f} µs |"
        )
    if not any("split" in row for row in data["sizes"].values()):
        return "\n".join(lines)  # a results file from before the parts were measured
    lines += [
        "",
        "resolvent's cold start in parts (ms of CPU time; its own runs, a wrapper per part):",
        "",
        "| N | " + " | ".join(SPLIT) + " |",
        "| ---: | " + " | ".join("---:" for _ in SPLIT) + " |",
    ]
    for n, row in data["sizes"].items():
        if "split" in row:
            cells = " | ".join(f"{row['split'][part]:.1f}" for part in SPLIT)
            lines.append(f"| {int(n):,} | {cells} |")
    return "\n".join(lines)


_USAGE = """usage: python -m benchmarks.appscale [ROUNDS [N,N,...]]
       python -m benchmarks.appscale --count [N,N,...]
ROUNDS: timed rounds (default 3); N: handler counts (default 10,100,300,1000);
--count: instructions under callgrind instead of time (default 300,1000)."""


def main() -> None:
    import json
    import sys

    if sys.argv[1:2] == ["--count-child"]:
        asyncio.run(_count_child(tuple(json.loads(sys.argv[2]))))
        return
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(__doc__.split("\n\n")[0])
        print(_USAGE)
        return
    if sys.argv[1:2] == ["--count"]:
        sizes = tuple(int(s) for s in sys.argv[2].split(",")) if len(sys.argv) > 2 else (300, 1_000)
        print(count_table(count(sizes)))
        return
    try:
        rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
        sizes = tuple(int(s) for s in sys.argv[2].split(",")) if len(sys.argv) > 2 else SIZES
    except ValueError:
        raise SystemExit(_USAGE) from None
    print(table(asyncio.run(run(rounds, sizes))))


if __name__ == "__main__":
    main()
