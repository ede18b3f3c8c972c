"""The compiled Plan: immutable, cached, readable, renderable; and deep graphs."""

import dataclasses
import sys
from typing import Annotated, Any

import anyio
import pytest

from resolvent import Container, InvalidSignature, Plan, Resolve, Scope


class Ctx:
    pass


def sample(container: Container) -> Any:
    @container.provider(scope=Scope.APP)
    async def settings() -> str:
        return "dsn"

    def user(user_id: str, s: Annotated[str, Resolve(settings)]) -> str:
        return f"{user_id}@{s}"

    async def audit(ctx: Ctx, u: Annotated[str, Resolve(user)]) -> str:
        return u

    async def handler(
        user_id: str, a: Annotated[str, Resolve(audit)], u: Annotated[str, Resolve(user)]
    ) -> str:
        return a

    return handler


def test_plan_is_frozen() -> None:
    container = Container(values=(Ctx,))
    plan = container.compile(sample(container))
    assert isinstance(plan, Plan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.steps = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.steps[0].scope = Scope.CALL  # type: ignore[misc]
    assert isinstance(plan.steps, tuple)
    assert isinstance(plan.inputs, tuple)


def test_a_plan_and_a_reading_are_frozen_once_made() -> None:
    """A plan and a function's reading are made by plain assignment, then frozen: what
    anyone gets refuses assignment and deletion, and is of the class it says."""
    from resolvent._graph.registry import Provider
    from resolvent._reading.signature import FunctionInfo, read_function

    container = Container(values=(Ctx,))
    handler = sample(container)
    plan = container.compile(handler)
    reading = read_function(handler)
    provider = Provider(reading, Scope.APP, False)
    assert (type(plan), type(reading), type(provider)) == (Plan, FunctionInfo, Provider)
    assert (provider.name, provider.scope) == (reading.name, Scope.APP)
    for record, field in ((plan, "name"), (reading, "name"), (provider, "scope")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, field, "changed")
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(record, field)


def test_a_plan_and_a_reading_have_every_field_set_once_made() -> None:
    """Made field by field (not by a constructor), a plan and a reading have each of
    their slots set, caches included: a slot added later and not set where they are made
    would raise AttributeError on its first read, here rather than in a user's call."""
    from resolvent._graph.plan import replaced
    from resolvent._reading.signature import FunctionInfo, read_function

    container = Container(values=(Ctx,))
    handler = sample(container)
    plan = container.compile(handler)
    for record in (plan, replaced(plan, name="copy"), read_function(handler)):
        slots = [n for cls in type(record).__mro__ for n in getattr(cls, "__slots__", ())]
        unset = [n for n in slots if n != "__weakref__" and not hasattr(record, n)]
        assert unset == [], f"{type(record).__name__} made without {unset}"
    assert FunctionInfo.__slots__ and Plan.__slots__


def test_plan_is_cached_per_function() -> None:
    container = Container(values=(Ctx,))
    handler = sample(container)
    assert container.compile(handler) is container.compile(handler)


def test_registering_a_provider_recompiles() -> None:
    container = Container(values=(Ctx,))
    handler = sample(container)
    before = container.compile(handler)

    @container.provider()
    async def unrelated() -> bytes:
        return b""

    after = container.compile(handler)
    assert after is not before
    assert container.compile(handler) is after


DESCRIBED = """\
plan for handler(user_id): 3 step(s)
    1. settings  APP     async function
    2. user      CALL    function (thread)
         user_id <- call argument 'user_id'
         s <- step 1 (settings)
    3. audit     CALL    async function
         ctx <- framework value Ctx
         u <- step 2 (user)
  -> handler
         a <- step 3 (audit)
         u <- step 2 (user)"""


def test_describe_lists_steps_in_order_with_scope_and_sources() -> None:
    container = Container(values=(Ctx,))
    plan = container.compile(sample(container))
    prefix = "test_core_plan.sample.<locals>."
    text = plan.describe().replace(prefix, "")
    # The qualified names are padded to one width; compare with the padding normalised.
    assert [" ".join(line.split()) for line in text.splitlines()] == [
        " ".join(line.split()) for line in DESCRIBED.splitlines()
    ]


def test_mermaid_and_dot_contain_every_step() -> None:
    container = Container(values=(Ctx,))
    plan = container.compile(sample(container))
    mermaid = plan.to_mermaid()
    dot = plan.to_dot()
    assert mermaid.startswith("flowchart")
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    for step in plan.steps:
        assert f"s{step.index}[" in mermaid
        assert step.name in mermaid
        assert f"s{step.index} [label=" in dot
        assert step.name in dot
    assert "user_id" in mermaid and "user_id" in dot


async def test_source_is_the_generated_code_that_runs() -> None:
    container = Container(values=(Ctx,))
    plan = container.compile(sample(container))
    source = plan.source()
    assert "async def run(" in source
    assert "async def resolve(" in source
    compile(source, "<check>", "exec")  # valid Python
    assert plan.source() == plan.source()
    assert "async def run(" in plan.source() and "async def resolve(" in plan.source()


def test_ten_thousand_node_chain_at_default_recursion_limit() -> None:
    assert sys.getrecursionlimit() == 1000  # the interpreter default; nothing raised it
    container = Container()
    fns: list[Any] = []

    async def first() -> int:
        return 0

    fns.append(first)
    for _ in range(9_999):
        prev = fns[-1]

        async def step(x: Annotated[int, Resolve(prev)]) -> int:
            return x + 1

        fns.append(step)
    last = fns[-1]

    async def handler(v: Annotated[int, Resolve(last)]) -> int:
        return v

    plan = container.compile(handler)
    assert len(plan.steps) == 10_000
    assert plan.steps[0].fn is first
    assert sys.getrecursionlimit() == 1000
    assert anyio.run(container.run, handler) == 9_999
    assert len(plan.describe().splitlines()) > 10_000
    assert sys.getrecursionlimit() == 1000


def test_ten_thousand_node_cycle_is_reported_without_recursion() -> None:
    container = Container()

    async def first(x: int) -> int:
        return x

    fns: list[Any] = [first]
    for _ in range(9_999):
        prev = fns[-1]

        async def step(x: Annotated[int, Resolve(prev)]) -> int:
            return x

        fns.append(step)
    last = fns[-1]
    first.__annotations__["x"] = Annotated[int, Resolve(last)]  # close the loop

    async def handler(v: Annotated[int, Resolve(last)]) -> int:
        return v

    with pytest.raises(InvalidSignature, match="dependency cycle") as info:
        container.compile(handler)
    assert str(info.value).count(" -> ") >= 10_000


def test_thread_steps_stay_adjacent_when_a_loop_step_becomes_ready_between_them() -> None:
    # d (async) becomes ready once a (sync) has run; c (sync) is ready too: running c
    # right after a keeps both in one worker-thread hop.
    def a() -> int:
        return 1

    async def d(x: Annotated[int, Resolve(a)]) -> int:
        return x

    def c() -> int:
        return 2

    async def handler(x: Annotated[int, Resolve(d)], y: Annotated[int, Resolve(c)]) -> int:
        return x + y

    container = Container()
    order = [step.fn.__name__ for step in container.compile(handler).steps]
    assert order == ["a", "c", "d"]
    run_source = container.compile(handler).source().partition("async def resolve(")[0]
    assert run_source.count("await in_thread(") + run_source.count("await to_thread(") == 1
