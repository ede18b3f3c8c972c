"""Timing probes for ``resolvent bench``: a copy of a plan whose resolvers and body are
wrapped so each run reports how long the user's own code took.

Nothing here touches the plans a container runs. `probed` builds a second plan from a
compiled one, with the same steps, keys and scopes but each step's function replaced by
a wrapper of the same kind (an async function stays async, a generator a generator, a
context manager a context manager), so the generated code and the interpreter run it
exactly as they run the original. Values cached in APP and SESSION scopes are shared with
the original plan (same keys).

Every wrapper appends ``(code, start, end)`` in nanoseconds to one list: *code* is
``3 * step + phase`` (phase `SETUP`: the call, a generator's set-up, or a context
manager's factory, once per run; `TEARDOWN`; `ENTER`: a context manager's ``__enter__``),
and `BODY` for the function itself. The cost of the wrappers themselves is measured by
`calibrate`, so the report can subtract it.
"""

from __future__ import annotations

import copy as _copy
import gc
import inspect
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from .._engine.codegen import generate
from .._graph.plan import Plan, Step, replaced
from .._reading.annotations import NO_DEFAULT
from .._reading.kinds import Kind
from .._vocabulary.scopes import Scope

__all__ = ("BODY", "Calibration", "Probe", "calibrate", "probed")

BODY = -1
SETUP = 0  # a call of the function; a generator's set-up; a context manager's factory
TEARDOWN = 1
ENTER = 2  # a context manager's __enter__ / __aenter__

Log = list[tuple[int, int, int]]


class Probe:
    """Where the wrappers of one probed plan write: one list, emptied after each call."""

    def __init__(self) -> None:
        self.log: Log = []


# --- wrappers -------------------------------------------------------------------------
#
# Each wrapper is generated with the wrapped function's own keyword parameters, so the
# call inside the timed interval has the shape the plan's code uses (``fn(a=a, b=b)``,
# not ``fn(**kwargs)``); what remains inside the interval besides the user's code is
# measured by `calibrate` and taken off.

_TEMPLATES = {
    "call": (
        "{d}def timed({params}):\n"
        "    start = clock()\n"
        "    try:\n"
        "        return {a}fn({call})\n"
        "    finally:\n"
        "        add((code, start, clock()))\n"
    ),
    "make": (
        "{d}def timed({params}):\n"
        "    start = clock()\n"
        "    try:\n"
        "        made = {a}fn({call})\n"
        "    finally:\n"
        "        add((code, start, clock()))\n"
        "    return proxy(made, code, add)\n"
    ),
}


def _generate(
    template: str,
    fn: Callable[..., Any],
    code: int,
    log: Log,
    names: list[tuple[str, Any]],
    is_async: bool,
    proxy: Any = None,
) -> Callable[..., Any]:
    ns: dict[str, Any] = {
        "clock": time.perf_counter_ns,
        "add": log.append,
        "fn": fn,
        "code": code,
        "proxy": proxy,
    }
    params: list[str] = []
    for n, (name, default) in enumerate(names):
        if default is NO_DEFAULT:
            params.append(name)
        else:
            ns[f"D{n}"] = default
            params.append(f"{name}=D{n}")
    source = _TEMPLATES[template].format(
        d="async " if is_async else "",
        a="await " if is_async else "",
        params="*, " + ", ".join(params) if params else "",
        call=", ".join(f"{name}={name}" for name, _ in names),
    )
    exec(compile(source, f"<resolvent bench probe #{code}>", "exec", dont_inherit=True), ns)
    timed: Callable[..., Any] = ns["timed"]
    return timed


class _AsyncGen:
    """An async generator's protocol, timed: the first ``__anext__`` is the set-up, what
    follows (``__anext__``, ``athrow``) the teardown."""

    __slots__ = ("add", "code", "gen", "started")

    def __init__(self, gen: Any, code: int, add: Callable[[Any], None]) -> None:
        self.gen, self.code, self.add, self.started = gen, code, add, False

    def __aiter__(self) -> _AsyncGen:
        return self

    async def __anext__(self) -> Any:
        phase = TEARDOWN if self.started else ENTER
        self.started = True
        start = time.perf_counter_ns()
        try:
            return await self.gen.__anext__()
        finally:
            self.add((self.code + phase, start, time.perf_counter_ns()))

    async def athrow(self, *args: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return await self.gen.athrow(*args)
        finally:
            self.add((self.code + TEARDOWN, start, time.perf_counter_ns()))

    async def aclose(self) -> Any:
        return await self.gen.aclose()


class _Gen:
    """A generator's protocol, timed like `_AsyncGen`."""

    __slots__ = ("add", "code", "gen", "started")

    def __init__(self, gen: Any, code: int, add: Callable[[Any], None]) -> None:
        self.gen, self.code, self.add, self.started = gen, code, add, False

    def __iter__(self) -> _Gen:
        return self

    def __next__(self) -> Any:
        phase = TEARDOWN if self.started else ENTER
        self.started = True
        start = time.perf_counter_ns()
        try:
            return next(self.gen)
        finally:
            self.add((self.code + phase, start, time.perf_counter_ns()))

    def throw(self, *args: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return self.gen.throw(*args)
        finally:
            self.add((self.code + TEARDOWN, start, time.perf_counter_ns()))

    def close(self) -> Any:
        return self.gen.close()


class _AsyncCM:
    __slots__ = ("add", "cm", "code")

    def __init__(self, cm: Any, code: int, add: Callable[[Any], None]) -> None:
        self.cm, self.code, self.add = cm, code, add

    async def __aenter__(self) -> Any:
        start = time.perf_counter_ns()
        try:
            return await self.cm.__aenter__()
        finally:
            self.add((self.code + ENTER, start, time.perf_counter_ns()))

    async def __aexit__(self, *exc: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return await self.cm.__aexit__(*exc)
        finally:
            self.add((self.code + TEARDOWN, start, time.perf_counter_ns()))


class _CM:
    __slots__ = ("add", "cm", "code")

    def __init__(self, cm: Any, code: int, add: Callable[[Any], None]) -> None:
        self.cm, self.code, self.add = cm, code, add

    def __enter__(self) -> Any:
        start = time.perf_counter_ns()
        try:
            return self.cm.__enter__()
        finally:
            self.add((self.code + ENTER, start, time.perf_counter_ns()))

    def __exit__(self, *exc: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return self.cm.__exit__(*exc)
        finally:
            self.add((self.code + TEARDOWN, start, time.perf_counter_ns()))


_PROXIES: dict[Kind, Any] = {
    Kind.ASYNC_GENERATOR: _AsyncGen,
    Kind.GENERATOR: _Gen,
    Kind.ASYNC_CONTEXT_MANAGER: _AsyncCM,
    Kind.CONTEXT_MANAGER: _CM,
}


def wrap_step(step: Step, log: Log, position: int = 0) -> Callable[..., Any]:
    """*step*'s function, timed, of the same kind and with the same parameters; its times
    are logged for the step at *position* of its plan."""
    code = 3 * position
    names = [(item.name, NO_DEFAULT) for item in step.inputs]
    if step.kind.is_resource:
        return _generate("make", step.fn, code, log, names, step.awaits, _PROXIES[step.kind])
    return _generate("call", step.fn, code, log, names, step.kind is Kind.ASYNC)


def wrap_body(plan: Plan, log: Log) -> Callable[..., Any]:
    """The plan's function, timed, keeping its name (errors name it)."""
    try:
        own: Mapping[str, inspect.Parameter] = inspect.signature(plan.fn).parameters
    except (TypeError, ValueError):
        own = {}
    names: list[tuple[str, Any]] = []
    for name in plan.arguments:
        param = own.get(name)
        default = NO_DEFAULT if param is None else param.default
        names.append((name, default))
    names += [(item.name, NO_DEFAULT) for item in plan.inputs]
    timed = _generate("call", plan.fn, BODY, log, names, plan.fn_is_async)
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        value = getattr(plan.fn, attribute, None)
        if value is not None:
            setattr(timed, attribute, value)
    return timed


def _with_fn(step: Step, fn: Callable[..., Any]) -> Step:
    """A copy of *step* (every field, whatever fields a Step has) running *fn*."""
    copy = _copy.copy(step)
    object.__setattr__(copy, "fn", fn)  # a frozen record; this copy is not shared yet
    return copy


def probed(plan: Plan, probe: Probe) -> Plan:
    """A copy of *plan* whose steps and body write their times to *probe*."""
    steps = tuple(_with_fn(s, wrap_step(s, probe.log, i)) for i, s in enumerate(plan.steps))
    ref: list[Any] = [None]
    run_fn = generate(
        ref,
        plan.name,
        plan.fn_is_async,
        steps,
        plan.inputs,
        plan.arguments,
        "run",
        root_threaded=plan.fn_threaded,
    )[1]
    assert run_fn is not None
    copy = replaced(plan, fn=wrap_body(plan, probe.log), steps=steps, run_fn=run_fn)
    ref[0] = copy
    return copy


# --- calibration ----------------------------------------------------------------------


class Calibration:
    """What timing costs in this process, in nanoseconds, per step kind (`Kind` name).

    Attributes:
        inside: what one recorded interval holds beyond the user's code (reading the
            clock, the ``try``); taken off each interval.
        outside: what wrapping adds to one life of a step (a call, or a resource's
            set-up and teardown) outside its intervals (the wrapper's frames, the record);
            taken off resolvent's share.
        reading: two clock readings back to back (for the report).
    """

    def __init__(self, inside: dict[str, float], outside: dict[str, float], reading: float):
        self.inside = inside
        self.outside = outside
        self.reading = reading


async def _noop_async(x: Any) -> None:
    return None


def _noop_sync(x: Any) -> None:
    return None


async def _noop_agen(x: Any) -> Any:
    yield None


def _noop_gen(x: Any) -> Any:
    yield None


class _NoopACM:
    def __init__(self, x: Any) -> None:
        pass

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: Any) -> None:
        return None


class _NoopCM:
    def __init__(self, x: Any) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


async def _lives(kind: Kind, fn: Callable[..., Any], n: int) -> float:
    """Nanoseconds per life of *fn*, driven as the executor drives a step of *kind*,
    less the loop's own cost."""
    clock = time.perf_counter_ns
    start = clock()
    for _ in range(n):
        pass
    empty = clock() - start
    start = clock()
    if kind is Kind.ASYNC:
        for _ in range(n):
            await fn(x=1)
    elif kind is Kind.SYNC:
        for _ in range(n):
            fn(x=1)
    elif kind is Kind.ASYNC_GENERATOR:
        for _ in range(n):
            gen = fn(x=1)
            await gen.__anext__()
            try:  # noqa: SIM105 - as the executor does, at no cost; suppress() costs
                await gen.__anext__()
            except StopAsyncIteration:
                pass
    elif kind is Kind.GENERATOR:
        for _ in range(n):
            gen = fn(x=1)
            next(gen)
            try:  # noqa: SIM105 - as the executor does, at no cost; suppress() costs
                next(gen)
            except StopIteration:
                pass
    elif kind is Kind.ASYNC_CONTEXT_MANAGER:
        for _ in range(n):
            cm = fn(x=1)
            await cm.__aenter__()
            await cm.__aexit__(None, None, None)
    else:
        for _ in range(n):
            cm = fn(x=1)
            cm.__enter__()
            cm.__exit__(None, None, None)
    return (clock() - start - empty) / n


INTERVALS = {
    Kind.ASYNC: 1,
    Kind.SYNC: 1,
    Kind.ASYNC_GENERATOR: 3,
    Kind.GENERATOR: 3,
    Kind.ASYNC_CONTEXT_MANAGER: 3,
    Kind.CONTEXT_MANAGER: 3,
}
"""How many intervals one life of a step of each kind records."""

_NOOPS: dict[Kind, Callable[..., Any]] = {
    Kind.ASYNC: _noop_async,
    Kind.SYNC: _noop_sync,
    Kind.ASYNC_GENERATOR: _noop_agen,
    Kind.GENERATOR: _noop_gen,
    Kind.ASYNC_CONTEXT_MANAGER: _NoopACM,
    Kind.CONTEXT_MANAGER: _NoopCM,
}


def _reading(samples: int = 20_000) -> float:
    clock = time.perf_counter_ns
    spans: list[int] = []
    for _ in range(samples):
        start = clock()
        spans.append(clock() - start)
    return float(statistics.median(spans))


async def calibrate(n: int = 1_000, rounds: int = 9) -> Calibration:
    """Measure each wrapper kind against the bare function in *rounds* interleaved rounds
    of *n* lives each, with the garbage collector off. A busy machine only ever adds
    time, so each figure is the least of its rounds."""
    from .._graph.plan import Input

    inside: dict[str, float] = {}
    outside: dict[str, float] = {}
    log: Log = []
    x = (Input("x", "arg", arg="x"),)
    enabled = gc.isenabled()
    gc.disable()
    try:
        for kind, noop in _NOOPS.items():
            step = Step(0, noop, "noop", "noop", Scope.CALL, kind, True, False, x, "")
            timed = wrap_step(step, log)
            bare: list[float] = []
            recorded: list[float] = []
            outs: list[float] = []
            for _ in range(rounds):
                bare.append(await _lives(kind, noop, n))
                log.clear()
                wrapped = await _lives(kind, timed, n)
                recorded.append(sum(end - start for _, start, end in log) / n)
                log.clear()
                outs.append(wrapped - recorded[-1])
            inside[kind.name] = max(0.0, (min(recorded) - min(bare)) / INTERVALS[kind])
            outside[kind.name] = max(0.0, min(outs))
            await anyio.lowlevel.checkpoint()
    finally:
        if enabled:
            gc.enable()
    return Calibration(inside, outside, _reading())
