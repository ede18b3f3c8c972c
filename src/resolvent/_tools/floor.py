"""The floor for ``resolvent bench``: a plan's calls written out as a person would write
them by hand, with no container.

`floor` generates one coroutine function that calls the plan's resolvers in plan order
with direct keyword arguments, sets resources up and tears them down in reverse order,
reads APP and SESSION values from a dict (as a hand-written server keeps its singletons
in globals), runs consecutive worker-thread resolvers in one hop, and calls the function.
An outcome a consumer asks for (``ElicitationResult``) is made once and reused: wrapping a
value in one is resolvent's doing, which hand-written code would not do.
No scope, no cache, no error mapping: what it costs is the user's own code plus the
least glue any code needs. ``benchmarks/`` compares resolvent with the same kind of
hand-written code (its ``hand-written`` implementation), so the difference between a
plan's call and its floor is resolvent's overhead measured the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import anyio.to_thread

from .._engine.codegen_body import blocks_of
from .._graph.plan import Input, Plan, Step
from .._reading.annotations import NO_DEFAULT
from .._reading.kinds import Kind
from .._runtime.teardown import PLAIN_NAMES, plain_close
from .._vocabulary.questions import as_outcome
from .._vocabulary.scopes import Scope

__all__ = ("floor", "hops")

MISSING: Any = object()


def _local(name: str) -> str:
    return f"a_{name}"


def _expr(item: Input, ns: dict[str, Any], args: Mapping[str, Any]) -> str:
    if item.source == "arg":
        if item.arg in args or item.default is NO_DEFAULT:
            return _local(item.arg)
        name = f"D{len(ns)}"
        ns[name] = item.default
        return name
    if item.source == "value":  # refused before a floor is made
        raise ValueError(f"no framework value for {item.name!r}")
    if item.outcome is not None:
        # Wrapping a value as an outcome (`ElicitationResult`) is resolvent's work, which
        # hand-written code would not do: made in the first call, then reused.
        name = f"C{len(ns)}"
        ns[name] = [MISSING, item.outcome.convert]
        return f"({name}[0] if {name}[0] is not MISSING else once({name}, v{item.step}))"
    return f"v{item.step}"


def _once(cell: list[Any], value: Any) -> Any:
    cell[0] = cell[1](as_outcome(value))
    return cell[0]


def _kwargs(inputs: tuple[Input, ...], ns: dict[str, Any], args: Mapping[str, Any]) -> str:
    return ", ".join(f"{item.name}={_expr(item, ns, args)}" for item in inputs)


def floor(plan: Plan, args: Mapping[str, Any], shared: Mapping[Hashable, Any]) -> Callable[[], Any]:
    """*plan*'s hand-written equivalent: ``await floor()`` calls what a call of the plan
    with *args* calls. *shared* holds the APP and SESSION values by step key (made)."""
    ns: dict[str, Any] = {
        "MISSING": MISSING,
        "SHARED": shared,
        "once": _once,
        "partial": functools.partial,
        "to_thread": anyio.to_thread.run_sync,
        **PLAIN_NAMES,  # what `plain_close`'s lines call
    }
    lines: list[str] = []
    body: list[str] = []
    finals: list[str] = []
    for number, block in enumerate(blocks_of(plan.steps)):
        first = block[0]
        if first.threaded and first.scope is Scope.CALL and not first.kind.is_resource:
            inside = {s.index for s in block}
            needed = sorted(
                {i.step for s in block for i in s.inputs if i.source == "step"} - inside
            )
            given = [_local(name) for name in args]
            params = ", ".join([*given, *(f"v{i}" for i in needed)])
            lines.append(f"def block{number}({params}):")
            for step in block:
                ns[f"f{step.index}"] = step.fn
                lines.append(f"    v{step.index} = f{step.index}({_kwargs(step.inputs, ns, args)})")
            outs = ", ".join(f"v{s.index}" for s in block)
            lines.append(f"    return ({outs},)")
            body.append(f"({outs},) = await to_thread(block{number}, {params})")
            continue
        for step in block:
            body += _step(step, ns, args, finals)
    named = [f"{name}={_local(name)}" for name in plan.arguments if name in args]
    named += [f"{item.name}={_expr(item, ns, args)}" for item in plan.inputs]
    ns["body"] = plan.fn
    if plan.fn_threaded:
        body.append(f"ret = await to_thread(partial(body, {', '.join(named)}))")
    else:
        body.append(f"ret = {'await ' if plan.fn_is_async else ''}body({', '.join(named)})")
    body += reversed(finals)
    body.append("return ret")
    # As a person writes it: the call's arguments in local variables, no dict.
    ns["ARGS"] = dict(args)
    lines.append("async def floor():")
    lines += [f"    {_local(name)} = ARGS[{name!r}]" for name in args]
    lines += [f"    {line}" for line in body]
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<resolvent bench floor {plan.name}>", "exec"), ns)
    function: Callable[[], Any] = ns["floor"]
    return function


def hops(plan: Plan) -> int:
    """Worker-thread hops in one call of *plan*'s floor (and of the plan itself)."""
    count = int(plan.fn_threaded)
    for block in blocks_of(plan.steps):
        first = block[0]
        if first.scope is not Scope.CALL:
            continue
        if first.threaded and not first.kind.is_resource:
            count += 1
        elif first.kind.is_resource and not first.kind.is_async and not first.inline:
            count += 2  # set-up and teardown
    return count


def _step(step: Step, ns: dict[str, Any], args: Mapping[str, Any], finals: list[str]) -> list[str]:
    i = step.index
    v = f"v{i}"
    if step.scope is not Scope.CALL:
        ns[f"K{i}"] = step.key
        return [f"{v} = SHARED.get(K{i}, MISSING)"]
    ns[f"f{i}"] = step.fn
    call = f"f{i}({_kwargs(step.inputs, ns, args)})"
    kind = step.kind
    if kind is Kind.ASYNC:
        return [f"{v} = await {call}"]
    if kind is Kind.SYNC:
        return [f"{v} = {call}"]  # a threaded one is in a block
    r = f"r{i}"
    finals.append(plain_close(step, r))  # as `resolvent._runtime.teardown` closes it, by hand
    made = f"{r} = {'await ' if step.awaits else ''}{call}"
    if kind is Kind.ASYNC_GENERATOR:
        return [made, f"{v} = await {r}.__anext__()"]
    if kind is Kind.ASYNC_CONTEXT_MANAGER:
        return [made, f"{v} = await {r}.__aenter__()"]
    if kind is Kind.GENERATOR:
        if step.inline:
            return [made, f"{v} = next({r})"]
        return [made, f"{v} = await to_thread(next, {r})"]
    if step.inline:
        return [made, f"{v} = {r}.__enter__()"]
    return [made, f"{v} = await to_thread({r}.__enter__)"]
