"""The code generator: turns a plan into straight-line Python (``run``, ``direct``,
``resolve``) whose failures map back to their steps by line. It never interprets a plan.
"""

from __future__ import annotations

import functools
import itertools
import types
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .._graph.plan import keep_shared
from .._reading.annotations import NO_DEFAULT
from .._reading.kinds import Kind
from .._runtime.failures import fail
from .._runtime.resources import enter, hold, open_resource, plain_cell
from .._runtime.sharing import MISSING
from .._runtime.teardown import GENERATED_NAMES, emit_close, emit_open
from .._vocabulary.questions import QUESTION_KINDS, Answered, as_outcome
from .._vocabulary.scopes import CALL_SLOT, SLOTS, Scope

if TYPE_CHECKING:
    from .._graph.plan import Input, Step

__all__ = ("generate",)

_counter = itertools.count()
_NO_VALUES: Mapping[Any, Any] = MappingProxyType({})  # an entry's (see `generate`)


class _Writer:
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


def _expr(
    w: _Writer,
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


def _arguments(named: list[tuple[str, str]], order: tuple[str, ...]) -> str:
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


def _call_args(
    w: _Writer,
    step: Step,
    at: Mapping[int, Step],
    local: Mapping[str, str] | None = None,
) -> str:
    named = [(i.name, _expr(w, i, at, step.name, local)) for i in step.inputs]
    return _arguments(named, positional(step.fn))


def _blocks(steps: tuple[Step, ...]) -> list[list[Step]]:
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


def _fusable(blocks: list[list[Step]], inputs: tuple[Input, ...], at: Mapping[int, Step]) -> bool:
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


def _root_spread(w: _Writer, inputs: tuple[Input, ...], at: Mapping[int, Step], root: str) -> str:
    """The handler's arguments: the call's own, then the injected ones."""
    root_kwargs = ", ".join(f"{i.name}={_expr(w, i, at, root)}" for i in inputs)
    return f"**args, {root_kwargs}" if root_kwargs else "**args"


def _root_call(
    w: _Writer,
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
    spread as given (`_root_spread`), so a missing or unexpected argument fails in the
    handler's call as it would without a container. With *local* (an entry's exact
    call, checked on the way in) there is no test."""
    if local is not None:
        named = [(n, local[n]) for n in names]
    else:
        named = [(n, f"args[{n!r}]") for n in names]
    named += [(i.name, _expr(w, i, at, root, local)) for i in inputs]
    call = _arguments(named, order)
    tests = ["body is BODY"] if order and not own_body else []
    tests += [f"len(args) == {len(names)}", *(f"{n!r} in args" for n in names)]
    return " and ".join(tests), call


def generate(
    plan_ref: Sequence[Any],
    name: str,
    root_is_async: bool,
    steps: tuple[Step, ...],
    inputs: tuple[Input, ...],
    arguments: tuple[str, ...],
    variant: str,
    *,
    build: bool = True,
    root_threaded: bool = False,
    body: Callable[..., Any] | None = None,
) -> tuple[str, Callable[..., Any] | None]:
    """Generate one function of a plan: ``run`` (resolves, then calls the function),
    ``direct`` (``run`` that also sets up and tears down the plan's CALL resources itself,
    with no call scope; see `plan.direct_shape`) or ``resolve`` (returns the injected kwargs).
    *arguments* are the names of the function's own parameters, which the caller passes.
    A fourth, ``entry``, is what `Container.run` starts: ``run`` (or ``direct``, when
    the plan has CALL resources) for a call with no call scope, no framework values and
    no session, which it does not take: ``entry(args)``, or ``entry(scopes, args)`` for
    a plan with APP values (the container binds *scopes*, where only APP is open). It
    calls *body*, the plan's own function, itself: whoever starts it has checked that
    this is the function it was given (see `Container.run`). A fifth, ``kept``, is
    ``direct`` that leaves the CALL resources open: it takes, as its call scope, the
    exits (a `Kept`) where it lists each one once open, and the caller closes them later (a web
    request's, after its response is sent), also when this function raises; it takes no
    call scope, so it records no value for one to share. An entry's call whose
    arguments are exactly *arguments* reads them once into local variables; any other
    goes on in ``entry_any``, the same code reading them from *args*, generated on the
    first such call.
    Every variant but the entry takes ``(args, values, scopes, body)``: the scopes as one
    tuple (see `resolvent._vocabulary.scopes.SLOTS`), never one parameter each, so the
    code reads a scope's live values wherever `SLOTS` puts it, whichever scopes exist.
    Resolvers, and the handler when it is *body*, are passed their values by position
    where their code takes them so (`positional`).
    Returns its source and, with *build*, the compiled function; a failure inside it is
    mapped back to its step by line number.
    """
    used = {s.scope for s in steps}
    call_resources = any(s.kind.is_resource and s.scope is Scope.CALL for s in steps)
    entry = variant == "entry" or variant == "entry_any"
    kept = variant == "kept"
    direct = variant == "direct" or kept or (entry and call_resources)
    w = _Writer()
    ns = w.namespace
    if entry:
        assert used <= {Scope.APP, Scope.CALL} and all(
            i.source != "value" for i in (*inputs, *(i for s in steps for i in s.inputs))
        ), "an entry runs with only the APP scope open and no framework values"
        assert body is not None, "an entry calls the plan's own function"
        # What the other variants take as parameters: the same for every call.
        ns.update(values=_NO_VALUES, call=None, body=body)
    ns.update(
        MISSING=MISSING,
        Answered=Answered,
        QT=QUESTION_KINDS,
        as_outcome=as_outcome,
        enter=enter,
        hold=hold,
        partial=functools.partial,
        fail=fail,
        PLAN=plan_ref,
        open_=open_resource,
        BODY=body,
        **GENERATED_NAMES,  # what the generated teardown calls (see `emit_close`)
    )
    if any(s.may_ask for s in steps):  # asking loads with the first plan that may ask
        from .._runtime.rounds import ask

        ns["ask"] = ask
    if root_threaded or any(s.threaded for s in steps):  # and threads, with one that has one
        from .._runtime.threads import abandonable, in_thread

        ns.update(in_thread=in_thread, to_thread=abandonable)
    order = positional(body) if body is not None else ()
    at = {s.index: s for s in steps}  # by index (a slot: see `Step`)
    blocks = _blocks(steps)
    # A sync handler whose last resolvers run in a thread is called in that same hop.
    fused = variant != "resolve" and root_threaded and _fusable(blocks, inputs, at)

    # Worker-thread blocks become plain functions that run in one hop.
    block_defs: list[tuple[str, int]] = []
    for number, block in enumerate(blocks):
        first = block[0]
        if not (first.threaded and first.scope is Scope.CALL):
            continue
        fuse = fused and number == len(blocks) - 1
        params = _block_params(block, inputs, fuse)
        block_defs.append((f"def block{number}({params}):", -1))
        for step in block:
            fn = w.const("f", step.fn)
            text = f"    v{step.index} = {fn}({_call_args(w, step, at)})"
            block_defs.append((text, step.index))
        outs = ", ".join(f"v{s.index}" for s in block)
        if fuse:
            # The handler's own exception is handed back, not raised here, so it is
            # not mistaken for a resolver's (and gets no note).
            block_defs += [
                ("    try:", -1),
                (f"        ret = body({_root_spread(w, inputs, at, name)})", -1),
                ("    except BaseException as error:", -1),
                (f"        return ({outs}, None, error)", -1),
                (f"    return ({outs}, ret, None)", -1),
            ]
        else:
            block_defs.append((f"    return ({outs},)", -1))
    for line, index in block_defs:  # map a failure inside a block to its own step
        w.emit(line, index)

    context = _Function(
        w, name, root_is_async, steps, inputs, arguments, variant, blocks, fused, root_threaded
    )
    context.direct, context.kept, context.order = direct, kept, order
    if not entry:
        context.emit(f"async def {variant}(args, values, scopes, body):", None)
    else:
        # `body`, the plan's own function, is a global here (see above); the scopes
        # only for a plan with APP values.
        taken = "scopes, " if used - {Scope.CALL} else ""
        if variant == "entry_any":
            # Any call: the arguments read from *args* as given.
            context.emit(f"async def entry_any({taken}args):", None)
        else:
            # The call with exactly the handler's own arguments: each read once, here.
            # Any other goes on in `entry_any`, generated on the first such call (see
            # `_deferred`): most handlers are always called with the same arguments.
            local = {n: f"a{k}" for k, n in enumerate(arguments)}
            w.emit(f"async def entry({taken}args):")
            other = f"return await entry_any({taken}args)"
            if arguments:
                w.emit(f"    if len(args) != {len(arguments)}: {other}")
                w.emit("    try:")
                for n, var in local.items():
                    w.emit(f"        {var} = args[{n!r}]")
                w.emit(f"    except KeyError: {other}")
            else:
                w.emit(f"    if args: {other}")
            context.emit(None, local)
            ns["entry_any"] = _deferred(
                ns,
                functools.partial(
                    generate,
                    plan_ref,
                    name,
                    root_is_async,
                    steps,
                    inputs,
                    arguments,
                    "entry_any",
                    root_threaded=root_threaded,
                    body=body,
                ),
            )
    source = "\n".join(w.lines) + "\n"
    if not build:
        return source, None
    code_name = f"<resolvent plan {name} {variant} #{next(_counter)}>"
    ns["LINES"] = (code_name, _line_map(w.line_steps))
    code = compile(source, code_name, "exec", dont_inherit=True)
    if not entry:
        ns = _read_by(code, ns)
    exec(code, ns)
    function: Callable[..., Any] = ns[variant]
    return source, function


def _line_map(line_steps: dict[int, int]) -> tuple[int, ...]:
    """Which step each line runs, flat (see `line_step`): the one tuple every function
    whose lines run the same steps shares (plans of one shape over the same resolvers,
    in one container or another), as a value."""
    flat = tuple(itertools.chain.from_iterable(line_steps.items()))
    found = _LINE_MAPS.get(flat)
    return keep_shared(_LINE_MAPS, flat, flat) if found is None else found


_LINE_MAPS: dict[tuple[int, ...], tuple[int, ...]] = {}


def _read_by(code: types.CodeType, ns: dict[str, Any]) -> dict[str, Any]:
    """The part of *ns* that *code* (or code defined in it) reads, with ``PLAN`` and
    ``LINES`` (a timed-out call reads them from a frame's globals): *ns* holds every
    helper any plan's code may call and each step's constants, and the function keeps
    its globals for its life. The names are the code's own strings, not copies."""
    names: set[str] = set()
    stack = [code]
    while stack:
        found = stack.pop()
        names.update(found.co_names)
        stack.extend(c for c in found.co_consts if isinstance(c, types.CodeType))
    kept = {name: ns[name] for name in names if name in ns}
    kept["PLAN"], kept["LINES"] = ns["PLAN"], ns["LINES"]
    return kept


def _deferred(
    ns: dict[str, Any], make: Callable[[], tuple[str, Callable[..., Any] | None]]
) -> Callable[..., Any]:
    """An entry's ``entry_any``, generated by *make* on its first call, which then puts
    it in the entry's namespace *ns* in its own place."""

    async def entry_any(*given: Any) -> Any:  # (scopes,) args
        function = make()[1]
        assert function is not None
        ns["entry_any"] = function
        return await function(*given)

    return entry_any


def _block_params(block: list[Step], inputs: tuple[Input, ...], fuse: bool) -> str:
    """A worker-thread block's parameters: the values it reads from steps outside it,
    the call's arguments and values, and (fused) the handler."""
    inside = {s.index for s in block}
    consumers = [i for s in block for i in s.inputs] + (list(inputs) if fuse else [])
    needed = sorted({i.step for i in consumers if i.source == "step" and i.step not in inside})
    return ", ".join([f"v{i}" for i in needed] + ["args", "values"] + (["body"] if fuse else []))


class _Function:
    """Emits one generated function's body (see `generate`): *local*, when given, maps
    each of the call's arguments to the local variable that holds it."""

    def __init__(
        self,
        w: _Writer,
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
                params = _block_params(block, inputs, fuse)
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
            call_args = _call_args(w, step, self.at, local)
            v = f"v{step.index}"
            if step.scope is not Scope.CALL:  # its scope's live values (see `_cache`)
                cache, live = _cache(step.scope), f"scopes[{SLOTS[step.scope]}]"
                k = w.const("K", step.key)
                make = f"partial({fn}, {call_args})" if call_args else fn
                body.append((f"{v} = {cache}.get({k}, MISSING)", step.index))
                body.append(
                    (f"if {v} is MISSING: {v} = await {live}.create({s}, {k}, {make})", step.index)
                )
                continue
            if step.kind.is_resource:
                factory = f"{'await ' if step.awaits else ''}{fn}({call_args})"
                if direct:  # set up here; torn down by `close_now` below
                    r = f"r{step.index}"
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
                    else:
                        body.append((f"{pad}{v} = await open_({s}, {r})", step.index))
                    if kept:  # open: the caller's exits close it, later
                        body.append((f"exits.append(({s}, {r}))", step.index))
                    # Not listed in `exits` (only a holder cancelled while opening is, by
                    # `hold`): the teardown below knows them, and a failure lists those open.
                else:
                    body.append((f"{v} = await enter(exits, {s}, {factory})", step.index))
            elif step.kind is Kind.ASYNC:
                body.append((f"{v} = await {fn}({call_args})", step.index))
            else:
                body.append((f"{v} = {fn}({call_args})", step.index))
            if step.may_ask:
                body.append(
                    (f"if {v}.__class__ in QT: {v} = await ask(call, {s}, {v})", step.index)
                )

        call_steps = [s for s in steps if s.scope is Scope.CALL]
        if header is not None:
            w.emit(header)
        if not entry:  # an entry has no call scope: its `call` is a global None
            w.emit(f"    call = scopes[{CALL_SLOT}]")
        # `direct` wraps the resolution and the call in the teardown of its resources;
        # `kept` leaves them open in the exits it is given as *call*.
        pad = "    " * (1 + (direct and not kept))
        if direct:  # the teardown's own lines (see `resolvent._runtime.teardown.emit_open`)
            emit_open(w.emit, kept=kept, holds=self.holds)
        w.emit(f"{pad}try:")
        opened = len(w.lines)
        for scope in sorted(used - {Scope.CALL}, reverse=True):
            w.emit(f"{pad}    {_cache(scope)} = scopes[{SLOTS[scope]}].cache")
        if call_resources and not direct:
            w.emit("        exits = call.exits")
        for text, index in body:
            w.emit(f"{pad}    {text}", index)
        if call_steps and not direct and not entry:
            # A call scope reused for another plan must not run these again.
            record = ", ".join(f"{w.const('K', s.key)}: v{s.index}" for s in call_steps)
            w.emit(f"        if call is not None: call.record({{{record}}})")
        if variant == "resolve":
            results = ", ".join(f"{i.name!r}: {_expr(w, i, self.at, root_name)}" for i in inputs)
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
            spread = _root_spread(w, inputs, self.at, root_name)
            if self.root_threaded:
                # A sync handler's thread is abandoned on cancellation like a resolver's
                # (see docs/concepts.md): the caller's own bound holds.
                call = f"await to_thread(partial(body, {spread}))"
                w.emit(f"{pad}ret = {call}")
            else:
                awaits = "await " if self.root_is_async else ""
                test, named = _root_call(
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


def _cache(scope: Scope) -> str:
    """The local that holds *scope*'s live values in generated code (``app_cache``)."""
    return f"{scope.name.lower()}_cache"
