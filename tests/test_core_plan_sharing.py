"""A plan is the same whatever its container compiled before.

Plans of one container share what earlier plans read, checked and built: a handler
whose resolvers an earlier plan compiled takes their whole sub-graphs' steps as they
are, joined. That plan must be the one a fresh container compiles for the same handler
(the same steps, in the same order, fed the same way), and run the same.
"""

from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resolvent import Container, Resolve, Scope
from resolvent._graph.plan import Plan


def _resolvers(deps: list[list[int]], sync: set[int], takes_x: set[int]) -> list[Any]:
    """Resolver *i* depends on ``deps[i]`` (earlier ones) and returns its number plus
    theirs (and the call argument ``x``, for those in *takes_x*); those in *sync* are
    plain functions (run in a worker thread), the others ``async def``."""
    source: list[str] = []
    for i, ds in enumerate(deps):
        params = [f"d{j}: Annotated[int, Resolve(r{j})]" for j in ds]
        if i in takes_x:
            params.append("x: int")
        total = " + ".join([str(i), *(f"d{j}" for j in ds), *(["x"] if i in takes_x else [])])
        head = "def" if i in sync else "async def"
        source.append(f"{head} r{i}({', '.join(params)}) -> int:\n    return {total}\n")
    ns: dict[str, Any] = {"Annotated": Annotated, "Resolve": Resolve}
    exec(compile("\n".join(source), "<resolvers>", "exec"), ns)
    return [ns[f"r{i}"] for i in range(len(deps))]


def _handler(resolvers: list[Any], uses: list[int], name: str) -> Any:
    params = ", ".join(["x: int", *(f"d{j}: Annotated[int, Resolve(r{j})]" for j in uses)])
    total = " + ".join(["0", *(f"d{j}" for j in uses)])
    ns: dict[str, Any] = {"Annotated": Annotated, "Resolve": Resolve}
    ns.update({f"r{i}": fn for i, fn in enumerate(resolvers)})
    exec(compile(f"async def {name}({params}) -> int:\n    return {total}\n", "<h>", "exec"), ns)
    return ns[name]


def _shape(plan: Plan) -> tuple[Any, ...]:
    """What a plan does, whatever slots its container gave its steps: each step's
    function and scope, and where each of its inputs (and the handler's) comes from."""

    def fed(inputs: Any) -> tuple[Any, ...]:
        return tuple(
            (i.name, i.source, plan.step_at(i.step).fn if i.source == "step" else i.arg)
            for i in inputs
        )

    steps = tuple((s.fn, s.scope, s.kind, fed(s.inputs)) for s in plan.steps)
    return steps, fed(plan.inputs), plan.arguments, plan.scopes, plan.needs_call


def _value(deps: list[list[int]], takes_x: set[int], uses: list[int], x: int) -> int:
    values: list[int] = []
    for i, ds in enumerate(deps):
        values.append(i + sum(values[j] for j in ds) + (x if i in takes_x else 0))
    return sum(values[j] for j in uses)


@st.composite
def _graphs(draw: st.DrawFn) -> tuple[list[list[int]], set[int], set[int], list[list[int]]]:
    n = draw(st.integers(1, 12))
    deps = [sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)]
    sync = draw(st.sets(st.integers(0, n - 1), max_size=2))
    takes_x = draw(st.sets(st.integers(0, n - 1), max_size=2))
    uses = st.lists(st.integers(0, n - 1), min_size=1, max_size=4, unique=True)
    handlers = draw(st.lists(uses, min_size=2, max_size=8))
    return deps, sync, takes_x, handlers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=_graphs())
async def test_a_plan_is_the_one_a_fresh_container_compiles(
    graph: tuple[list[list[int]], set[int], set[int], list[list[int]]],
) -> None:
    deps, sync, takes_x, uses = graph
    resolvers = _resolvers(deps, sync, takes_x)
    handlers = [_handler(resolvers, u, f"h{k}") for k, u in enumerate(uses)]
    shared = Container()
    plans = [shared.compile(h) for h in handlers]
    plans += [shared.compile(h) for h in reversed(handlers)]  # cached: the same plans
    for handler, plan in zip([*handlers, *reversed(handlers)], plans, strict=True):
        assert _shape(plan) == _shape(Container().compile(handler))
    async with shared:
        for k, handler in enumerate(handlers):
            assert await shared.run(handler, x=k) == _value(deps, takes_x, uses[k], k)


def test_sub_graphs_compiled_before_are_joined_each_resolver_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A handler over resolvers earlier plans compiled, whose sub-graphs overlap, takes
    their steps as they are: nothing read but itself, nothing expanded, no step made, and
    each step once, in the order a walk gives."""
    import resolvent._graph.compiler as compiler_module
    import resolvent._graph.steps as steps_module

    # r3 and r4 share r1 and r0; r5 stands alone; r2 is reached through r4 only.
    deps = [[], [0], [1], [0, 1], [1, 2], []]
    resolvers = _resolvers(deps, set(), set())
    earlier = [_handler(resolvers, [j], f"uses_r{j}") for j in (3, 4, 5)]
    handler = _handler(resolvers, [5, 4, 3, 1], "handler")
    container = Container()
    for h in earlier:
        container.compile(h)

    made: list[Any] = []
    expanded: list[Any] = []
    real_step, real_expand = steps_module.Step, compiler_module._Compiler.expand
    monkeypatch.setattr(steps_module, "Step", lambda *a: made.append(a) or real_step(*a))
    monkeypatch.setattr(
        compiler_module._Compiler,
        "expand",
        lambda self, key: expanded.append(key) or real_expand(self, key),
    )
    plan = container.compile(handler)
    monkeypatch.undo()

    assert made == [] and expanded == []
    r0, r1, r2, r3, r4, r5 = resolvers
    assert [s.fn for s in plan.steps] == [r5, r0, r1, r2, r4, r3]
    assert _shape(plan) == _shape(Container().compile(handler))
    assert {s.scope for s in plan.steps} == {Scope.CALL} == set(plan.scopes)


async def test_handlers_that_write_a_parameter_alike_or_not_each_get_their_own() -> None:
    """Handlers that write a parameter alike share its reading; one that names the same
    resolver's value otherwise, or gives the name another type or resolver, gets its
    own."""

    async def one() -> int:
        return 1

    async def two() -> int:
        return 2

    async def a(x: str, v: Annotated[int, Resolve(one)]) -> tuple[Any, ...]:
        return x, v

    async def b(x: str, v: Annotated[int, Resolve(one)]) -> tuple[Any, ...]:
        return x, v

    async def c(y: int, w: Annotated[int, Resolve(one)]) -> tuple[Any, ...]:
        return y, w

    async def d(x: int, v: Annotated[int, Resolve(two)]) -> tuple[Any, ...]:
        return x, v

    container = Container()
    async with container:
        assert await container.run(a, x="a") == ("a", 1)
        assert await container.run(b, x="b") == ("b", 1)
        assert await container.run(c, y=3) == (3, 1)
        assert await container.run(d, x=4) == (4, 2)
    assert container.compile(c).arguments == ("y",)
    assert [i.name for i in container.compile(c).inputs] == ["w"]


def _compiled(container: Container, handler: Any) -> tuple[str, Any]:
    """What compiling *handler* gives: its plan's shape, or the error's text."""
    try:
        return "plan", _shape(container.compile(handler))
    except Exception as exc:  # the same mistake, said the same way
        return type(exc).__name__, str(exc)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=_graphs(), data=st.data())
def test_a_plan_after_registrations_and_marks_is_the_one_a_fresh_container_compiles(
    graph: tuple[list[list[int]], set[int], set[int], list[list[int]]], data: st.DataObject
) -> None:
    """A handler's parameters checked against their resolvers by earlier plans are
    checked again once a registration or an `inline` mark changes what those resolvers
    are: the plan (or the error) is the one a fresh container gives."""
    from resolvent import inline

    deps, sync, takes_x, uses = graph
    n = len(deps)
    lasting = data.draw(st.sets(st.integers(0, n - 1), max_size=2), label="registered APP")
    marked = data.draw(
        st.sets(st.sampled_from(sorted(sync)), max_size=2) if sync else st.just(set())
    )
    resolvers = _resolvers(deps, sync, takes_x)
    # Each handler twice: the later copies' parameters are the same records, which the
    # first copies' plans checked; one later copy is compiled before the marks too.
    handlers = [_handler(resolvers, u, f"h{k}") for k, u in enumerate(uses)]
    again = [_handler(resolvers, u, f"again{k}") for k, u in enumerate(uses)]
    shared = Container()
    for handler in [*handlers, *again[:1]]:
        assert _compiled(shared, handler)[0] == "plan"
    for i in lasting:
        shared.provide(resolvers[i], scope=Scope.APP)
    for i in marked:
        inline(resolvers[i])
    for handler in again:
        fresh = Container()
        for i in lasting:
            fresh.provide(resolvers[i], scope=Scope.APP)
        assert _compiled(shared, handler) == _compiled(fresh, handler)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=_graphs(), data=st.data())
def test_a_plan_inside_and_after_an_override_is_the_one_a_fresh_container_compiles(
    graph: tuple[list[list[int]], set[int], set[int], list[list[int]]], data: st.DataObject
) -> None:
    """Parameters an earlier plan checked and took whole are not taken so while an
    override replaces a resolver: inside the block a plan is the one a fresh container
    compiles inside the same override, and after it the one a fresh container compiles."""
    deps, sync, takes_x, uses = graph
    target = data.draw(st.integers(0, len(deps) - 1), label="replaced")
    resolvers = _resolvers(deps, sync, takes_x)
    handlers = [_handler(resolvers, u, f"h{k}") for k, u in enumerate(uses)]
    again = [_handler(resolvers, u, f"again{k}") for k, u in enumerate(uses)]

    async def fake() -> int:
        return -1

    shared = Container()
    for handler in handlers:
        assert _compiled(shared, handler)[0] == "plan"
    for handler in again:
        fresh = Container()
        with shared.override(resolvers[target], fake), fresh.override(resolvers[target], fake):
            assert _compiled(shared, handler) == _compiled(fresh, handler)
        assert _compiled(shared, handler) == _compiled(Container(), handler)
