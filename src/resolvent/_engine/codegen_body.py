"""The body of one generated function (see `resolvent._engine.codegen`) and the expressions
it is made of: the `Writer` that collects its lines, which step each line runs and the
objects the code names; each step's statements in order (a scope's cached value, a resource
set up, a resolver called, a question asked), with an input's value and a resolver's call
arguments by position wherever the function's code takes them so (`positional`); runs of
worker-thread steps as one block each (`blocks_of`, `emit_blocks`), the handler's call and,
for ``direct``, the teardown lines of `resolvent._runtime.teardown` around them.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._reading.annotations import NO_DEFAULT
from .._reading.kinds import Kind
from .._runtime.resources import plain_cell
from .._runtime.sharing import emit_flight, emit_record
from .._runtime.teardown import emit_close, emit_open
from .._vocabulary.scopes import CALL_SLOT, SLOTS, Scope

if TYPE_CHECKING:
    from .._graph.plan import Input, Step

__all__ = (
    "Body",
    "Writer",
    "block_params",
    "blocks_of",
    "cache_name",
    "emit_blocks",
    "fusable",
    "positional",
)


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


def blocks_of(steps: tuple[Step, ...]) -> list[list[Step]]:
    """Group the steps: runs of worker-thread steps share one block (one hop)."""
    blocks: list[list[Step]] = []
    for step in steps:
        joins = (
            step.threaded
            and step.scope is Scope.CALL
            and blocks
            and blocks[-1][-1].threaded
            and blocks[-1][-1].scope is Scope.CALL
            and not blocks[-1][-1].may_ask
        )
        if joins:
            blocks[-1].append(step)
        else:
            blocks.append([step])
    return blocks


def fusable(blocks: list[list[Step]], inputs: tuple[Input, ...], at: Mapping[int, Step]) -> bool:
    """Whether a threaded handler can be called in the hop of the plan's last block: that
    block runs in a thread, asks nothing, and the handler's inputs need no conversion."""
    if not blocks:
        return False
    last = blocks[-1]
    return (
        last[0].threaded
        and last[0].scope is Scope.CALL
        and not last[-1].may_ask
        and all(
            i.source != "step" or (i.outcome is None and not at[i.step].may_ask) for i in inputs
        )
    )


def block_params(block: list[Step], inputs: tuple[Input, ...], fuse: bool) -> str:
    """A worker-thread block's parameters: the values it reads from steps outside it,
    the call's arguments and values, and (fused) the handler."""
    inside = {s.index for s in block}
    consumers = [i for s in block for i in s.inputs] + (list(inputs) if fuse else [])
    needed = sorted({i.step for i in consumers if i.source == "step" and i.step not in inside})
    return ", ".join([f"v{i}" for i in needed] + ["args", "values"] + (["body"] if fuse else []))


def emit_blocks(
    w: Writer,
    blocks: list[list[Step]],
    inputs: tuple[Input, ...],
    at: Mapping[int, Step],
    name: str,
    fused: bool,
) -> None:
    """Worker-thread blocks (see `blocks_of`) as plain functions that run in one hop,
    ``block{number}``; with *fused*, the last one calls the handler too (see `fusable`)."""
    block_defs: list[tuple[str, int]] = []
    for number, block in enumerate(blocks):
        first = block[0]
        if not (first.threaded and first.scope is Scope.CALL):
            continue
        fuse = fused and number == len(blocks) - 1
        params = block_params(block, inputs, fuse)
        block_defs.append((f"def block{number}({params}):", -1))
        for step in block:
            fn = w.const("f", step.fn)
            text = f"    v{step.index} = {fn}({call_args(w, step, at)})"
            block_defs.append((text, step.index))
        outs = ", ".join(f"v{s.index}" for s in block)
        if fuse:
            # The handler's own exception is handed back, not raised here, so it is
            # not mistaken for a resolver's (and gets no note).
            block_defs += [
                ("    try:", -1),
                (f"        ret = body({root_spread(w, inputs, at, name)})", -1),
                ("    except BaseException as error:", -1),
                (f"        return ({outs}, None, error)", -1),
                (f"    return ({outs}, ret, None)", -1),
            ]
        else:
            block_defs.append((f"    return ({outs},)", -1))
    for line, index in block_defs:  # map a failure inside a block to its own step
        w.emit(line, index)


class Body:
    """Emits one generated function's body (see `generate`): *local*, when given, maps
    each of the call's arguments to the local variable that holds it."""

    def __init__(
        self,
        w: Writer,
        name: str,
        root_is_async: bool,
        steps: tuple[Step, ...],
        inputs: tuple[Input, ...],
        arguments: tuple[str, ...],
        variant: str,
        blocks: list[list[Step]],
        fused: bool,
        root_threaded: bool,
    ) -> None:
        self.w, self.name, self.root_is_async = w, name, root_is_async
        self.steps, self.inputs, self.arguments = steps, inputs, arguments
        self.at = {s.index: s for s in steps}  # by index (a slot: see `Step`)
        self.variant, self.blocks, self.fused = variant, blocks, fused
        self.root_threaded = root_threaded
        self.direct = self.kept = False
        self.holds = False  # whether a resource may go to a holder task (`hold`)
        self.order: tuple[str, ...] = ()

    def emit(self, header: str | None, local: Mapping[str, str] | None) -> None:
        w, steps, inputs, variant = self.w, self.steps, self.inputs, self.variant
        direct, kept, fused, root_name = self.direct, self.kept, self.fused, self.name
        used = {s.scope for s in steps}
        call_resources = any(s.kind.is_resource and s.scope is Scope.CALL for s in steps)
        entry = variant == "entry" or variant == "entry_any"
        body: list[tuple[str, int]] = []
        for number, block in enumerate(self.blocks):
            first = block[0]
            if first.threaded and first.scope is Scope.CALL:
                fuse = fused and number == len(self.blocks) - 1
                params = block_params(block, inputs, fuse)
                outs = ", ".join(f"v{s.index}" for s in block)
                if fuse:
                    outs += ", ret, raised"
                # A cancelled call (its deadline, a failed branch) does not wait for the
                # thread: it is abandoned and its late result dropped (see docs/concepts.md).
                # What the block sets in context variables is kept, as if run here.
                body.append(
                    (f"({outs},) = await in_thread(block{number}, {params})", block[-1].index)
                )
                last = block[-1]
                if last.may_ask:
                    body.append(
                        (
                            f"if v{last.index}.__class__ in QT: "
                            f"v{last.index} = await ask(call, {w.const('S', last)}, v{last.index})",
                            last.index,
                        )
                    )
                continue
            step = first
            fn = w.const("f", step.fn)
            s = w.const("S", step)
            given = call_args(w, step, self.at, local)
            v = f"v{step.index}"
            if step.scope is not Scope.CALL:  # its scope's live values (see `cache_name`)
                cache, live = cache_name(step.scope), f"scopes[{SLOTS[step.scope]}]"
                k = w.const("K", step.key)
                make = f"partial({fn}, {given})" if given else fn
                body.append((f"{v} = {cache}.get({k}, MISSING)", step.index))
                body.append(
                    (f"if {v} is MISSING: {v} = await {live}.create({s}, {k}, {make})", step.index)
                )
                continue
            if step.kind.is_resource:
                factory = f"{'await ' if step.awaits else ''}{fn}({given})"
                r = f"r{step.index}"
                if direct:  # set up here; torn down by `close_now` below
                    pad = ""
                    held = (
                        step.kind is Kind.ASYNC_GENERATOR or step.kind is Kind.ASYNC_CONTEXT_MANAGER
                    )
                    if held and not (plain := plain_cell(step))[0]:
                        # In this task once known to hold no cancel scope open, else in a
                        # task of its own (see `resolvent._runtime.resources.hold`). A cell only
                        # ever turns true: one already true needs no test in the code.
                        self.holds = True
                        k = w.const("P", plain)
                        body.append((f"if not {k}[0]:", step.index))
                        # The list `hold` adds a holder cancelled while opening to, made
                        # only for a call that holds one (see `_runtime.teardown` below).
                        body.append(("    if exits.__class__ is tuple: exits = []", step.index))
                        body.append(
                            (f"    {r} = await hold(exits, {s}, {factory}, {k})", step.index)
                        )
                        body.append((f"    {v} = {r}.value", step.index))
                        body.append(("else:", step.index))
                        pad = "    "
                    body.append((f"{pad}{r} = {factory}", step.index))
                    if step.kind is Kind.ASYNC_GENERATOR:
                        body.append((f"{pad}try: {v} = await {r}.__anext__()", step.index))
                        body.append((f"{pad}except StopAsyncIteration:", step.index))
                        body.append((f"{pad}    {v} = await open_({s}, {r})", step.index))
                    elif step.kind is Kind.ASYNC_CONTEXT_MANAGER:  # what `open_` would do
                        body.append((f"{pad}{v} = await {r}.__aenter__()", step.index))
                    else:
                        body.append((f"{pad}{v} = await open_({s}, {r})", step.index))
                    if kept:  # open: the caller's exits close it, later
                        body.append((f"exits.append(({s}, {r}))", step.index))
                    # Not listed in `exits` (only a holder cancelled while opening is, by
                    # `hold`): the teardown below knows them, and a failure lists those open.
                elif step.kind is Kind.ASYNC_GENERATOR or step.kind is Kind.ASYNC_CONTEXT_MANAGER:
                    # In the call scope's exits, what `enter` does for one known to hold
                    # no cancel scope open, in a call with no holder tasks (no deadline,
                    # no branches), in line; anything else is `enter`'s.
                    k = w.const("P", plain_cell(step))
                    body.append((f"if {k}[0] and exits.group is None:", step.index))
                    body.append((f"    {r} = {factory}", step.index))
                    if step.kind is Kind.ASYNC_GENERATOR:
                        body.append((f"    try: {v} = await {r}.__anext__()", step.index))
                        body.append(("    except StopAsyncIteration:", step.index))
                        body.append((f"        {v} = await open_({s}, {r})", step.index))
                    else:
                        body.append((f"    {v} = await {r}.__aenter__()", step.index))
                    body.append((f"    if exits.closed: await too_late({s}, {r})", step.index))
                    body.append((f"    exits.append(({s}, {r}))", step.index))
                    body.append(("else:", step.index))
                    body.append((f"    {v} = await enter(exits, {s}, {factory})", step.index))
                else:
                    body.append((f"{v} = await enter(exits, {s}, {factory})", step.index))
            elif step.kind is Kind.ASYNC:
                body.append((f"{v} = await {fn}({given})", step.index))
            else:
                body.append((f"{v} = {fn}({given})", step.index))
            if step.may_ask:
                body.append(
                    (f"if {v}.__class__ in QT: {v} = await ask(call, {s}, {v})", step.index)
                )

        call_steps = [s for s in steps if s.scope is Scope.CALL]
        if header is not None:
            w.emit(header)
        if not entry:  # an entry has no call scope: its `call` is a global None
            w.emit(f"    call = scopes[{CALL_SLOT}]")
        if variant == "resolve":  # always in a call scope: it takes the call's flight
            emit_flight(w.emit)
        # `direct` wraps the resolution and the call in the teardown of its resources;
        # `kept` leaves them open in the exits it is given as *call*.
        pad = "    " * (1 + (direct and not kept))
        if direct:  # the teardown's own lines (see `resolvent._runtime.teardown.emit_open`)
            emit_open(w.emit, kept=kept, holds=self.holds)
        w.emit(f"{pad}try:")
        opened = len(w.lines)
        for scope in sorted(used - {Scope.CALL}, reverse=True):
            w.emit(f"{pad}    {cache_name(scope)} = scopes[{SLOTS[scope]}].cache")
        if call_resources and not direct:
            w.emit("        exits = call.exits")
        for text, index in body:
            w.emit(f"{pad}    {text}", index)
        if call_steps and not direct and not entry:
            # A call scope reused for another plan must not run these again: their keys
            # (one tuple, shared by every call) and their values, which the call makes
            # into its cache only if another resolution needs them.
            keys = w.const("K", tuple(s.key for s in call_steps))
            made = ", ".join(f"v{s.index}" for s in call_steps) + (
                "," if len(call_steps) == 1 else ""
            )
            emit_record(w.emit, keys, f"({made})")
        if variant == "resolve":
            if not call_steps:  # nothing recorded, which ends the flight: it ends here
                w.emit("        land(call, PLAN[0])")
            results = ", ".join(f"{i.name!r}: {expr(w, i, self.at, root_name)}" for i in inputs)
            w.emit(f"        return {{{results}}}")
        if len(w.lines) == opened:  # no steps (a tool that only takes Context): empty try
            w.emit(f"{pad}    pass")
        w.emit(f"{pad}except BaseException as exc:")
        w.emit(f"{pad}    error = fail(exc, PLAN[0], LINES, args, values, call, locals())")
        w.emit(f"{pad}    if error is exc: raise")
        w.emit(f"{pad}    raise error from exc")
        if fused:
            w.emit(f"{pad[4:]}    if raised is not None: raise raised")
        elif variant != "resolve":
            spread = root_spread(w, inputs, self.at, root_name)
            if self.root_threaded:
                # A sync handler's thread is abandoned on cancellation like a resolver's
                # (see docs/concepts.md): the caller's own bound holds.
                call = f"await to_thread(partial(body, {spread}))"
                w.emit(f"{pad}ret = {call}")
            else:
                awaits = "await " if self.root_is_async else ""
                test, named = root_call(
                    w, inputs, self.at, root_name, self.arguments, self.order, local, entry
                )
                if local is not None and not direct:
                    w.emit(f"{pad}return {awaits}body({named})")
                    return
                if local is not None:
                    w.emit(f"{pad}ret = {awaits}body({named})")
                else:
                    w.emit(f"{pad}if {test}: ret = {awaits}body({named})")
                    w.emit(f"{pad}else: ret = {awaits}body({spread})")
        if direct and not kept:
            self._teardown()
        if variant != "resolve":
            w.emit("    return ret")

    def _teardown(self) -> None:
        resources = [t for t in self.steps if t.scope is Scope.CALL and t.kind.is_resource]
        emit_close(self.w.emit, self.w.const, resources, holds=self.holds)


def cache_name(scope: Scope) -> str:
    """The local that holds *scope*'s live values in generated code (``app_cache``)."""
    return f"{scope.name.lower()}_cache"
