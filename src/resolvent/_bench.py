"""``resolvent bench``: what resolution costs for one of the user's own functions.

The function is compiled as ``resolvent graph`` compiles it; the container is opened once
(APP and SESSION values start in a first call, outside the timing, and are reported on
their own); then calls run in timed chunks, each call timed on its own, alternating two
variants of the same plan:

- *plain*: the plan the container runs (``container.run`` for the generated mode, a call
  scope for the others), untouched. Its mean is the per-call time and calls per second.
- *probed*: a copy of the plan whose resolvers and body are timed (`resolvent._probe`).
  The intervals give the user's own time; what is left of the probed call, once the
  probes' own cost (measured in this process by `calibrate`) is taken off, is resolvent's.

The harness's own cost (a loop awaiting an empty coroutine function, timed the same way)
is measured and subtracted from both. Per-call time = user + resolvent + remainder, where
the remainder is what the two variants disagree on: it shows how well the probes' cost
was accounted for.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import math
import statistics
import time
import tracemalloc
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TextIO

import anyio

from ._annotations import NO_DEFAULT, type_name
from ._container import Container
from ._errors import ResolventError
from ._floor import floor, hops
from ._kinds import Kind
from ._plan import Plan
from ._probe import BODY, SETUP, TEARDOWN, Calibration, Probe, calibrate, probed
from ._questions import QUESTION_KINDS
from ._scopes import Scope

__all__ = ("MODES", "BenchError", "bench", "render")

MODES = ("generated", "interpreter", "concurrent")
_CHUNK_NS = 20_000_000  # one timed chunk of calls lasts about this long
_MAX_CALLS = 10_000_000


class BenchError(Exception):
    """The function cannot be benchmarked as asked; the text says why and what to do."""


# --- before anything runs: what the bench cannot supply -----------------------------------


def _declared_question(fn: Callable[..., Any]) -> str | None:
    """The question type *fn* says it returns (``-> Elicit[Confirm]``), if any."""
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:
        return None
    stack = [hint]
    while stack:
        tp = stack.pop()
        origin = typing.get_origin(tp) or tp
        if isinstance(origin, type) and any(issubclass(origin, q) for q in QUESTION_KINDS):
            return type_name(origin)
        stack.extend(typing.get_args(tp))
    return None


def refusals(plan: Plan, target: str, args: Mapping[str, Any]) -> list[str]:
    """Why *plan* cannot run with *args* and no framework around it (empty: it can)."""
    short = target
    problems: list[str] = []
    consumers: list[tuple[str, Any]] = [(s.name, i) for s in plan.steps for i in s.inputs]
    consumers += [(plan.name, i) for i in plan.inputs]
    for consumer, item in consumers:
        if item.source != "value":
            continue
        name = type_name(item.value_type)
        if consumer == plan.name:
            fix = (
                f"bench a function that gets what it needs from {name} through a resolver, "
                "and override that resolver"
            )
        else:
            fix = (
                f"replace the resolver with one that does not take {name}: "
                f"--override {consumer.rpartition('.')[0] or 'module'}:"
                f"{consumer.rpartition('.')[2]}=yourmodule:stand_in"
            )
        problems.append(
            f"parameter {item.name!r} of {consumer} needs the framework value {name}, which "
            f"only the framework supplies (an MCP request, a web request); resolvent bench "
            f"calls {short} without one.\n  fix: {fix}"
        )
    for step in plan.steps:
        asks = _declared_question(step.fn) if step.may_ask else None
        if asks is not None:
            module, _, name = step.name.rpartition(".")
            problems.append(
                f"{step.name} asks a question ({asks}), and resolvent bench has nobody to "
                "answer it: a person's answer is not resolution time.\n"
                f"  fix: --override {module}:{name}=yourmodule:answer, a resolver that returns "
                "the answer (for an ElicitationResult consumer, Accepted(data=...))"
            )
    wanted = {i.arg for _, i in consumers if i.source == "arg" and i.default is NO_DEFAULT}
    try:
        own: Mapping[str, inspect.Parameter] = inspect.signature(plan.fn).parameters
    except (TypeError, ValueError):
        own = {}
    for name in plan.arguments:
        param = own.get(name)
        if param is None or param.default is inspect.Parameter.empty:
            wanted.add(name)
    for name in sorted(wanted - set(args)):
        problems.append(
            f"{short} needs the call argument {name!r}.\n  fix: --arg {name}=VALUE "
            "(a Python literal, else the text as a string)"
        )
    known = set(plan.arguments) | {i.arg for _, i in consumers if i.source == "arg"}
    for name in sorted(set(args) - known):
        takes = ", ".join(sorted(known)) or "none"
        problems.append(
            f"{short} takes no call argument {name!r} (its call arguments: {takes}).\n"
            f"  fix: drop --arg {name}=..."
        )
    return problems


# --- compile time and plan memory ----------------------------------------------------------


def compile_figures(container: Container, fn: Callable[..., Any]) -> tuple[Plan, dict[str, Any]]:
    """Compile *fn* (timed: the first compile, then the median of fresh ones), and the
    memory a compiled plan keeps (traced, as ``benchmarks/`` measures it)."""
    container._invalidate()  # pyright: ignore[reportPrivateUsage] - a cached plan is no compile
    start = time.perf_counter_ns()
    container.compile(fn)
    first = time.perf_counter_ns() - start
    again: list[int] = []
    for _ in range(5):
        container._invalidate()  # pyright: ignore[reportPrivateUsage]
        start = time.perf_counter_ns()
        container.compile(fn)
        again.append(time.perf_counter_ns() - start)
    container._invalidate()  # pyright: ignore[reportPrivateUsage]
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        plan = container.compile(fn)
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return plan, {
        "compile_first_us": first / 1000,
        "compile_us": statistics.median(again) / 1000,
        "plan_bytes": after - before,
    }


# --- running --------------------------------------------------------------------------


class _Runner:
    """How one mode starts a call, plain or probed."""

    def __init__(
        self, container: Container, session: Any, mode: str, plan: Plan, args: dict[str, Any]
    ) -> None:
        self.container, self.session, self.mode, self.args = container, session, mode, args
        self.plan = plan

    def once(self, plan: Plan, plain: bool) -> Callable[[], Awaitable[Any]]:
        container, args = self.container, self.args
        if self.mode == "generated" and self.session is None:
            if plain:  # exactly what an application writes: run(fn, name=value, ...)
                return _keyword_call(container.run, plan.fn, args)
            plan.heat()  # the steady state: the generated code, not the first calls
            start = container._start(plan)  # pyright: ignore[reportPrivateUsage]
            app = container._app  # pyright: ignore[reportPrivateUsage]
            return functools.partial(start, args, {}, None, app, None, plan.fn)
        opener = self.session if self.session is not None else container
        options: dict[str, Any] = {}
        if self.mode == "interpreter":
            options["rounds"] = True
        elif self.mode == "concurrent":
            options["concurrent"] = True
        else:
            options["concurrent"] = False

        async def once() -> Any:
            async with opener.call(**options) as call:
                return await call.run(plan, **args)

        return once


def _keyword_call(
    run: Callable[..., Any], fn: Callable[..., Any], args: Mapping[str, Any]
) -> Callable[[], Any]:
    """``lambda: run(fn, a=A, b=B)``, with the arguments spelt out: a ``**`` spread
    costs about as much as the rest of a one-resolver call."""
    ns: dict[str, Any] = {"run": run, "fn": fn}
    named: list[str] = []
    for n, (name, value) in enumerate(args.items()):
        ns[f"A{n}"] = value
        named.append(f"{name}=A{n}")
    exec(f"def once():\n    return run(fn, {', '.join(named)})\n", ns)
    once: Callable[[], Any] = ns["once"]
    return once


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


class Progress:
    """A line on *out* at most every *every* seconds (``\\r``-updated on a terminal)."""

    def __init__(self, out: TextIO | None, every: float = 1.0) -> None:
        self.out = out
        self.every = every
        self.last = time.monotonic()
        self.tty = bool(out is not None and out.isatty())
        self.shown = False

    def show(self, text: str, force: bool = False) -> None:
        if self.out is None:
            return
        now = time.monotonic()
        if not force and now - self.last < self.every:
            return
        self.last = now
        if self.tty:
            print(f"\r\033[K{text}", end="", file=self.out, flush=True)
            self.shown = True
        else:
            print(text, file=self.out, flush=True)

    def done(self) -> None:
        if self.tty and self.shown and self.out is not None:
            print("\r\033[K", end="", file=self.out, flush=True)
            self.shown = False


async def _first_call(once: Callable[[], Awaitable[Any]], target: str) -> None:
    try:
        await once()
    except ResolventError as exc:
        if "nobody to ask" in str(exc):
            raise BenchError(
                f"the first call of {target} asked a question, and resolvent bench has nobody "
                f"to answer it:\n{exc}\n  fix: --override the resolver that asks with one "
                "that returns the answer"
            ) from None
        raise BenchError(f"the first call of {target} failed:\n{exc}") from exc
    except Exception as exc:
        raise BenchError(
            f"the first call of {target} failed: {type(exc).__name__}: {exc}\n"
            "  fix: check the --arg values; the bench runs the function for real"
        ) from exc


async def _measure(
    runner: _Runner,
    probe: Probe,
    iplan: Plan,
    low: Callable[[], Awaitable[Any]],
    calibration: Calibration,
    calls: int | None,
    seconds: float,
    progress: Progress,
) -> dict[str, Any]:
    """Time one mode in chunks; each chunk times, back to back: the empty loop, the
    plain calls, the floor's calls and the probed calls."""
    mode = runner.mode
    plain = runner.once(runner.plan, True)
    probed_once = runner.once(iplan, False)
    args = runner.args
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
        progress.show(f"resolvent bench: {mode}: {min(share, 1):.0%} ({made:,} calls)")
        if share >= 1 or made >= _MAX_CALLS:
            break
        await anyio.lowlevel.checkpoint()
    return _figures(mode, iplan, folded, plain_spans, chunks, plain_ns, made)


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
    (`resolvent._floor`), your code the rest. The probes split your code into its parts;
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
    else:
        overhead = median("overhead")
        user = total - overhead
    remainder = user - probed
    n = folded.calls
    resolvers: list[dict[str, Any]] = []
    for step in plan.steps:
        i = step.index
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
        "harness_us": harness / 1000,
        "body": {
            "name": plan.name,
            "mean_us": _mean(folded.body) / 1000,
            "p99_us": _p(folded.body, 0.99) / 1000,
        },
        "resolvers": resolvers,
    }


def _start_figures(
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


async def bench(
    container: Container,
    fn: Callable[..., Any],
    target: str,
    *,
    args: dict[str, Any],
    overrides: list[tuple[Any, Any]] = [],  # noqa: B006 - never mutated
    modes: tuple[str, ...] = ("generated",),
    calls: int | None = None,
    seconds: float = 2.0,
    progress: TextIO | None = None,
    calibration: Calibration | None = None,
) -> dict[str, Any]:
    """Benchmark *fn*'s resolution and body in *container*; return every figure.

    *calls* (per mode) or else *seconds* (per mode) bound the run; *calibration* is the
    cost of timing (measured now if not given).

    Raises:
        BenchError: the function needs what the bench cannot supply, or its first call
            failed; the text says which parameter and how to fix it.
        InvalidSignature: the graph does not compile.
    """
    shown = Progress(progress)
    report: dict[str, Any] = {"target": target, "args": {k: repr(v) for k, v in args.items()}}
    with contextlib.ExitStack() as stack:
        for original, replacement in overrides:
            stack.enter_context(container.override(original, replacement))
        plan, compiled = compile_figures(container, fn)
        report.update(compiled)
        problems = refusals(plan, target, args)
        if problems:
            raise BenchError("\n".join(problems))
        report["plan"] = {
            "name": plan.name,
            "steps": len(plan.steps),
            "scopes": {s.name: sum(1 for t in plan.steps if t.scope is s) for s in Scope},
        }
        shown.show("resolvent bench: measuring the cost of timing")
        if calibration is None:
            calibration = await calibrate()
        report["timing"] = {
            "clock_reading_ns": calibration.reading,
            "inside_ns": calibration.inside,
        }
        probe = Probe()
        iplan = probed(plan, probe)
        saved = container.concurrent, container.call_timeout
        # Each mode says how calls run; a call_timeout would turn every mode into the
        # interpreter's (it needs a call scope), so it is off while measuring.
        container.concurrent, container.call_timeout = False, None
        report["call_timeout_ignored"] = saved[1]
        try:
            async with container, contextlib.AsyncExitStack() as scopes:
                session = None
                if Scope.SESSION in plan.scopes:
                    session = await scopes.enter_async_context(container.session())
                runner = _Runner(container, session, "generated", plan, args)
                start = time.perf_counter_ns()
                await _first_call(runner.once(iplan, False), target)
                report["first_call_us"] = (time.perf_counter_ns() - start) / 1000
                report["started"] = _start_figures(plan, probe.log, calibration)
                probe.log.clear()
                shared = dict(container._app.cache if container._app else {})  # pyright: ignore[reportPrivateUsage]
                if session is not None:
                    shared.update(session.live.cache)
                low = floor(plan, args, shared)
                measured: list[dict[str, Any]] = []
                report["modes"] = measured
                for mode in modes:
                    runner = _Runner(container, session, mode, plan, args)
                    if mode != "generated":
                        await _first_call(runner.once(iplan, False), target)
                    probe.log.clear()
                    measured.append(
                        await _measure(
                            runner, probe, iplan, low, calibration, calls, seconds, shown
                        )
                    )
                probe.log.clear()
            report["closed"] = _start_figures(plan, probe.log, calibration)
        finally:
            container.concurrent, container.call_timeout = saved
            shown.done()
    return report


# --- the report -----------------------------------------------------------------------


def _us(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:,.1f} ms"
    if value >= 100:
        return f"{value:,.0f} µs"
    return f"{value:.2f} µs"


def render(report: dict[str, Any]) -> str:
    """The report as text."""
    lines: list[str] = []
    plan = report["plan"]
    scopes = ", ".join(f"{k} {v}" for k, v in plan["scopes"].items() if v)
    lines.append(f"resolvent bench {report['target']}")
    lines.append(
        f"plan: {plan['steps']} step(s){f' ({scopes})' if scopes else ''}; compile "
        f"{_us(report['compile_first_us'])} first, {_us(report['compile_us'])} again; "
        f"plan memory {report['plan_bytes'] / 1024:.1f} KB"
    )
    started: list[dict[str, Any]] = report.get("started") or []
    if started:
        parts = ", ".join(f"{s['name']} ({s['scope']}) {_us(s['us'])}" for s in started)
        lines.append(f"started once, outside the timing: {parts}")
        lines.append(f"  first call, starting them: {_us(report['first_call_us'])}")
    modes = report["modes"]
    for m in modes:
        lines.append("")
        lines.append(
            f"{m['mode']}: {m['calls']:,} calls, {m['calls_per_second']:,.0f} calls/s; per call "
            f"{_us(m['per_call_us'])} (p50 {_us(m['p50_us'])}, p99 {_us(m['p99_us'])})"
        )
        parts = m["user_parts_us"]
        lines.append(f"  your code          {_us(m['user_us']):>10}  {m['user_pct']:5.1f}%")
        for key, label in (
            ("resolvers", "resolvers"),
            ("setup", "resource set-up"),
            ("teardown", "resource teardown"),
            ("body", "the function's body"),
        ):
            if parts[key] or key == "body":
                lines.append(f"    {label:<20} {_us(parts[key]):>10}")
        missed = "what the probes missed"
        if m["thread_hops"]:
            missed = f"mostly {m['thread_hops']} worker-thread hop(s) a call; " + missed
        lines.append(f"    {'unexplained':<20} {_us(m['remainder_us']):>10}  ({missed})")
        lines.append(
            f"  resolvent          {_us(m['resolvent_us']):>10}  {m['resolvent_pct']:5.1f}%"
        )
        rows = m["resolvers"]
        if rows:
            width = max(len(r["name"]) for r in rows)
            lines.append(f"  {'resolver':<{width}}  scope    runs/call       mean        p99  kind")
            for r in rows:
                extra = ""
                if "setup_us" in r and r["runs_per_call"]:
                    extra = f" (set-up {_us(r['setup_us'])}, teardown {_us(r['teardown_us'])})"
                lines.append(
                    f"  {r['name']:<{width}}  {r['scope']:<7} {r['runs_per_call']:>10.2f} "
                    f"{_us(r['mean_us']):>10} {_us(r['p99_us']):>10}  {r['kind']}{extra}"
                )
        body = m["body"]
        lines.append(f"  body: {_us(body['mean_us'])} mean, {_us(body['p99_us'])} p99")
    if len(modes) > 1:
        lines.append("")
        header = f"  {'':<20}" + "".join(f"{m['mode']:>14}" for m in modes)
        lines.append("side by side:")
        lines.append(header)
        for key, label in (
            ("calls_per_second", "calls/s"),
            ("per_call_us", "per call"),
            ("user_us", "your code"),
            ("resolvent_us", "resolvent"),
        ):
            cells = "".join(
                f"{(f'{m[key]:,.0f}' if key == 'calls_per_second' else _us(m[key])):>14}"
                for m in modes
            )
            lines.append(f"  {label:<20}{cells}")
    timing = report["timing"]
    lines.append("")
    inside = timing["inside_ns"]
    lines.append(
        "resolvent's share is a call less the same calls written by hand (no container), "
        "run in the same chunks. The cost of timing was measured in this process and taken "
        f"off: the loop driving the calls ({report['modes'][0]['harness_us'] * 1000:.0f} ns "
        "a call, measured empty) off every figure, and what a probe's interval holds besides "
        f"your code ({inside['ASYNC']:.0f} ns for an async function) off each part."
    )
    if report.get("call_timeout_ignored") is not None:
        lines.append(
            f"The container's call_timeout ({report['call_timeout_ignored']} s) was off while "
            "measuring: with it, every mode would run in a call scope."
        )
    closed: list[dict[str, Any]] = report.get("closed") or []
    if closed:
        parts = ", ".join(f"{s['name']} {_us(s['us'])}" for s in closed)
        lines.append(f"closed after the timing: {parts}")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str) -> None:
    """Draw per-resolver time per call (and the body and resolvent's share) to *path*.

    Raises:
        BenchError: matplotlib is not installed.
    """
    try:
        import importlib

        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        # Untyped here: matplotlib is an optional extra, and its stubs are partial.
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        raise BenchError(
            "--plot needs matplotlib, which is not installed.\n"
            '  fix: pip install "resolvent[plot]" (or pip install matplotlib)'
        ) from None
    modes = report["modes"]
    labels = [r["name"].rpartition(".")[2] for r in modes[0]["resolvers"]]
    labels += ["body", "resolvent"]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(labels) + 1.5))
    height = 0.8 / len(modes)
    for k, m in enumerate(modes):
        values = [r["us_per_call"] for r in m["resolvers"]]
        values += [m["body"]["mean_us"], m["resolvent_us"]]
        ys = [i + k * height for i in range(len(labels))]
        ax.barh(ys, values, height=height, label=m["mode"])
    ax.set_yticks([i + height * (len(modes) - 1) / 2 for i in range(len(labels))])
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel("µs per call")
    ax.set_title(f"resolvent bench {report['target']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
