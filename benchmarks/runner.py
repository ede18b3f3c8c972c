"""Verification and interleaved timing of the implementations of one scenario."""

from __future__ import annotations

import contextlib
import gc
import random
import statistics
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .graphs import Graph, expected
from .impls import Instance

BASELINE = "hand-written"


class VerificationError(AssertionError):
    """An implementation computed something else, or ran a resolver the wrong number of times."""


Factory = Callable[[contextlib.AsyncExitStack], Awaitable["Instance | str"]]


@dataclass
class Scenario:
    key: str
    title: str
    graph: Graph | None
    factories: dict[str, Factory]
    # Extra timed callables (not implementations), e.g. one bare sleep.
    references: dict[str, Factory] = field(default_factory=dict)
    nodes: int = 0
    expect: Any = None
    verify_calls: int = 3


@dataclass
class Settings:
    rounds: int
    batch_ns: int
    seed: int = 0


class Progress:
    """One status line on stderr (rewritten in place on a terminal)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.tty = sys.stderr.isatty()
        self.start = time.perf_counter()
        self._last = ""

    def show(self, text: str) -> None:
        elapsed = time.perf_counter() - self.start
        line = f"[{self.done:>2}/{self.total}] {elapsed:6.1f}s  {text}"
        if self.tty:
            sys.stderr.write("\r\x1b[K" + line[:150])
            sys.stderr.flush()
        else:  # a log: one line per scenario or extra measurement
            head = text.split(":", 1)[0]
            if head != self._last:
                print(line, file=sys.stderr, flush=True)
            self._last = head

    def step(self) -> None:
        self.done += 1

    def finish(self, text: str) -> None:
        if self.tty:
            sys.stderr.write("\r\x1b[K")
        print(f"{text} in {time.perf_counter() - self.start:.1f}s", file=sys.stderr, flush=True)


def check(inst: Instance, graph: Graph, calls: int, got: list[Any]) -> None:
    """Same output as the direct computation; every resolver ran the right number of times."""
    want = expected(graph)
    bad = [g for g in got if g != want]
    if bad:
        raise VerificationError(f"returned {bad[0]!r}, expected {want!r}")
    for i, node in enumerate(graph.nodes):
        runs = 1 if node.app else calls
        if inst.counts[i] != runs:
            raise VerificationError(f"resolver n{i} ran {inst.counts[i]} times for {calls} calls")
        downs = runs if node.kind == "agen" else 0
        if inst.teardowns[i] != downs:
            raise VerificationError(
                f"resolver n{i} was torn down {inst.teardowns[i]} times for {calls} calls"
            )


async def verify(inst: Instance, scenario: Scenario) -> int:
    """Run a few calls and check them; return the number of calls made."""
    calls = scenario.verify_calls
    got = [await inst.once() for _ in range(calls)]
    if scenario.graph is not None:
        check(inst, scenario.graph, calls, got)
    elif scenario.expect is not None:
        bad = [g for g in got if g != scenario.expect]
        if bad:
            raise VerificationError(f"returned {bad[0]!r}, expected {scenario.expect!r}")
        if any(c != calls for c in inst.counts):
            raise VerificationError(f"resolver counts {inst.counts} for {calls} calls")
    return calls


async def _batch(once: Callable[[], Awaitable[Any]], n: int, collect: bool = True) -> int:
    """Time *n* calls (after one untimed warm-up call when *collect*); return nanoseconds."""
    if collect:
        gc.collect()
        await once()  # the caches were just shared with another implementation
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            await once()
        return time.perf_counter_ns() - t0
    finally:
        gc.enable()


# Untimed calls before calibrating: CPython 3.11 specializes a function's bytecode only from
# its eighth call, so an implementation whose batches hold one call (the 10,000 chain) would
# otherwise be timed unspecialized in its first rounds, and which ones depends on how its
# first calls were spent (resolvent interprets a plan's first calls; hand-written code does
# not). Every implementation is timed as it runs in a server that has served a few requests.
WARM_CALLS = 16


async def _calibrate(once: Callable[[], Awaitable[Any]], batch_ns: int) -> tuple[int, int]:
    """The batch size whose duration reaches *batch_ns*, and the calls made finding it
    (after `WARM_CALLS` untimed ones)."""
    for _ in range(WARM_CALLS):
        await once()
    n, made = 1, WARM_CALLS
    while True:
        took = await _batch(once, n, collect=False)
        made += n
        if took >= batch_ns or n >= 1 << 20:
            return n, made
        n = max(n * 2, int(n * batch_ns / max(took, 1) * 1.1))


def _describe(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:160]


async def run_scenario(
    scenario: Scenario, settings: Settings, progress: Progress
) -> dict[str, Any]:
    """Build, verify and time every implementation; the rounds are interleaved and shuffled."""
    gc.collect()
    gc.freeze()  # what exists now (modules, the graphs) need not be scanned by gc.collect()
    results: dict[str, dict[str, Any]] = {}
    live: dict[str, tuple[Instance, int]] = {}
    calls_made: dict[str, int] = {}
    async with contextlib.AsyncExitStack() as stack:
        for name, factory in {**scenario.factories, **scenario.references}.items():
            progress.show(f"{scenario.key}: building and verifying {name}")
            kind = "reference" if name in scenario.references else "implementation"
            try:
                inst = await factory(stack)
                if isinstance(inst, str):
                    results[name] = {"status": "n/a", "reason": inst, "kind": kind}
                    continue
                if kind == "reference":
                    await inst.once()
                    calls_made[name] = 1
                else:
                    calls_made[name] = await verify(inst, scenario)
            except VerificationError as exc:
                results[name] = {"status": "wrong", "reason": str(exc), "kind": kind}
                continue
            except (Exception, RecursionError) as exc:
                results[name] = {"status": "fails", "reason": _describe(exc), "kind": kind}
                if "--traceback" in sys.argv:
                    traceback.print_exc()
                continue
            n, made = await _calibrate(inst.once, settings.batch_ns)
            calls_made[name] += made
            live[name] = (inst, n)
            results[name] = {"status": "ok", "kind": kind, "batch": n, "samples_ns": []}

        rng = random.Random(f"{settings.seed}:{scenario.key}")
        for r in range(settings.rounds):
            order = list(live)
            rng.shuffle(order)
            for name in order:
                if name not in live:
                    continue
                progress.show(f"{scenario.key}: round {r + 1}/{settings.rounds}  {name}")
                inst, n = live[name]
                try:
                    took = await _batch(inst.once, n)
                except (Exception, RecursionError) as exc:
                    results[name] = {
                        "status": "fails",
                        "reason": _describe(exc),
                        "kind": results[name]["kind"],
                    }
                    del live[name]
                    continue
                calls_made[name] += n + 1
                results[name]["samples_ns"].append(took / n)

        # The counts again, after every timed call: still exactly once per call.
        for name, (inst, _) in live.items():
            if scenario.graph is not None and name not in scenario.references:
                try:
                    check(inst, scenario.graph, calls_made[name], [expected(scenario.graph)])
                except VerificationError as exc:
                    results[name] = {"status": "wrong", "reason": str(exc), "kind": "?"}
        progress.show(f"{scenario.key}: closing")

    base = results.get(BASELINE, {}).get("samples_ns")
    for res in results.values():
        samples = res.get("samples_ns")
        if not samples:
            continue
        res["us"] = statistics.median(samples) / 1000
        res["min_us"] = min(samples) / 1000
        if base and len(base) == len(samples):
            ratios = [s / b for s, b in zip(samples, base, strict=True)]
            res["ratio"] = statistics.median(ratios)
            res["ratios"] = ratios
        res["samples_us"] = [s / 1000 for s in samples]
        del res["samples_ns"]
    return {
        "key": scenario.key,
        "title": scenario.title,
        "nodes": scenario.nodes,
        "results": results,
    }
