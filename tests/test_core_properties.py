"""Property tests over random resolver graphs.

A random DAG of up to 30 resolvers, with scopes that respect lifetimes, random kinds
(async, worker-thread sync, inline sync, async and sync generators), some taking the
call argument ``x``. Every mode must agree with a direct recursive evaluation, run each
resolver once per scope instance, run each after its dependencies, and close every
resource it opened.
"""

import inspect
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resolvent import Container, Resolve, Scope

KINDS = ("async", "sync", "inline", "agen", "gen")
MOD = 1_000_003
SESSIONS = 2
CALLS = 2


@dataclass
class Node:
    scope: Scope
    kind: str
    deps: tuple[int, ...]
    uses_x: bool
    registered: bool
    annotated: bool


@dataclass
class Graph:
    nodes: list[Node]
    roots: tuple[tuple[int, ...], tuple[int, ...]]


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    n = draw(st.integers(1, 30))
    nodes: list[Node] = []
    for i in range(n):
        scope = draw(st.sampled_from([Scope.APP, Scope.SESSION, Scope.CALL]))
        # Lifetime rule: depend only on resolvers that live at least as long.
        allowed = [j for j in range(i) if nodes[j].scope >= scope]
        deps = tuple(sorted(draw(st.sets(st.sampled_from(allowed), max_size=4)))) if allowed else ()
        kind = draw(st.sampled_from(KINDS))
        uses_x = scope is Scope.CALL and draw(st.booleans())
        # Unregistered resolvers are CALL-scoped and run in a worker thread if sync.
        registered = scope is not Scope.CALL or kind == "inline" or draw(st.booleans())
        annotated = draw(st.booleans())
        nodes.append(Node(scope, kind, deps, uses_x, registered, annotated))
    root_a = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=5))))
    root_b = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=5))))
    return Graph(nodes, (root_a, root_b))


def expected_value(graph: Graph, i: int, x: int, memo: dict[int, int]) -> int:
    """Direct evaluation, iterative (deps always have smaller indices)."""
    for j in range(i + 1):
        if j not in memo:
            node = graph.nodes[j]
            total = sum(memo[d] for d in node.deps)
            memo[j] = (j * 7 + 31 * total + (x * 101 if node.uses_x else 0)) % MOD
    return memo[i]


def reachable(graph: Graph, roots: tuple[int, ...]) -> set[int]:
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(graph.nodes[i].deps)
    return seen


@dataclass
class Tracker:
    """What ran, and in which scope instance; checks dependency order as it goes."""

    call: int = 0
    session: int = 0
    runs: dict[int, int] = field(default_factory=dict[int, int])
    done_in: dict[int, tuple[int, int]] = field(default_factory=dict[int, tuple[int, int]])
    opened: int = 0
    closed: int = 0
    errors: list[str] = field(default_factory=list[str])

    def start(self, graph: Graph, i: int) -> None:
        self.runs[i] = self.runs.get(i, 0) + 1
        for d in graph.nodes[i].deps:
            where = self.done_in.get(d)
            scope = graph.nodes[d].scope
            if (
                where is None
                or (scope is Scope.SESSION and where[0] != self.session)
                or (scope is Scope.CALL and where[1] != self.call)
            ):
                self.errors.append(f"node {i} started before its dependency {d}")

    def finish(self, i: int) -> None:
        self.done_in[i] = (self.session, self.call)


def build(graph: Graph, container: Container, tracker: Tracker) -> list[Any]:
    fns: list[Any] = []
    for i, node in enumerate(graph.nodes):
        fn = make_resolver(graph, i, node, fns, tracker)
        fns.append(fn)
        if node.registered:
            container.provide(fn, scope=node.scope, inline=node.kind == "inline")
    return fns


def make_resolver(graph: Graph, i: int, node: Node, fns: list[Any], tracker: Tracker) -> Any:
    def compute(kw: dict[str, Any]) -> int:
        tracker.start(graph, i)
        total = sum(kw[f"d{d}"] for d in node.deps)
        value = (i * 7 + 31 * total + (kw["x"] * 101 if node.uses_x else 0)) % MOD
        tracker.finish(i)
        return value

    if node.kind == "async":

        async def resolver(**kw: Any) -> Any:
            return compute(kw)

        returns: Any = int
    elif node.kind in ("sync", "inline"):

        def resolver(**kw: Any) -> Any:
            return compute(kw)

        returns = int
    elif node.kind == "agen":

        async def resolver(**kw: Any) -> Any:
            tracker.opened += 1
            yield compute(kw)
            tracker.closed += 1

        returns = AsyncIterator[int]
    else:

        def resolver(**kw: Any) -> Any:
            tracker.opened += 1
            yield compute(kw)
            tracker.closed += 1

        returns = Iterator[int]

    params = [
        inspect.Parameter(
            f"d{d}", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[int, Resolve(fns[d])]
        )
        for d in node.deps
    ]
    if node.uses_x:
        params.append(inspect.Parameter("x", inspect.Parameter.KEYWORD_ONLY, annotation=int))
    resolver.__qualname__ = resolver.__name__ = f"node{i}"
    resolver.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    annotations = {p.name: p.annotation for p in params}
    if node.annotated or node.kind in ("agen", "gen"):
        annotations["return"] = returns
    resolver.__annotations__ = annotations
    return resolver


def make_root(fns: list[Any], deps: tuple[int, ...], name: str) -> Any:
    async def root(x: int, **kw: Any) -> dict[int, int]:
        return {d: kw[f"d{d}"] for d in deps}

    params = [inspect.Parameter("x", inspect.Parameter.KEYWORD_ONLY, annotation=int)]
    params += [
        inspect.Parameter(
            f"d{d}", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[int, Resolve(fns[d])]
        )
        for d in deps
    ]
    root.__qualname__ = root.__name__ = name
    root.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    root.__annotations__ = {p.name: p.annotation for p in params}
    return root


def expected_runs(graph: Graph, reach: set[int]) -> dict[int, int]:
    per_scope = {Scope.APP: 1, Scope.SESSION: SESSIONS, Scope.CALL: SESSIONS * CALLS}
    return {i: per_scope[graph.nodes[i].scope] for i in reach}


def expected_results(graph: Graph, roots: tuple[int, ...], x: int) -> dict[int, int]:
    """Values for call argument *x*; APP/SESSION values come from their first call."""
    return {d: expected_value(graph, d, x, {}) for d in roots}


PROPERTY = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def check_values(graph: Graph, result: dict[int, int], roots: tuple[int, ...], x: int) -> None:
    # APP and SESSION values never depend on x (only CALL resolvers take it), so one
    # direct evaluation with this call's x gives every expected value.
    assert result == expected_results(graph, roots, x)


async def run_mode(graph: Graph, mode: str) -> None:
    tracker = Tracker()
    container = Container(concurrent=mode == "concurrent")
    fns = build(graph, container, tracker)
    root_a = make_root(fns, graph.roots[0], "root_a")
    root_b = make_root(fns, graph.roots[1], "root_b")
    needs_session = any(
        graph.nodes[i].scope is Scope.SESSION for i in reachable(graph, graph.roots[0])
    )
    async with container:
        for s in range(SESSIONS):
            tracker.session = s
            async with container.session() as session:
                for _ in range(CALLS):
                    tracker.call += 1
                    x = tracker.call * 10 + s
                    if mode == "reuse":
                        async with session.call() as call:
                            a = await call.run(root_a, x=x)
                            b = await call.run(root_b, x=x)
                        check_values(graph, a, graph.roots[0], x)
                        check_values(graph, b, graph.roots[1], x)
                    else:
                        if needs_session:
                            a = await session.run(root_a, x=x)
                        else:
                            a = await container.run(root_a, x=x)
                        check_values(graph, a, graph.roots[0], x)
    assert tracker.errors == []
    reach = reachable(graph, graph.roots[0])
    if mode == "reuse":
        reach |= reachable(graph, graph.roots[1])
    assert tracker.runs == expected_runs(graph, reach)
    assert tracker.opened == tracker.closed


@PROPERTY
@given(graph=graphs())
async def test_generated_fast_path_matches_direct_evaluation(graph: Graph) -> None:
    await run_mode(graph, "generated")


@PROPERTY
@given(graph=graphs())
async def test_concurrent_interpreter_matches_direct_evaluation(graph: Graph) -> None:
    await run_mode(graph, "concurrent")


@PROPERTY
@given(graph=graphs())
async def test_call_scope_reused_for_two_plans_matches_direct_evaluation(graph: Graph) -> None:
    await run_mode(graph, "reuse")
