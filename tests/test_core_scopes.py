"""Scopes: lifetimes, memoization per scope instance, bound methods, opening and closing."""

from collections.abc import AsyncIterator
from typing import Annotated

import anyio
import pytest

from resolvent import Container, Resolve, ResolventError, Scope


def test_scope_is_ordered_by_lifetime() -> None:
    assert Scope.APP > Scope.SESSION > Scope.CALL
    assert sorted([Scope.CALL, Scope.APP, Scope.SESSION]) == [Scope.CALL, Scope.SESSION, Scope.APP]
    assert max(Scope) is Scope.APP
    assert repr(Scope.SESSION) == "Scope.SESSION"


class Counter:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def hit(self, name: str) -> int:
        self.counts[name] = self.counts.get(name, 0) + 1
        return self.counts[name]


def three_scopes(container: Container, counter: Counter):  # type: ignore[no-untyped-def]
    @container.provider(scope=Scope.APP)
    async def app_value() -> str:
        return f"app{counter.hit('app')}"

    @container.provider(scope=Scope.SESSION)
    async def session_value(a: Annotated[str, Resolve(app_value)]) -> str:
        return f"{a}/session{counter.hit('session')}"

    async def call_value(s: Annotated[str, Resolve(session_value)]) -> str:
        return f"{s}/call{counter.hit('call')}"

    async def handler(
        c: Annotated[str, Resolve(call_value)], again: Annotated[str, Resolve(call_value)]
    ) -> str:
        assert c == again
        return c

    return handler


async def test_each_value_is_computed_once_per_scope_instance() -> None:
    container = Container()
    counter = Counter()
    handler = three_scopes(container, counter)
    async with container:
        async with container.session() as s1:
            assert await s1.run(handler) == "app1/session1/call1"
            assert await s1.run(handler) == "app1/session1/call2"
        async with container.session() as s2:
            assert await s2.run(handler) == "app1/session2/call3"
            async with s2.call() as call:
                plan = container.compile(handler)
                first = await call.resolve(plan)
                second = await call.resolve(plan)
                assert (
                    first == second == {"c": "app1/session2/call4", "again": "app1/session2/call4"}
                )
    assert counter.counts == {"app": 1, "session": 2, "call": 4}
    async with container, container.session() as s3:  # a fresh APP after a full close
        assert await s3.run(handler) == "app2/session3/call5"


async def test_app_value_is_created_lazily_on_first_use() -> None:
    container = Container()
    created: list[str] = []

    @container.provider(scope=Scope.APP)
    async def app_value() -> str:
        created.append("x")
        return "x"

    async def handler(v: Annotated[str, Resolve(app_value)]) -> str:
        return v

    async with container:
        assert created == []
        assert await container.run(handler) == "x"
        assert await container.run(handler) == "x"
    assert created == ["x"]


async def test_concurrent_first_users_of_an_app_value_share_one_creation() -> None:
    container = Container()
    created: list[int] = []
    release = anyio.Event()
    started = anyio.Event()

    @container.provider(scope=Scope.APP)
    async def slow() -> int:
        created.append(1)
        started.set()
        await release.wait()
        return len(created)

    async def handler(v: Annotated[int, Resolve(slow)]) -> int:
        return v

    results: list[int] = []

    async def one() -> None:
        results.append(await container.run(handler))

    async with container, anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(one)
        await started.wait()
        release.set()
    assert created == [1]
    assert results == [1] * 5


class Service:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def load(self) -> str:
        self.log.append(self.name)
        return f"loaded {self.name}"

    def load_sync(self) -> str:
        self.log.append(f"sync {self.name}")
        return f"sync {self.name}"


async def test_bound_method_referenced_twice_runs_once() -> None:
    log: list[str] = []
    svc = Service("a", log)
    container = Container()

    async def left(v: Annotated[str, Resolve(svc.load)]) -> str:
        return v

    async def handler(
        a: Annotated[str, Resolve(svc.load)],
        b: Annotated[str, Resolve(left)],
        c: Annotated[str, Resolve(svc.load_sync)],
        d: Annotated[str, Resolve(svc.load_sync)],
    ) -> list[str]:
        return [a, b, c, d]

    assert svc.load is not svc.load  # a new bound method object on every access
    assert await container.run(handler) == ["loaded a", "loaded a", "sync a", "sync a"]
    assert log == ["a", "sync a"]
    assert len(container.compile(handler).steps) == 3


async def test_bound_methods_of_two_instances_never_collide() -> None:
    log: list[str] = []
    one, two = Service("one", log), Service("two", log)
    container = Container()

    async def handler(
        a: Annotated[str, Resolve(one.load)], b: Annotated[str, Resolve(two.load)]
    ) -> tuple[str, str]:
        return a, b

    assert await container.run(handler) == ("loaded one", "loaded two")
    assert sorted(log) == ["one", "two"]


async def test_registered_bound_method_keeps_its_scope() -> None:
    log: list[str] = []
    svc = Service("app", log)
    container = Container()
    container.provide(svc.load, scope=Scope.APP)

    async def handler(v: Annotated[str, Resolve(svc.load)]) -> str:
        return v

    async with container:
        await container.run(handler)
        await container.run(handler)
    assert log == ["app"]


async def test_run_outside_open_container_says_how_to_fix() -> None:
    container = Container()

    @container.provider(scope=Scope.APP)
    async def app_value() -> int:
        raise AssertionError("must not run")

    async def handler(v: Annotated[int, Resolve(app_value)]) -> int:
        return v

    with pytest.raises(ResolventError, match=r"async with container") as info:
        await container.run(handler)
    assert "not open" in str(info.value)
    with pytest.raises(ResolventError, match="not open"):
        async with container.call() as call:
            await call.resolve(container.compile(handler))


async def test_session_value_outside_a_session_says_how_to_fix() -> None:
    container = Container()

    @container.provider(scope=Scope.SESSION)
    async def session_value() -> int:
        raise AssertionError("must not run")

    async def handler(v: Annotated[int, Resolve(session_value)]) -> int:
        return v

    async with container:
        with pytest.raises(ResolventError, match=r"container\.session\(\)") as info:
            await container.run(handler)
        assert "session_value" in str(info.value)
        async with container.call() as call:
            with pytest.raises(ResolventError, match="outside a session"):
                await call.run(handler)


async def test_call_scoped_plan_runs_without_opening_the_container() -> None:
    container = Container()

    async def dep() -> int:
        return 1

    async def handler(v: Annotated[int, Resolve(dep)]) -> int:
        return v

    assert not container.is_open
    assert await container.run(handler) == 1


async def test_container_entries_are_reference_counted() -> None:
    container = Container()
    closed: list[int] = []
    opened: list[int] = []

    @container.provider(scope=Scope.APP)
    async def resource() -> AsyncIterator[int]:
        opened.append(1)
        yield len(opened)
        closed.append(len(opened))

    async def handler(v: Annotated[int, Resolve(resource)]) -> int:
        return v

    async with container:
        async with container:
            assert await container.run(handler) == 1
        assert container.is_open
        assert closed == []  # an inner exit does not close APP
        assert await container.run(handler) == 1
    assert not container.is_open
    assert closed == [1]
    async with container:  # re-entry after a full close: a fresh APP
        assert await container.run(handler) == 2
    assert closed == [1, 2]


async def test_concurrent_entries_close_app_at_the_last_exit() -> None:
    container = Container()
    closed: list[str] = []

    @container.provider(scope=Scope.APP)
    async def resource() -> AsyncIterator[str]:
        yield "r"
        closed.append("r")

    async def handler(v: Annotated[str, Resolve(resource)]) -> str:
        return v

    entered = [anyio.Event() for _ in range(3)]
    leave = [anyio.Event() for _ in range(3)]
    left = [anyio.Event() for _ in range(3)]

    async def connection(i: int) -> None:
        async with container:
            assert await container.run(handler) == "r"
            entered[i].set()
            await leave[i].wait()
        left[i].set()

    async with anyio.create_task_group() as group:
        for i in range(3):
            group.start_soon(connection, i)
        for event in entered:
            await event.wait()
        leave[1].set()
        await left[1].wait()
        leave[0].set()
        await left[0].wait()
        assert closed == []
        assert container.is_open
        leave[2].set()
    assert closed == ["r"]
    assert not container.is_open


async def test_session_resources_close_at_session_exit_in_reverse_order() -> None:
    container = Container()
    log: list[str] = []

    @container.provider(scope=Scope.SESSION)
    async def first() -> AsyncIterator[str]:
        log.append("open first")
        yield "first"
        log.append("close first")

    @container.provider(scope=Scope.SESSION)
    async def second(f: Annotated[str, Resolve(first)]) -> AsyncIterator[str]:
        log.append("open second")
        yield f + "+second"
        log.append("close second")

    async def handler(v: Annotated[str, Resolve(second)]) -> str:
        return v

    async with container, container.session() as session:
        assert await session.run(handler) == "first+second"
        assert await session.run(handler) == "first+second"
        log.append("session body done")
    assert log == [
        "open first",
        "open second",
        "session body done",
        "close second",
        "close first",
    ]


async def test_call_scope_reused_for_two_runs_memoizes_call_values() -> None:
    container = Container()
    runs: list[int] = []

    async def shared() -> int:
        runs.append(1)
        return len(runs)

    async def first(v: Annotated[int, Resolve(shared)]) -> int:
        return v

    async def second(v: Annotated[int, Resolve(shared)]) -> int:
        return v

    async with container.call() as call:
        assert await call.run(first) == 1
        assert await call.run(second) == 1
        assert await call.resolve(container.compile(first)) == {"v": 1}
    assert runs == [1]
