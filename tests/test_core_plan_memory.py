"""What compiling keeps: what plans can share, they share; a plan keeps nothing it has not
made and its code nothing it does not read. No byte counts (those are the benchmark's):
each test names an object that must, or must not, be kept."""

import gc
import types
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from resolvent import Container, Elicit, Resolve
from resolvent._container.launch import on_hot
from resolvent._graph.registry import resolver_key


class Confirm:
    pass


async def leaf() -> int:
    return 1


async def left(a: Annotated[int, Resolve(leaf)]) -> int:
    return a + 1


def right(a: Annotated[int, Resolve(leaf)]) -> int:  # sync: runs in a worker thread
    return a + 2


async def opened(a: Annotated[int, Resolve(leaf)]) -> AsyncIterator[int]:
    yield a + 3


async def top(
    x: Annotated[int, Resolve(left)],
    y: Annotated[int, Resolve(right)],
    z: Annotated[int, Resolve(opened)],
) -> int:
    return x + y + z


def _handlers() -> tuple[Callable[..., Any], Callable[..., Any]]:
    async def first(t: Annotated[int, Resolve(top)], user_id: str) -> int:
        return t

    async def second(t: Annotated[int, Resolve(top)], w: Annotated[int, Resolve(left)]) -> int:
        return t + w

    return first, second


def _code_names(function: Any) -> tuple[dict[str, str], set[str]]:
    """Every name the generated code beside *function* (the functions of its module,
    and code defined in them) reads; and those functions' names."""
    where = function.__code__.co_filename
    made = {
        name: f
        for name, f in function.__globals__.items()
        if isinstance(f, types.FunctionType) and f.__code__.co_filename == where
    }
    names: dict[str, str] = {}
    stack: list[types.CodeType] = [f.__code__ for f in made.values()]
    while stack:
        code = stack.pop()
        names.update((n, n) for n in code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return names, set(made)


def test_a_plan_keeps_nothing_for_what_it_has_not_made() -> None:
    """A plan's first-use caches (the other variants' code, its maps, hooks) hold no
    object until they are made: a compiled plan refers to no list or dict."""
    first, _ = _handlers()
    plan = Container().compile(first)
    kept = [r for r in gc.get_referents(plan) if isinstance(r, list | dict)]
    assert kept == []
    # Each is made once, on first use, and kept.
    assert plan.resolve_fn is plan.resolve_fn
    assert plan.direct_fn is plan.direct_fn
    assert plan.path_to(plan.steps[0].index) == plan.path_to(plan.steps[0].index)


def test_hot_hooks_run_once_each_when_the_plan_turns_hot() -> None:
    async def handler(x: Annotated[int, Resolve(left)]) -> int:
        return x

    plan = Container().compile(handler)
    seen: list[tuple[str, Any]] = []
    on_hot(plan, lambda run: seen.append(("a", run)))
    on_hot(plan, lambda run: seen.append(("b", run)))
    assert seen == []
    run = plan.heat()
    plan.heat()
    assert seen == [("a", run), ("b", run)]
    assert not [r for r in gc.get_referents(plan) if isinstance(r, tuple) and seen[0] in r]


def test_reading_a_resolver_gives_it_no_attribute_dict() -> None:
    """Reading a function leaves it as it was: one that has no attributes of its own
    is not given an empty ``__dict__`` to keep."""

    async def plain() -> int:
        return 1

    async def handler(p: Annotated[int, Resolve(plain)]) -> int:
        return p

    Container().compile(handler)
    for fn in (plain, handler):
        known = (fn.__globals__, fn.__annotations__, fn.__kwdefaults__, fn.__builtins__)
        made = [r for r in gc.get_referents(fn) if isinstance(r, dict)]
        assert [r for r in made if not any(r is k for k in known)] == []


def test_plans_share_their_steps_and_scopes() -> None:
    """Two plans of a container take the same step for a resolver, and plans with the
    same scopes the same set of them, in any container."""
    first, second = _handlers()
    container = Container()
    a, b = container.compile(first), container.compile(second)
    by_fn = {s.fn: s for s in a.steps}
    assert all(by_fn[s.fn] is s for s in b.steps)
    assert a.scopes is b.scopes
    assert Container().compile(first).scopes is a.scopes


def test_a_step_that_never_asks_has_no_wire_key() -> None:
    async def ask() -> Elicit[Confirm]:
        return Elicit("sure?", Confirm)

    async def handler(t: Annotated[int, Resolve(top)], c: Annotated[Confirm, Resolve(ask)]) -> int:
        return t

    plan = Container().compile(handler)
    keys = {s.fn: s.wire_key for s in plan.steps}
    assert keys.pop(ask).endswith(":test_a_step_that_never_asks_has_no_wire_key.<locals>.ask")
    assert set(keys.values()) == {""}


def test_a_kept_sub_graph_holds_the_expansions_the_registry_keeps() -> None:
    """The sub-graph kept for a resolver lists its resolvers' expansions themselves (no
    copy per sub-graph), and an expansion's resolver edges are its inputs' own."""
    first, _ = _handlers()
    container = Container()
    container.compile(first)
    memo = container._registry.expansions
    closure = memo[resolver_key(top)].closure
    assert closure is not None
    assert [item.key for item in closure.post] == [
        resolver_key(f) for f in (leaf, left, right, opened)
    ]
    assert all(item is memo[item.key] for item in closure.post)

    # A resolver that calls none has no sub-graph to keep: all share one empty one.
    async def other() -> int:
        return 2

    async def handler(o: Annotated[int, Resolve(other)]) -> int:
        return o

    container.compile(handler)
    empty = memo[resolver_key(leaf)].closure
    assert empty is not None and not (empty.creations or empty.post or empty.values)
    assert memo[resolver_key(other)].closure is empty
    for expansion in memo.values():
        edges = [i for i in expansion.inputs if isinstance(i, tuple)]
        assert len(edges) == len(expansion.edges)
        assert all(a is b for a, b in zip(edges, expansion.edges, strict=True))


def test_the_registry_keeps_one_step_per_resolver_and_one_reading() -> None:
    """What the registry keeps for a resolver is its reading, its slot and its checked
    expansion, which holds the step every plan holds, made for that reading."""
    first, _ = _handlers()
    container = Container()
    plan = container.compile(first)
    registry = container._registry
    for step in plan.steps:
        expansion = registry.expansions[step.key]
        assert expansion.step is step
        assert registry.implicit(step.fn) is expansion.provider
        tables = [v for v in vars(registry).values() if isinstance(v, dict) and step.key in v]
        assert len(tables) == 3


def test_readings_of_resolvers_made_on_the_fly_are_bounded(monkeypatch: Any) -> None:
    """The registry's readings of unregistered resolvers let the oldest go past their
    bound: a program that makes resolvers on the fly does not keep each one alive."""
    import resolvent._graph.registry as registry_module

    monkeypatch.setattr(registry_module, "_MAX_READINGS", 8)
    container = Container()
    made: list[Any] = []
    for i in range(40):

        async def fresh(i: int = i) -> int:
            return i

        async def handler(v: Annotated[int, Resolve(fresh)]) -> int:
            return v

        container.compile(handler)
        made.append(fresh)
    readings = container._registry._readings
    assert len(readings) <= 8
    assert resolver_key(made[-1]) in readings
    assert resolver_key(made[0]) not in readings


async def test_generated_code_keeps_only_the_globals_it_reads() -> None:
    """A plan's generated function keeps as globals only the names its code reads (and
    what a timed-out call looks up), under the code's own name strings; it still runs
    its worker-thread step and its resource."""
    first, second = _handlers()
    container = Container()
    async with container:
        for handler in (first, second):
            plan = container.compile(handler)
            for variant in (plan.heat(), plan.resolve_fn, plan.direct_fn):
                names, functions = _code_names(variant)
                kept = set(variant.__globals__) - {"__builtins__"}
                assert kept - set(names) <= {"PLAN", "LINES", *functions}
                assert all(k is names[k] for k in kept if k in names)
            for _ in range(3):  # past the interpreted first calls: the generated code runs
                assert await container.run(first, user_id="u") == 2 + 3 + 4
                assert await container.run(second) == 2 + 3 + 4 + 2


def test_generated_code_maps_its_lines_to_steps_in_a_flat_tuple() -> None:
    """Which step each line of generated code runs (read only when something fails) is
    kept as one flat tuple, ``(line, step, ...)``, in which every line is found."""
    from resolvent._runtime.failures import line_step

    first, _ = _handlers()
    run = Container().compile(first).heat()
    lines = run.__globals__["LINES"]
    flat = lines[1]
    assert type(flat) is tuple and len(flat) % 2 == 0 and flat
    pairs = list(zip(flat[::2], flat[1::2], strict=True))
    assert [line for line, _ in pairs] == sorted({line for line, _ in pairs})
    for line, step in pairs:
        assert line_step(lines, line) == step
    assert line_step(lines, 0) == -1
    assert line_step(lines, pairs[-1][0] + 1) == -1


def _codes(code: types.CodeType) -> list[types.CodeType]:
    """*code* and the code defined in it."""
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += _codes(const)
    return found


def test_generated_code_keeps_the_line_of_each_instruction() -> None:
    """Generated code maps a failure to its step by line: it keeps each instruction's
    line, as compiling its source gives it."""
    first, _ = _handlers()
    plan = Container().compile(first)
    for variant, function in (("run", plan.heat()), ("resolve", plan.resolve_fn)):
        module = compile(plan.code.source(plan, variant), "<source>", "exec")
        fresh = {c.co_name: c for c in _codes(module)}
        kept = [function.__code__]
        kept += [
            f.__code__
            for f in function.__globals__.values()
            if isinstance(f, types.FunctionType)
            and f.__code__.co_filename == function.__code__.co_filename
            and f is not function
        ]
        assert len(kept) == 2  # the plan's function and its worker-thread block
        for code in (c for k in kept for c in _codes(k)):
            positions = list(code.co_positions())
            assert len(positions) == len(code.co_code) // 2
            expected = [line for line, *_ in fresh[code.co_name].co_positions()]
            assert [line for line, *_ in positions] == expected


def test_an_expansion_whose_inputs_are_its_edges_keeps_one_tuple() -> None:
    """A resolver whose every input is another resolver's value keeps its edges as its
    inputs: the same tuple, not an equal copy."""
    first, _ = _handlers()
    container = Container()
    container.compile(first)
    memo = container._registry.expansions
    for fn in (left, right, opened, top):
        expansion = memo[resolver_key(fn)]
        assert expansion.edges and expansion.inputs is expansion.edges


def test_a_plan_that_takes_shared_steps_tells_resources_and_threads_from_them() -> None:
    """The registry keeps no flag a step already tells: a plan built from the steps
    earlier plans made finds the CALL resource and the worker-thread step in them."""
    from resolvent._graph.compiler import NO_OVERRIDES, build_graph

    first, second = _handlers()
    container = Container()
    registry = container._registry
    made = build_graph(first, registry, NO_OVERRIDES, ())
    taken = build_graph(second, registry, NO_OVERRIDES, ())
    assert all(s is registry.expansions[s.key].step for s in taken.steps)
    assert made.call_resources and made.call_threads
    assert taken.call_resources and taken.call_threads

    async def only_left(x: Annotated[int, Resolve(left)]) -> int:
        return x

    plain = build_graph(only_left, registry, NO_OVERRIDES, ())
    assert not (plain.call_resources or plain.call_threads)
    expansion = registry.expansions[resolver_key(right)]
    assert not {"resource", "threads"} & set(type(expansion).__slots__)


def test_a_provider_is_its_reading_and_keeps_how_it_lives_only() -> None:
    """A resolver's provider holds its reading itself (one object, not a provider and
    a reading), and beside it only its scope and whether it runs inline; whether it
    was registered is the registry's tables' to say."""
    from resolvent import Scope
    from resolvent._graph.registry import Provider
    from resolvent._reading.signature import FunctionInfo

    container = Container()
    container.provide(leaf, scope=Scope.APP)
    first, _ = _handlers()
    container.compile(first)
    registry = container._registry
    for provider in (registry.get(leaf), registry.implicit(left)):
        assert provider is not None
        assert isinstance(provider, FunctionInfo)
        assert [r for r in gc.get_referents(provider) if isinstance(r, FunctionInfo)] == []
        assert type(provider) is Provider and Provider.__slots__ == ("scope", "inline")
    assert registry.get(left) is None


def test_plans_share_the_input_of_a_call_argument_without_default() -> None:
    """A resolver's input of a call argument is a value, as a step's is: every plan
    shares the one for an argument name with no default."""

    async def reads(user_id: str) -> str:
        return user_id

    async def defaulted(user_id: str = "anonymous") -> str:
        return user_id

    async def first(u: Annotated[str, Resolve(reads)], user_id: str) -> str:
        return u

    async def second(u: Annotated[str, Resolve(defaulted)], user_id: str) -> str:
        return u

    a, b = Container().compile(first), Container().compile(first)
    assert a.steps[0].inputs[0] is b.steps[0].inputs[0]
    c = Container().compile(second)
    assert c.steps[0].inputs[0].default == "anonymous"


async def test_a_reading_notes_no_keyword_catch_all() -> None:
    """A resolver's ``**kwargs`` is given nothing, so its reading keeps no note of it:
    the same fields as any other function's."""
    from resolvent._reading.signature import FunctionInfo, read_function

    async def open_ended(a: Annotated[int, Resolve(leaf)], **rest: Any) -> int:
        return a + len(rest)

    info = read_function(open_ended)
    assert [p.name for p in info.params] == ["a"]
    assert not {"varkw", "rest"} & set(FunctionInfo.__slots__)
    assert await Container().run(open_ended) == 1


def test_generated_code_holds_its_plan_in_a_tuple() -> None:
    """Code generated for a plan that exists (a cold plan's, turning hot; a ``resolve``
    variant) holds it as ``PLAN[0]`` in a 1-tuple: no list, which only code generated
    before its plan is made needs, to fill later."""

    async def cold(x: Annotated[int, Resolve(left)]) -> int:
        return x

    first, _ = _handlers()
    container = Container()
    plan = container.compile(cold)
    hot = container.compile(first)
    for function in (plan.heat(), plan.resolve_fn, hot.resolve_fn):
        held = function.__globals__["PLAN"]
        assert type(held) is tuple and held in ((plan,), (hot,))


async def test_an_expansion_keeps_no_reading_its_children_keep() -> None:
    """A shared expansion names its children by key: the reading of each is the one its
    own expansion holds, or, for a child that reads a call argument (and has none), the
    one the walk finds; a later plan over it runs the same."""

    async def current(user_id: str) -> str:
        return user_id.upper()

    async def greet(u: Annotated[str, Resolve(current)], a: Annotated[int, Resolve(leaf)]) -> str:
        return f"hi {u} {a}"

    async def first(g: Annotated[str, Resolve(greet)], user_id: str) -> str:
        return g

    async def second(g: Annotated[str, Resolve(greet)], user_id: str) -> str:
        return g + "!"

    container = Container()
    a, b = container.compile(first), container.compile(second)
    memo = container._registry.expansions
    assert resolver_key(current) not in memo
    assert "children" not in type(memo[resolver_key(greet)]).__slots__
    assert [s.fn for s in b.steps] == [s.fn for s in a.steps]
    assert await container.run(first, user_id="ann") == "hi ANN 1"
    assert await container.run(second, user_id="bob") == "hi BOB 1!"


def test_plans_of_one_shape_share_their_line_map() -> None:
    """Which step each line of generated code runs is a value: the code of two plans
    of the same shape (here in two containers) shares the one flat tuple."""
    first, _ = _handlers()
    maps = [Container().compile(first).heat().__globals__["LINES"] for _ in range(2)]
    assert maps[0][0] != maps[1][0]  # each its own code
    assert maps[0][1] is maps[1][1]


def test_plans_share_the_names_of_their_handlers_arguments() -> None:
    """The names of a handler's own arguments are a value: plans whose handlers take
    the same ones share the one tuple."""
    first, second = _handlers()

    async def third(t: Annotated[int, Resolve(top)], user_id: str) -> int:
        return t

    container = Container()
    a, b = container.compile(first), container.compile(third)
    assert a.arguments == ("user_id",) and a.arguments is b.arguments
    assert container.compile(second).arguments == ()


def test_a_kept_node_holds_nothing_of_overrides() -> None:
    """The nodes a kept sub-graph shares with every plan it is spliced into hold no
    field for overrides (which plans that share it never have): what stands in for
    what is the compile's own, not each node's. Overrides still apply."""
    first, _ = _handlers()
    container = Container()
    container.compile(first)
    closure = container._registry.expansions[resolver_key(top)].closure
    assert closure is not None and closure.creations
    for node in closure.creations:
        assert not {"replaced", "replaces"} & set(type(node).__slots__)

    async def fake_leaf() -> int:
        return 100

    with container.override(leaf, fake_leaf):
        plan = container.compile(first)
    assert fake_leaf in [s.fn for s in plan.steps] and leaf not in [s.fn for s in plan.steps]


def test_steps_with_the_same_inputs_share_their_tuple() -> None:
    """A step's inputs are a value: steps that take the same ones (two resolvers reading
    one resolver under one name; the same resolvers in another container) share one
    tuple, and each still reads what it names."""

    async def twin(a: Annotated[int, Resolve(leaf)]) -> int:
        return a + 5

    async def both(x: Annotated[int, Resolve(left)], y: Annotated[int, Resolve(twin)]) -> int:
        return x + y

    first, _ = _handlers()
    a, b = Container().compile(first), Container().compile(first)
    for mine, other in zip(a.steps, b.steps, strict=True):
        assert mine.inputs is other.inputs
    plan = Container().compile(both)
    by_fn = {s.fn: s for s in plan.steps}
    assert by_fn[left].inputs is by_fn[twin].inputs
    assert [(i.name, i.step) for i in by_fn[twin].inputs] == [("a", by_fn[leaf].index)]


class Request:
    pass


async def test_an_expansion_keeps_no_copy_of_its_framework_value_types() -> None:
    """The framework value types a resolver takes are in its inputs: its expansion keeps
    no tuple of them beside, and later plans over it still take those values."""
    from resolvent._graph.registry import Expansion

    async def by_request(r: Request, a: Annotated[int, Resolve(leaf)]) -> str:
        return f"{type(r).__name__} {a}"

    async def uses(x: Annotated[str, Resolve(by_request)]) -> str:
        return x

    async def again(
        x: Annotated[str, Resolve(uses)], y: Annotated[str, Resolve(by_request)]
    ) -> str:
        return x + y

    assert "values" not in Expansion.__slots__
    container = Container(values=(Request,))
    async with container:
        container.compile(uses)
        expansion = container._registry.expansions[resolver_key(by_request)]
        assert expansion.values == (Request,)
        assert container._registry.expansions[resolver_key(leaf)].values == ()
        for handler in (uses, again):
            assert container.compile(handler).value_types == (Request,)
        async with container.call(values={Request: Request()}) as call:
            assert await call.run(again) == "Request 1Request 1"


async def test_a_parameter_that_wants_no_outcome_keeps_no_field_for_it() -> None:
    """Few parameters want a resolver's whole outcome: the others (every unmarked one,
    most marked ones) keep no field for it and say they want none; one that wants it
    keeps its family and receives the outcome."""
    from resolvent import Accepted
    from resolvent._reading.params import Param
    from resolvent._reading.signature import read_function

    async def plain() -> int:
        return 7

    async def wants(
        c: Annotated[Accepted[int], Resolve(plain)], v: Annotated[int, Resolve(plain)], n: str
    ) -> str:
        return f"{isinstance(c, Accepted)} {c.data} {v} {n}"

    outcome, value, argument = read_function(wants).params
    assert "outcome" not in Param.__slots__
    for param in (value, argument):
        assert type(param) is Param and param.outcome is None
    assert outcome.outcome is not None and outcome.outcome.members is not None
    assert await Container().run(wants, n="x") == "True 7 7 x"


def test_only_a_step_that_may_ask_keeps_a_wire_key() -> None:
    """A step that never asks keeps no field for a wire key (it reads ``""``); one that
    may ask keeps its own, numbered within the plan, and a copy of it keeps it too."""
    import copy

    from resolvent._graph.plan import Step

    async def ask() -> Elicit[Confirm]:
        return Elicit("sure?", Confirm)

    async def handler(
        t: Annotated[int, Resolve(top)],
        c: Annotated[Confirm, Resolve(ask)],
        d: Annotated[Confirm, Resolve(ask)],
    ) -> int:
        return t

    assert "wire_key" not in Step.__slots__
    plan = Container().compile(handler)
    asking = [s for s in plan.steps if s.may_ask]
    assert [type(s) for s in plan.steps if not s.may_ask] == [Step] * 5
    assert [s.wire_key for s in plan.steps if not s.may_ask] == [""] * 5
    assert len(asking) == 1 and asking[0].wire_key.endswith(".<locals>.ask")
    assert copy.copy(asking[0]).wire_key == asking[0].wire_key
