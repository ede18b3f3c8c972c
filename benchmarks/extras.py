"""Measurements beside the timing table: import time, plan memory, growth across calls."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from . import graphs, impls


def _cached_env() -> dict[str, str]:
    """This environment, with bytecode caching on.

    An installed package has its ``.pyc`` files; with ``PYTHONDONTWRITEBYTECODE`` set the
    warm-up run cannot write them and every run would time compiling the source instead.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _wall(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=_cached_env())
    return time.perf_counter() - t0


def import_time(runs: int) -> dict[str, Any]:
    """The cost of ``import resolvent`` in a fresh interpreter, two ways.

    ``ms``: wall time of ``python -c "import resolvent"`` minus ``python -c pass``
    (medians, the two interleaved). ``importtime_ms``: the cumulative time
    ``python -X importtime`` reports for the ``resolvent`` module (it adds its own
    overhead per module, so it reads higher). Also checks that mcp is not imported.
    """
    code = "import resolvent, sys; sys.exit(3 if 'mcp' in sys.modules else 0)"
    _wall(code)  # warm the bytecode caches
    bare: list[float] = []
    full: list[float] = []
    for _ in range(runs):
        bare.append(_wall("pass"))
        full.append(_wall("import resolvent"))
    samples: list[float] = []
    mcp_loaded = False
    for _ in range(max(3, runs // 2)):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            capture_output=True,
            text=True,
            check=False,
            env=_cached_env(),
        )
        mcp_loaded |= proc.returncode == 3
        for line in proc.stderr.splitlines():
            parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
            if len(parts) == 3 and parts[2] == "resolvent":
                samples.append(int(parts[1]) / 1000)
    return {
        "ms": (statistics.median(full) - statistics.median(bare)) * 1000,
        "python_startup_ms": statistics.median(bare) * 1000,
        "importtime_ms": statistics.median(samples) if samples else None,
        "imports_mcp": mcp_loaded,
    }


def plan_memory_fresh() -> dict[str, Any]:
    """`plan_memory` in a fresh interpreter: in the benchmark's own process, the scenarios
    before it have compiled plans of the S2 shape, which pay for what plans of one shape
    share (see `plan_memory`)."""
    root = str(Path(__file__).resolve().parent.parent)
    env = _cached_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    code = (
        "import asyncio, json\n"
        "from benchmarks import extras\n"
        "print(json.dumps(asyncio.run(extras.plan_memory())))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


async def plan_memory() -> dict[str, Any]:
    """Bytes allocated (and kept) by compiling the S2 diamond and generating its code (as
    its first calls would), after a warm-up compile of a graph of another shape (S4's) that
    also generates its code, so the code generator's import is not counted when this runs
    alone. Not another diamond: values equal across plans of one shape (a line map, a
    step's inputs) are shared through tables of the process, and a same-shaped warm-up
    would have paid for them.

    ``bytes`` is the target's figure: everything the first plan of a container keeps,
    the registry's shared readings, expansions, sub-graphs and steps included.
    ``marginal_bytes`` is what one more handler over the same graph keeps (its own plan
    and generated code; the shared parts it reuses are not paid again).
    """
    warm, warm_handler, _ = impls.resolvent_setup(graphs.singleton())
    warm.compile(warm_handler).heat()
    container, handler, ns = impls.resolvent_setup(graphs.diamond())
    second = _second_handler(ns)
    plan = _traced(lambda: container.compile(handler))
    again = _traced(lambda: container.compile(second))
    return {
        "bytes": plan["bytes"],
        "peak_bytes": plan["peak_bytes"],
        "marginal_bytes": again["bytes"],
        "source_lines": plan["plan"].source().count("\n"),
    }


def _second_handler(ns: dict[str, Any]) -> Any:
    """Another handler with the S2 handler's signature, in the same namespace."""
    source = (
        f"async def handler2(user_id: str, r: Annotated[int, Resolve(n{graphs.diamond().root})])"
        " -> int:\n    return r\n"
    )
    exec(compile(source, "<handler2>", "exec", dont_inherit=True), ns)
    return ns["handler2"]


def _traced(compile_plan: Any) -> dict[str, Any]:
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        plan = compile_plan()
        plan.heat()  # a plan's code is generated on its first calls: count it
        gc.collect()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return {"bytes": after - before, "peak_bytes": peak - before, "plan": plan}


async def growth(calls: int) -> dict[str, Any]:
    """Traced memory before and after *calls* S2 calls through ``container.run``."""
    async with contextlib.AsyncExitStack() as stack:
        inst = await impls.resolvent(graphs.diamond(), stack)
        assert isinstance(inst, impls.Instance)
        once = inst.once
        tracemalloc.start()
        try:
            for _ in range(1000):
                await once()
            gc.collect()
            before, _ = tracemalloc.get_traced_memory()
            for _ in range(calls):
                await once()
            gc.collect()
            after, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    delta = after - before
    return {"calls": calls, "bytes": delta, "bytes_per_call": delta / calls}


async def thread_hops() -> dict[str, Any]:
    """How many worker-thread hops resolvent's S5 thread-mode plan makes per call."""
    async with contextlib.AsyncExitStack() as stack:
        inst = await impls.resolvent(graphs.diamond("sync", threaded=True), stack)
        assert isinstance(inst, impls.Instance)
        source = inst.info["plan"].source()
    run = source.split("async def resolve", 1)[0]
    return {"hops_per_call": run.count("await in_thread("), "plan_source": source}
