"""The expressions generated code is made of (see `resolvent._engine.codegen`): the
`Writer` that collects a function's lines, which step each line runs and the objects the
code names, and the text of an input's value, a resolver's call arguments and the handler's
call, by position wherever the function's code takes them so (`positional`).
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._reading.annotations import NO_DEFAULT

if TYPE_CHECKING:
    from .._graph.plan import Input, Step

__all__ = ("Writer", "arguments", "call_args", "expr", "positional", "root_call", "root_spread")


class Writer:
    """One generated function's source as it is written: its lines, the step each line
    runs (for mapping a failure back), and the namespace of the objects it names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.line_steps: dict[int, int] = {}
        self.namespace: dict[str, Any] = {}
        self._names: dict[int, str] = {}

    def const(self, prefix: str, value: Any) -> str:
        name = self._names.get(id(value))
        if name is None or self.namespace.get(name) is not value:
            name = f"{prefix}{len(self.namespace)}"
            self.namespace[name] = value
            self._names[id(value)] = name
        return name

    def emit(self, text: str, step: int = -1) -> None:
        self.lines.append(text)
        if step >= 0:
            self.line_steps[len(self.lines)] = step


def expr(
    w: Writer,
    item: Input,
    at: Mapping[int, Step],
    consumer: str,
    local: Mapping[str, str] | None = None,
) -> str:
    """The expression for one input; with *local*, the call's arguments are exactly
    those it names (each in a local variable), as in an entry's exact call."""
    if item.source == "arg":
        if local is not None:
            if item.arg in local:
                return local[item.arg]
            if item.default is not NO_DEFAULT:  # not given: its default
                return w.const("D", item.default)
        if item.default is NO_DEFAULT:
            return f"args[{item.arg!r}]"
        return f"args.get({item.arg!r}, {w.const('D', item.default)})"
    if item.source == "value":
        return f"values[{w.const('T', item.value_type)}]"
    var = f"v{item.step}"
    if item.outcome is not None:
        return f"{w.const('C', item.outcome.convert)}(as_outcome({var}))"
    if at[item.step].may_ask:
        return (
            f"({var}.unwrap({item.name!r}, {consumer!r}) if {var}.__class__ is Answered else {var})"
        )
    return var


def positional(fn: Any) -> tuple[str, ...]:
    """The names of *fn*'s parameters a call may pass by position, in order, as its code
    reads them: for a plain function or a method bound to one, whatever signature it
    shows (a ``functools.wraps`` wrapper's code takes ``*args``: none). Empty for
    anything else, which is called by keyword."""
    offset = 0
    if isinstance(fn, types.MethodType):
        fn, offset = fn.__func__, 1
    if not isinstance(fn, types.FunctionType):
        return ()
    code = fn.__code__
    return code.co_varnames[offset : code.co_argcount]


def arguments(named: list[tuple[str, str]], order: tuple[str, ...]) -> str:
    """A call's arguments: by position while *order* (`positional`) has the next one,
    the rest by name. A positional call costs less than a keyword call (CPython calls
    a function given keywords through a slower path)."""
    given = dict(named)
    out: list[str] = []
    for name in order:
        if name not in given:
            break
        out.append(given.pop(name))
    out += [f"{name}={expr}" for name, expr in named if name in given]
    return ", ".join(out)


def call_args(
    w: Writer,
    step: Step,
    at: Mapping[int, Step],
    local: Mapping[str, str] | None = None,
) -> str:
    named = [(i.name, expr(w, i, at, step.name, local)) for i in step.inputs]
    return arguments(named, positional(step.fn))


def root_spread(w: Writer, inputs: tuple[Input, ...], at: Mapping[int, Step], root: str) -> str:
    """The handler's arguments: the call's own, then the injected ones."""
    root_kwargs = ", ".join(f"{i.name}={expr(w, i, at, root)}" for i in inputs)
    return f"**args, {root_kwargs}" if root_kwargs else "**args"


def root_call(
    w: Writer,
    inputs: tuple[Input, ...],
    at: Mapping[int, Step],
    root: str,
    names: tuple[str, ...],
    order: tuple[str, ...],
    local: Mapping[str, str] | None = None,
    own_body: bool = False,
) -> tuple[str, str]:
    """The test, and the handler's arguments, for passing the call's arguments one by
    one when they are exactly its own (*names*): a ``**`` spread costs more than the
    rest of a one-resolver call. *order* is `positional` of the handler the plan was
    compiled for (empty: by name), which the test checks *body* is (unless *own_body*:
    an entry's *body* is that handler). Anything else is
    spread as given (`root_spread`), so a missing or unexpected argument fails in the
    handler's call as it would without a container. With *local* (an entry's exact
    call, checked on the way in) there is no test."""
    if local is not None:
        named = [(n, local[n]) for n in names]
    else:
        named = [(n, f"args[{n!r}]") for n in names]
    named += [(i.name, expr(w, i, at, root, local)) for i in inputs]
    call = arguments(named, order)
    tests = ["body is BODY"] if order and not own_body else []
    tests += [f"len(args) == {len(names)}", *(f"{n!r} in args" for n in names)]
    return " and ".join(tests), call
