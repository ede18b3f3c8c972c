"""Overrides are scoped to the task that enters them, nest, interleave, and clean up.

Written the way a test suite uses them: the ``resolvent_override`` fixture (possibly
called twice), nested ``with container.override(...)`` blocks, and two concurrent tasks
each with an override of its own.
"""

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
import pytest

from resolvent import Container, Resolve, Scope
from resolvent.testing import Override

MODES = [
    pytest.param({}, id="generated"),
    pytest.param({"concurrent": True}, id="concurrent"),
    pytest.param({"call_timeout": 5.0}, id="call_timeout"),
]


@dataclass
class Db:
    name: str


def make_container(**options: Any) -> tuple[Container, dict[str, int], Any, Any, Any]:
    container = Container(**options)
    built: dict[str, int] = {}

    @container.provider(scope=Scope.APP)
    async def db() -> Db:
        built["real"] = built.get("real", 0) + 1
        return Db("real")

    @container.provider(scope=Scope.APP)
    async def mailer() -> str:
        return "smtp"

    async def handler(
        d: Annotated[Db, Resolve(db)], m: Annotated[str, Resolve(mailer)]
    ) -> tuple[str, str]:
        return d.name, m

    return container, built, db, mailer, handler


@pytest.mark.parametrize("options", MODES)
async def test_fixture_twice_keeps_the_first_fake(
    options: dict[str, Any], resolvent_override: Override
) -> None:
    container, built, db, mailer, handler = make_container(**options)

    async def fake_db() -> Db:
        built["fake"] = built.get("fake", 0) + 1
        return Db("fake")

    async def fake_mailer() -> str:
        return "outbox"

    async with container:
        resolvent_override(container, db, fake_db)
        assert await container.run(handler) == ("fake", "smtp")
        resolvent_override(container, mailer, fake_mailer)  # unrelated: fake_db stays
        assert await container.run(handler) == ("fake", "outbox")
        with container.override(mailer, fake_mailer):  # nested, same again
            assert await container.run(handler) == ("fake", "outbox")
        assert await container.run(handler) == ("fake", "outbox")
    assert built == {"fake": 1}


@pytest.mark.parametrize("options", MODES)
async def test_nested_block_restores_exactly_the_outer_fake(options: dict[str, Any]) -> None:
    container, built, db, _mailer, handler = make_container(**options)
    seen: list[Db] = []

    async def outer() -> Db:
        return Db("outer")

    async def inner() -> Db:
        return Db("inner")

    async def capture(d: Annotated[Db, Resolve(db)]) -> None:
        seen.append(d)

    async with container:
        with container.override(db, outer):
            await container.run(capture)
            with container.override(db, inner):
                assert await container.run(handler) == ("inner", "smtp")
            await container.run(capture)
            assert seen[0] is seen[1]  # the outer fake was not rebuilt
        assert await container.run(handler) == ("real", "smtp")
    assert built == {"real": 1}


@pytest.mark.parametrize("options", MODES)
async def test_two_tasks_each_see_their_own_override(options: dict[str, Any]) -> None:
    container, _built, db, _mailer, handler = make_container(**options)
    a_entered, b_entered, a_left = anyio.Event(), anyio.Event(), anyio.Event()
    results: dict[str, Any] = {}

    async def fake_a() -> Db:
        return Db("a")

    async def fake_b() -> Db:
        return Db("b")

    async def task_a() -> None:
        with container.override(db, fake_a):
            a_entered.set()
            await b_entered.wait()
            results["a"] = await container.run(handler)
        a_left.set()

    async def task_b() -> None:
        await a_entered.wait()
        with container.override(db, fake_b):
            b_entered.set()
            await a_left.wait()  # blocks interleave: a leaves first
            results["b"] = await container.run(handler)
        results["after"] = await container.run(handler)

    async with container:
        async with anyio.create_task_group() as tg:
            tg.start_soon(task_a)
            tg.start_soon(task_b)
        assert await container.run(handler) == ("real", "smtp")
    assert results == {"a": ("a", "smtp"), "b": ("b", "smtp"), "after": ("real", "smtp")}


@pytest.mark.parametrize("options", MODES)
async def test_a_hot_plan_meets_a_block_open_in_another_task(options: dict[str, Any]) -> None:
    # `run` starts a hot plan with one lookup; a block open in any task must still
    # reach its own task's calls, and only those, and the plan is hot again after it.
    container, _built, db, _mailer, handler = make_container(**options)
    entered, checked = anyio.Event(), anyio.Event()
    inside: list[Any] = []

    async def fake() -> Db:
        return Db("fake")

    async def overriding() -> None:
        with container.override(db, fake):
            inside.append(await container.run(handler))
            entered.set()
            await checked.wait()
            inside.append(await container.run(handler))

    async with container:
        for _ in range(4):  # hot: its code generated, `run` starts it directly
            assert await container.run(handler) == ("real", "smtp")
        async with anyio.create_task_group() as tg:
            tg.start_soon(overriding)
            await entered.wait()
            assert await container.run(handler) == ("real", "smtp")  # no block here
            checked.set()
        assert await container.run(handler) == ("real", "smtp")
    assert inside == [("fake", "smtp")] * 2


async def test_override_reaches_tasks_the_block_starts() -> None:
    container, _built, db, _mailer, handler = make_container()
    seen: list[Any] = []

    async def fake() -> Db:
        return Db("fake")

    async with container:
        with container.override(db, fake):
            async with anyio.create_task_group() as tg:

                async def child() -> None:
                    seen.append(await container.run(handler))

                tg.start_soon(child)
        seen.append(await container.run(handler))
    assert seen == [("fake", "smtp"), ("real", "smtp")]


class Clock:
    def now(self) -> str:
        return "real time"


class FrozenClock(Clock):
    def now(self) -> str:
        return "noon"


@pytest.mark.parametrize("options", MODES)
async def test_an_unregistered_class_can_be_overridden(options: dict[str, Any]) -> None:
    container = Container(**options)

    async def handler(clock: Annotated[Clock, Resolve(Clock)]) -> str:
        return clock.now()

    assert await container.run(handler) == "real time"
    with container.override(Clock, FrozenClock):
        assert await container.run(handler) == "noon"
    assert await container.run(handler) == "real time"


@pytest.mark.parametrize("options", MODES)
async def test_replacement_resources_close_when_the_block_exits(options: dict[str, Any]) -> None:
    container, _built, db, _mailer, handler = make_container(**options)
    open_now: list[int] = []
    opened = 0

    async def fake_db() -> AsyncIterator[Db]:
        nonlocal opened
        opened += 1
        open_now.append(opened)
        yield Db("fake")
        open_now.pop()

    def sync_fake_db() -> Iterator[Db]:
        open_now.append(-1)
        yield Db("sync fake")
        open_now.remove(-1)

    async with container:
        for _ in range(50):
            async with container.override(db, fake_db):
                assert await container.run(handler) == ("fake", "smtp")
                assert len(open_now) == 1
            assert open_now == []
        with container.override(db, sync_fake_db):  # plain `with`: sync resources close
            assert await container.run(handler) == ("sync fake", "smtp")
            assert open_now == [-1]
        assert open_now == []
        assert await container.run(handler) == ("real", "smtp")
    assert opened == 50


async def test_session_values_of_a_replacement_close_with_the_block() -> None:
    container = Container()
    closed: list[str] = []

    @container.provider(scope=Scope.SESSION)
    async def tenant() -> AsyncIterator[str]:
        yield "real"

    async def fake_tenant() -> AsyncIterator[str]:
        yield "fake"
        closed.append("fake")

    async def handler(t: Annotated[str, Resolve(tenant)]) -> str:
        return t

    async with container, container.session() as session:
        async with container.override(tenant, fake_tenant):
            assert await session.run(handler) == "fake"
            assert await session.run(handler) == "fake"
        assert closed == ["fake"]
        assert await session.run(handler) == "real"


async def test_precompiled_plan_follows_the_block() -> None:
    container, _built, db, _mailer, handler = make_container()
    plan = container.compile(handler)

    async def fake() -> Db:
        return Db("fake")

    async with container:
        with container.override(db, fake):
            async with container.call() as call:
                assert await call.run(plan) == ("fake", "smtp")
        async with container.call() as call:
            assert await call.run(plan) == ("real", "smtp")


@pytest.mark.parametrize("options", MODES)
async def test_a_spy_wraps_the_original(options: dict[str, Any]) -> None:
    container, built, db, _mailer, handler = make_container(**options)
    calls: list[str] = []

    async def spy_db(real: Annotated[Db, Resolve(db)]) -> Db:
        calls.append(real.name)
        return Db(f"spied {real.name}")

    async with container:
        with container.override(db, spy_db):
            assert await container.run(handler) == ("spied real", "smtp")
            assert await container.run(handler) == ("spied real", "smtp")
        assert await container.run(handler) == ("real", "smtp")
    assert calls == ["real"]  # the spy keeps db's APP scope: built once in the block
    assert built == {"real": 1}  # and the original value is the shared one


async def test_blocks_left_out_of_order_keep_the_other_block() -> None:
    container, _built, db, mailer, handler = make_container()

    async def fake_db() -> Db:
        return Db("fake")

    async def fake_mailer() -> str:
        return "outbox"

    first = container.override(db, fake_db)
    second = container.override(mailer, fake_mailer)
    async with container:
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)  # the outer block ends first
        assert await container.run(handler) == ("real", "outbox")
        second.__exit__(None, None, None)
        assert await container.run(handler) == ("real", "smtp")
