"""An override's async replacement resources close when it is left, or are refused.

A plain ``with container.override(...)`` cannot await: an async APP/SESSION resource built
from its replacement used to stay open until the container closed (1,000 blocks, 1,000
open fakes). Now such a resource is refused before it opens, with the fix (``async with``),
and the ``resolvent_override`` fixture of an anyio test closes what it built at teardown,
awaited. Written the way a pytest suite with nested fixtures uses them.
"""

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import pytest

from inner_pytest import run_pytest
from resolvent import Container, Resolve, ResolventError, Scope
from snapshot import assert_snapshot

MODES = [
    pytest.param({}, id="generated"),
    pytest.param({"concurrent": True}, id="concurrent"),
    pytest.param({"call_timeout": 5.0}, id="call_timeout"),
]

container = Container()


@container.provider(scope=Scope.APP)
async def pool() -> AsyncIterator[str]:
    yield "real pool"


async def fake_pool() -> AsyncIterator[str]:
    yield "fake pool"


async def handler(p: Annotated[str, Resolve(pool)]) -> str:
    return p


async def test_a_plain_with_refuses_an_async_shared_replacement(anyio_backend: str) -> None:
    async with container:
        with container.override(pool, fake_pool), pytest.raises(ResolventError) as info:
            await container.run(handler)
        assert await container.run(handler) == "real pool"  # nothing was left behind
    message = str(info.value).replace(f"{__name__}.", "")
    assert_snapshot("override_plain_with_async_resource", message)


@pytest.mark.parametrize("options", MODES)
async def test_async_with_closes_what_the_replacement_opened(options: dict[str, Any]) -> None:
    c = Container(**options)
    open_now: list[str] = []

    @c.provider(scope=Scope.SESSION)
    async def tenant() -> AsyncIterator[str]:
        yield "real"

    @asynccontextmanager
    async def fake_tenant() -> AsyncIterator[str]:
        open_now.append("fake")
        yield "fake"
        open_now.remove("fake")

    async def who(t: Annotated[str, Resolve(tenant)]) -> str:
        return t

    async with c, c.session() as session:
        for _ in range(20):
            async with c.override(tenant, fake_tenant):
                assert await session.run(who) == "fake"
                assert open_now == ["fake"]
            assert open_now == []
        assert await session.run(who) == "real"


@pytest.mark.parametrize("options", MODES)
async def test_a_dependent_async_resource_is_refused_too(options: dict[str, Any]) -> None:
    # Only the settings are replaced, but the APP client is rebuilt from the fake ones.
    c = Container(**options)

    @c.provider(scope=Scope.APP)
    async def settings() -> str:
        return "prod"

    @c.provider(scope=Scope.APP)
    async def client(s: Annotated[str, Resolve(settings)]) -> AsyncIterator[str]:
        yield f"client({s})"

    async def fake_settings() -> str:
        return "test"

    async def use(cl: Annotated[str, Resolve(client)]) -> str:
        return cl

    async with c:
        with c.override(settings, fake_settings), pytest.raises(ResolventError, match="async with"):
            await c.run(use)
        async with c.override(settings, fake_settings):
            assert await c.run(use) == "client(test)"
        assert await c.run(use) == "client(prod)"


@pytest.mark.parametrize("options", MODES)
async def test_a_plain_with_keeps_working_for_what_it_can_close(options: dict[str, Any]) -> None:
    c = Container(**options)
    log: list[str] = []

    @c.provider(scope=Scope.APP)
    def connection() -> Iterator[str]:
        yield "real"

    @c.provider  # CALL scope: closed at the end of every call anyway
    async def request_id() -> AsyncIterator[str]:
        yield "real-id"

    def fake_connection() -> Iterator[str]:
        log.append("open")
        yield "fake"
        log.append("close")

    async def fake_request_id() -> AsyncIterator[str]:
        yield "fake-id"
        log.append("id closed")

    async def use(
        conn: Annotated[str, Resolve(connection)], rid: Annotated[str, Resolve(request_id)]
    ) -> str:
        return f"{conn}/{rid}"

    async with c:
        with c.override(connection, fake_connection), c.override(request_id, fake_request_id):
            assert await c.run(use) == "fake/fake-id"
            assert log == ["open", "id closed"]
        assert log == ["open", "id closed", "close"]
        assert await c.run(use) == "real/real-id"


NESTED_FIXTURES = """
from collections.abc import AsyncIterator
from typing import Annotated

import pytest

from resolvent import Container, Resolve, Scope

container = Container()
closed: list[str] = []


@container.provider(scope=Scope.APP)
async def pool() -> AsyncIterator[str]:
    yield "real"


async def fake_pool() -> AsyncIterator[str]:
    try:
        yield "fake"
    finally:
        closed.append("fake")


async def handler(p: Annotated[str, Resolve(pool)]) -> str:
    return p


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


@pytest.fixture
async def app(request):
    closed.clear()
    async with container:
        yield container
        if "resolvent_override" in request.fixturenames:  # its teardown ran before this one
            assert closed == ["fake"], "the fake must be closed while the app is still open"


@pytest.fixture
def faked(app, resolvent_override):  # a sync fixture nested on an async one
    resolvent_override(app, pool, fake_pool)
    return app


@pytest.mark.anyio
async def test_uses_the_fake(faked):
    assert await faked.run(handler) == "fake"
    assert await faked.run(handler) == "fake"
    assert closed == []


@pytest.mark.anyio
async def test_the_fixture_called_from_the_test_body(app, resolvent_override):
    resolvent_override(app, pool, fake_pool)
    assert await app.run(handler) == "fake"


@pytest.mark.anyio
async def test_other_tests_see_the_real_one(app):
    assert await app.run(handler) == "real"


@pytest.fixture
async def plain_faked(app):
    with app.override(pool, fake_pool):
        yield app


@pytest.mark.anyio
async def test_a_plain_with_fixture_says_how_to_fix_it(plain_faked):
    from resolvent import ResolventError

    with pytest.raises(ResolventError, match="fix: `async with container.override"):
        await plain_faked.run(handler)
    assert closed == []
"""


def test_nested_fixtures_close_the_fake_at_teardown_on_both_backends(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, "test_nested.py", NESTED_FIXTURES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "8 passed" in result.stdout, result.stdout + result.stderr
