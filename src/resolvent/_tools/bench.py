"""``resolvent bench``: what resolution costs for one of the user's own functions.

Owns the run: refusals before anything runs, compile figures, opening the container and
starting each mode's calls; the timing is `_tools.bench_timing`, the text `_tools.bench_report`.

The function is compiled as ``resolvent graph`` compiles it; the container is opened once
(APP and SESSION values start in a first call, outside the timing, and are reported on
their own); then each mode's calls are timed (`resolvent._tools.bench_timing`).
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

from .._container.container import Container
from .._container.launch import Launcher
from .._graph.plan import Plan
from .._reading.annotations import NO_DEFAULT, type_name
from .._vocabulary.errors import ResolventError
from .._vocabulary.questions import QUESTION_KINDS
from .._vocabulary.scopes import Scope
from .bench_timing import measure, start_figures
from .floor import floor
from .probe import Calibration, Probe, calibrate, probed

__all__ = ("MODES", "BenchError", "bench")

MODES = ("generated", "interpreter", "concurrent")


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
    container._plans.invalidate()  # pyright: ignore[reportPrivateUsage] - a cached plan is no compile
    start = time.perf_counter_ns()
    container.compile(fn)
    first = time.perf_counter_ns() - start
    again: list[int] = []
    for _ in range(5):
        container._plans.invalidate()  # pyright: ignore[reportPrivateUsage]
        start = time.perf_counter_ns()
        container.compile(fn)
        again.append(time.perf_counter_ns() - start)
    container._plans.invalidate()  # pyright: ignore[reportPrivateUsage]
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

    def __init__(self, container: Container, session: Any, mode: str, args: dict[str, Any]) -> None:
        self.container, self.session, self.mode, self.args = container, session, mode, args

    def once(self, plan: Plan, plain: bool) -> Callable[[], Awaitable[Any]]:
        container, args = self.container, self.args
        if self.mode == "generated" and self.session is None:
            if plain:  # exactly what an application writes: run(fn, name=value, ...)
                return _keyword_call(container.run, plan.fn, args)
            plan.heat()  # the steady state: the generated code, not the first calls
            start = Launcher(container, plan, key=plan.fn, values=False, scoped=True).prepare()
            assert start is not None  # a scoped launcher always starts
            return functools.partial(start, args)  # it calls plan.fn itself
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


class Progress:
    """How far a run is, on *out*. On a terminal: one live line, a bar redrawn at most every
    *every* seconds and cleared at the end. Anywhere else (a CI log, a file): one line per
    mode, when it is done, and nothing else."""

    WIDTH = 24  # the bar's cells

    def __init__(self, out: TextIO | None, every: float = 0.2) -> None:
        self.out = out
        self.every = every
        self.last = -math.inf
        self.tty = bool(out is not None and out.isatty())
        self.shown = False

    def note(self, text: str) -> None:
        """A passing state (``measuring the cost of timing``): on a terminal only."""
        if self.tty:
            self._draw(f"resolvent bench: {text}")

    def mode(self, mode: str, share: float, calls: int, finished: bool) -> None:
        """The progress of *mode*: *share* of it done, *calls* made."""
        if self.out is None:
            return
        if not self.tty:
            if finished:
                print(f"resolvent bench: {mode}: {calls:,} calls", file=self.out, flush=True)
            return
        now = time.monotonic()
        if not finished and now - self.last < self.every:
            return
        self.last = now
        full = round(share * self.WIDTH)
        bar = "#" * full + "-" * (self.WIDTH - full)
        self._draw(f"resolvent bench: {mode} [{bar}] {share:4.0%} ({calls:,} calls)")

    def _draw(self, text: str) -> None:
        assert self.out is not None
        print(f"\r\033[K{text}", end="", file=self.out, flush=True)
        self.shown = True

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
        shown.note("measuring the cost of timing")
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
                runner = _Runner(container, session, "generated", args)
                start = time.perf_counter_ns()
                await _first_call(runner.once(iplan, False), target)
                report["first_call_us"] = (time.perf_counter_ns() - start) / 1000
                report["started"] = start_figures(plan, probe.log, calibration)
                probe.log.clear()
                shared = dict(container._app.cache if container._app else {})  # pyright: ignore[reportPrivateUsage]
                if session is not None:
                    shared.update(session.live.cache)
                low = floor(plan, args, shared)
                measured: list[dict[str, Any]] = []
                report["modes"] = measured
                for mode in modes:
                    runner = _Runner(container, session, mode, args)
                    if mode != "generated":
                        await _first_call(runner.once(iplan, False), target)
                    probe.log.clear()
                    measured.append(
                        await measure(
                            mode,
                            runner.once(plan, True),
                            runner.once(iplan, False),
                            args,
                            probe,
                            iplan,
                            low,
                            calibration,
                            calls,
                            seconds,
                            shown.mode,
                        )
                    )
                probe.log.clear()
            report["closed"] = start_figures(plan, probe.log, calibration)
        finally:
            container.concurrent, container.call_timeout = saved
            shown.done()
    return report
