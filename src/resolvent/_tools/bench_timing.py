"""Timing one mode of ``resolvent bench``: calls in chunks, the probes' intervals folded
into figures. Times the calls it is given; never opens a container nor compiles.

Each chunk times, back to back, alternating variants of the same plan:

- *plain*: the plan the container runs (``container.run`` for the generated mode, a call
  scope for the others), untouched. Its mean is the per-call time and calls per second.
- *probed*: a copy of the plan whose resolvers and body are timed (`resolvent._tools.probe`).
  The intervals give the user's own time; what is left of the probed call, once the
  probes' own cost (measured in this process by `calibrate`) is taken off, is resolvent's.

The harness's own cost (a loop awaiting an empty coroutine function, timed the same way)
is measured and subtracted from both. Per-call time = user + resolvent + remainder, where
the remainder is what the two variants disagree on: it shows how well the probes' cost
was accounted for.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from .._graph.plan import Plan
from .._reading.kinds import Kind
from .._vocabulary.scopes import Scope
from .floor import hops
from .probe import BODY, SETUP, TEARDOWN, Calibration, Probe

__all__ = ("measure", "start_figures")

_CHUNK_NS = 20_000_000  # one timed chunk of calls lasts about this long
_MAX_CALLS = 10_000_000


async def _noop(args: Mapping[str, Any]) -> None:
    return None


async def _timed(once: Callable[[], Awaitable[Any]], n: int, spans: list[int]) -> None:
    clock = time.perf_counter_ns
    for _ in range(n):
        start = clock()
        await once()
        spans.append(clock() - start)


class _Folded:
    """What the probes said, summed over calls."""

    def __init__(self, plan: Plan, calibration: Calibration) -> None:
        self.plan = plan
        n = len(plan.steps)
        self.calls = 0
        self.runs = [0] * n
        self.ns = [0.0] * n  # everything a step took, all phases
        self.setup = [0.0] * n
        self.teardown = [0.0] * n
        self.per_call: list[list[float]] = [[] for _ in range(n)]
        self.body: list[float] = []
        self.user: list[float] = []
        self.parts = {"resolvers": 0.0, "setup": 0.0, "teardown": 0.0, "body": 0.0}
        self.inside = [calibration.inside[s.kind.name] for s in plan.steps]
        body_kind = (Kind.ASYNC if plan.fn_is_async else Kind.SYNC).name
        self.body_inside = calibration.inside[body_kind]

    def add(self, log: list[tuple[int, int, int]]) -> None:
        """Fold one call's intervals in."""
        steps = self.plan.steps
        this: dict[int, float] = {}
        spans: list[tuple[float, float]] = []
        body = 0.0
        parts = self.parts
        for code, start, end in log:
            if code == BODY:
                took = max(0.0, end - start - self.body_inside)
                body += took
                spans.append((start, start + took))
                continue
            index, phase = divmod(code, 3)
            took = max(0.0, end - start - self.inside[index])
            spans.append((start, start + took))
            this[index] = this.get(index, 0.0) + took
            self.ns[index] += took
            step = steps[index]
            if phase == SETUP:
                self.runs[index] += 1
            if not step.kind.is_resource:
                parts["resolvers"] += took
            elif phase == TEARDOWN:
                self.teardown[index] += took
                parts["teardown"] += took
            else:  # the factory, or entering
                self.setup[index] += took
                parts["setup"] += took
        parts["body"] += body
        for index, took in this.items():
            self.per_call[index].append(took)
        self.body.append(body)
        self.user.append(_union(spans))
        self.calls += 1


def _union(spans: list[tuple[float, float]]) -> float:
    """The time at least one of the user's functions was running (they overlap only
    when branches run concurrently)."""
    total = 0.0
    start = end = -1.0
    for a, b in sorted(spans):
        if a > end:
            total += end - start
            start, end = a, b
        elif b > end:
            end = b
    return total + end - start


def _p(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


async def measure(
    mode: str,
    plain: Callable[[], Awaitable[Any]],
    probed_once: Callable[[], Awaitable[Any]],
    args: Mapping[str, Any],
    probe: Probe,
    iplan: Plan,
    low: Callable[[], Awaitable[Any]],
    calibration: Calibration,
    calls: int | None,
    seconds: float,
    show: Callable[[str, float, int, bool], None],
) -> dict[str, Any]:
    """Time one mode in chunks; each chunk times, back to back: the empty loop, the
    *plain* calls, the floor's calls (*low*) and the probed calls (*probed_once*, of
    *iplan*, whose intervals *probe* logs). *show* is told the progress after each chunk:
    the mode, the share done, the calls made, and whether the mode is done."""
    noop: Callable[[], Awaitable[Any]] = lambda: _noop(args)  # noqa: E731
    floored = low
    log = probe.log
    folded = _Folded(iplan, calibration)
    for _ in range(3 if calls is None or calls >= 30 else 1):  # warm up every variant
        await plain()
        await floored()
        await probed_once()
        log.clear()
    # The chunk size: about _CHUNK_NS of plain calls.
    spans: list[int] = []
    n = 1
    while True:
        spans.clear()
        started = time.perf_counter_ns()
        await _timed(plain, n, spans)
        took = time.perf_counter_ns() - started
        if took >= _CHUNK_NS // 4 or n >= 100_000:
            break
        n *= 4
    chunk = max(1, min(100_000, int(n * _CHUNK_NS / max(took, 1))))
    # The probed calls' intervals are kept until the chunk ends: bound them.
    chunk = min(chunk, max(1, 300_000 // (2 + 3 * len(iplan.steps))))
    if calls is not None:
        chunk = max(1, min(chunk, calls // 10 or 1))
    plain_spans: list[int] = []
    chunks: list[dict[str, float]] = []
    marks: list[int] = []
    begun = time.monotonic()
    plain_ns = 0
    made = 0
    gc.collect()
    while True:
        left = (calls - made) if calls is not None else chunk
        k = max(1, min(chunk, left))
        empty: list[int] = []
        these: list[int] = []
        floors: list[int] = []
        first = folded.calls
        parts = dict(folded.parts)
        gc.disable()
        try:
            await _timed(noop, max(3, k // 4), empty)
            start = time.perf_counter_ns()
            await _timed(plain, k, these)
            plain_ns += time.perf_counter_ns() - start
            await _timed(floored, k, floors)
            # Back to back, as the plain calls ran: the intervals are folded afterwards.
            for _ in range(k):
                await probed_once()
                marks.append(len(log))
        finally:
            gc.enable()
        done = 0
        for mark in marks:
            folded.add(log[done:mark])
            done = mark
        log.clear()
        marks.clear()
        plain_spans += these
        harness = statistics.median(empty)
        chunks.append(
            {
                "harness": harness,
                "total": _mean(these) - harness,
                "overhead": _mean(these) - _mean(floors),
                "probed": _mean(folded.user[first:]),
                **{p: (folded.parts[p] - parts[p]) / k for p in parts},
            }
        )
        made += k
        elapsed = time.monotonic() - begun
        share = made / calls if calls is not None else elapsed / seconds
        finished = share >= 1 or made >= _MAX_CALLS
        show(mode, min(share, 1.0), made, finished)
        if finished:
            break
        await anyio.lowlevel.checkpoint()
    return _figures(mode, iplan, folded, plain_spans, chunks, plain_ns, made)


def _noise(values: list[float]) -> float | None:
    """How far the median of *values* (one figure per chunk) may be from the true one: the
    half-width of its 95% confidence interval (the median's standard error is about 1.25
    times the mean's). None with fewer than two chunks: nothing to tell noise by."""
    if len(values) < 2:
        return None
    return 1.96 * 1.2533 * statistics.stdev(values) / math.sqrt(len(values))


def _mean(values: list[int] | list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _figures(
    mode: str,
    plan: Plan,
    folded: _Folded,
    plain_spans: list[int],
    chunks: list[dict[str, float]],
    plain_ns: int,
    calls: int,
) -> dict[str, Any]:
    """The figures of one mode: each the median over chunks of its per-call mean (a chunk
    slowed by the rest of the machine does not move it).

    Per call = your code + resolvent: resolvent's share is the plain call less the floor
    (`resolvent._tools.floor`), your code the rest. The probes split your code into its parts;
    what they do not account for is the unexplained remainder."""

    def median(key: str) -> float:
        return statistics.median(c[key] for c in chunks)

    harness = median("harness")
    total = median("total")
    # The parts from one chunk (the one with the median probed total), so they add up.
    middle = sorted(chunks, key=lambda c: c["probed"])[len(chunks) // 2]
    parts = {p: middle[p] / 1000 for p in folded.parts}
    probed = middle["probed"]
    if mode == "concurrent":
        # Written by hand, overlapping branches would need a task group: the floor runs
        # them one after another. Your code is the time any of it was running.
        user = median("probed")
        overhead = total - user
        overheads = [c["total"] - c["probed"] for c in chunks]
    else:
        overhead = median("overhead")
        user = total - overhead
        overheads = [c["overhead"] for c in chunks]
    noise = _noise(overheads)
    remainder = user - probed
    n = folded.calls
    resolvers: list[dict[str, Any]] = []
    for i, step in enumerate(plan.steps):  # the probes log steps by position
        runs = folded.runs[i]
        entry: dict[str, Any] = {
            "name": step.name,
            "scope": step.scope.name,
            "kind": step.kind.value + ("" if step.kind.is_async or step.inline else " (thread)"),
            "runs_per_call": runs / n,
            "mean_us": folded.ns[i] / runs / 1000 if runs else 0.0,
            "p99_us": _p(folded.per_call[i], 0.99) / 1000,
            "us_per_call": folded.ns[i] / n / 1000,
        }
        if step.kind.is_resource:
            entry["setup_us"] = folded.setup[i] / runs / 1000 if runs else 0.0
            entry["teardown_us"] = folded.teardown[i] / runs / 1000 if runs else 0.0
        resolvers.append(entry)

    def pct(x: float) -> float:
        return 100 * x / total if total > 0 else 0.0

    ordered = sorted(float(s) for s in plain_spans)
    return {
        "mode": mode,
        "calls": calls,
        "chunks": len(chunks),
        "calls_per_second": len(plain_spans) / (plain_ns / 1e9) if plain_ns else 0.0,
        "per_call_us": total / 1000,
        "p50_us": max(0.0, _p(ordered, 0.5) - harness) / 1000,
        "p99_us": max(0.0, _p(ordered, 0.99) - harness) / 1000,
        "user_us": user / 1000,
        "user_pct": pct(user),
        "user_parts_us": parts,
        "probed_us": probed / 1000,
        "remainder_us": remainder / 1000,
        "thread_hops": hops(plan),
        "remainder_pct": pct(remainder),
        "resolvent_us": overhead / 1000,
        "resolvent_pct": pct(overhead),
        "resolvent_noise_us": None if noise is None else noise / 1000,
        "harness_us": harness / 1000,
        "body": {
            "name": plan.name,
            "mean_us": _mean(folded.body) / 1000,
            "p99_us": _p(folded.body, 0.99) / 1000,
        },
        "resolvers": resolvers,
    }


def start_figures(
    plan: Plan, log: list[tuple[int, int, int]], calibration: Calibration
) -> list[Any]:
    """Set-up (or teardown) time of the APP and SESSION values, from the probes."""
    out: dict[int, float] = {}
    for code, start, end in log:
        if code == BODY:
            continue
        index, _ = divmod(code, 3)
        if plan.steps[index].scope is not Scope.CALL:
            inside = calibration.inside[plan.steps[index].kind.name]
            out[index] = out.get(index, 0.0) + max(0.0, end - start - inside)
    return [
        {"name": plan.steps[i].name, "scope": plan.steps[i].scope.name, "us": ns / 1000}
        for i, ns in sorted(out.items())
    ]
