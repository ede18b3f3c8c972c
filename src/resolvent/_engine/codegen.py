"""The code generator: turns a plan into straight-line Python (``run``, ``direct``,
``resolve``, ``entry``, ``kept``) whose failures map back to their steps by line: which
variant, the names its code calls, compiling it and what its frames keep. The body of a
function, and the expressions in it, are `codegen_body.py`'s. It never interprets a plan.
"""

from __future__ import annotations

import functools
import itertools
import types
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .._graph.plan import direct_shape, keep_shared
from .._runtime.failures import fail
from .._runtime.resources import enter, hold, open_resource, opened_too_late
from .._runtime.sharing import MISSING, land, record
from .._runtime.teardown import GENERATED_NAMES
from .._vocabulary.questions import QUESTION_KINDS, Answered, as_outcome
from .._vocabulary.scopes import Scope
from .codegen_body import Body, Writer, blocks_of, emit_blocks, fusable, positional

if TYPE_CHECKING:
    from .._graph.plan import Input, Plan, Step

__all__ = ("generate", "plan_function", "plan_source")

_counter = itertools.count()
_NO_VALUES: Mapping[Any, Any] = MappingProxyType({})  # an entry's (see `generate`)


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
    w = Writer()
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
        record=record,
        land=land,
        Answered=Answered,
        QT=QUESTION_KINDS,
        as_outcome=as_outcome,
        enter=enter,
        hold=hold,
        partial=functools.partial,
        fail=fail,
        PLAN=plan_ref,
        open_=open_resource,
        too_late=opened_too_late,
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
    blocks = blocks_of(steps)
    # A sync handler whose last resolvers run in a thread is called in that same hop.
    fused = variant != "resolve" and root_threaded and fusable(blocks, inputs, at)

    emit_blocks(w, blocks, inputs, at, name, fused)  # worker-thread blocks, one hop each
    context = Body(
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


def plan_function(plan: Plan, variant: str) -> Callable[..., Any] | None:
    """*plan*'s generated *variant*, compiled now (see `resolvent._graph.plan.PlanCode`):
    None for a ``direct`` or ``kept`` whose CALL resources need a call scope
    (`direct_shape`)."""
    if (variant == "direct" or variant == "kept") and not direct_shape(plan.steps):
        return None
    return _of_plan(plan, variant, build=True)[1]


def plan_source(plan: Plan, variant: str) -> str:
    """The Python source of *plan*'s generated *variant*."""
    return _of_plan(plan, variant, build=False)[0]


def _of_plan(plan: Plan, variant: str, *, build: bool) -> tuple[str, Callable[..., Any] | None]:
    return generate(
        (plan,),  # what the code reads as PLAN[0]; the plan exists: no list to fill later
        plan.name,
        plan.fn_is_async,
        plan.steps,
        plan.inputs,
        plan.arguments,
        variant,
        build=build,
        root_threaded=plan.fn_threaded,
        body=plan.fn,
    )


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
