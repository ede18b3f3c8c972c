"""Overrides for tests: by function and by type, compiled plans included, nesting and
restoring, scopes, caches, and the ``resolvent_override`` pytest fixture."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated
from unittest.mock import AsyncMock, Mock

import pytest

from inner_pytest import run_pytest
from modes import MODES, make_container, run
from resolvent import Container, InvalidSignature, Resolve, Scope
from resolvent.testing import Override


class Settings:
    def __init__(self, name: str) -> None:
        self.name = name


MADE: list[str] = []


async def real_settings() -> Settings:
    MADE.append("real")
    return Settings("real")


async def fake_settings() -> Settings:
    MADE.append("fake")
    return Settings("fake")


async def other_fake() -> Settings:
    MADE.append("other")
    return Settings("other")


async def client(s: Annotated[Settings, Resolve(real_settings)]) -> str:
    MADE.append(f"client({s.name})")
    return f"client({s.name})"


async def by_function(s: Annotated[Settings, Resolve(real_settings)]) -> str:
    return s.name


async def by_type(s: Annotated[Settings, Resolve()]) -> str:
    return s.name


async def through_client(c: Annotated[str, Resolve(client)]) -> str:
    return c


@pytest.fixture(autouse=True)
def _clear() -> None:
    MADE.clear()


def app_container() -> Container:
    container = Container()
    container.provide(real_settings, scope=Scope.APP)
    container.provide(client, scope=Scope.APP)
    return container


@pytest.mark.parametrize("target", [real_settings, Settings], ids=["function", "type"])
async def test_an_override_reaches_already_compiled_plans_and_is_undone(target: object) -> None:
    container = app_container()
    plans = [container.compile(fn) for fn in (by_function, by_type)]
    async with container:
        for plan in plans:
            async with container.call() as call:
                assert (await call.resolve(plan))["s"].name == "real"
        with container.override(target, fake_settings):
            for plan in plans:
                async with container.call() as call:
                    assert (await call.resolve(plan))["s"].name == "fake"
            assert await container.run(by_function) == "fake"
            assert await container.run(by_type) == "fake"
        assert await container.run(by_function) == "real"
        assert await container.run(by_type) == "real"
    # APP scope: each made once, the original's value reused after the override
    assert MADE == ["real", "fake"]


async def test_overrides_nest_and_restore_in_order() -> None:
    container = app_container()
    async with container:
        with container.override(real_settings, fake_settings):
            assert await container.run(by_function) == "fake"
            with container.override(real_settings, other_fake):
                assert await container.run(by_function) == "other"
            assert await container.run(by_function) == "fake"
        assert await container.run(by_function) == "real"


async def test_the_replacement_keeps_the_target_scope_unless_registered_with_its_own() -> None:
    container = app_container()
    async with container:
        with container.override(Settings, fake_settings):
            for _ in range(3):
                await container.run(by_type)
        assert MADE == ["fake"]  # APP, like the target: made once
        MADE.clear()
        container.provide(other_fake, scope=Scope.CALL)
        with container.override(Settings, other_fake):
            for _ in range(3):
                await container.run(by_type)
        assert MADE == ["other"] * 3  # registered CALL-scoped: made per call


async def test_values_cached_for_the_original_are_not_used_meanwhile() -> None:
    container = app_container()
    async with container:
        assert await container.run(through_client) == "client(real)"
        with container.override(real_settings, fake_settings):
            # client depends on the overridden provider: it is made again, not reused
            assert await container.run(through_client) == "client(fake)"
            assert await container.run(through_client) == "client(fake)"
        assert await container.run(through_client) == "client(real)"
    assert MADE == ["real", "client(real)", "fake", "client(fake)"]


async def test_a_replacement_with_another_signature_is_compiled_and_validated() -> None:
    container = app_container()

    async def named(user: str) -> AsyncIterator[Settings]:
        MADE.append(f"open {user}")
        yield Settings(user)
        MADE.append(f"close {user}")

    async def handler(user: str, s: Annotated[Settings, Resolve(real_settings)]) -> str:
        return s.name

    container.provide(named, scope=Scope.CALL)  # its own scope: it needs a call argument
    async with container:
        with container.override(real_settings, named):
            assert await container.run(handler, user="ada") == "ada"
        assert MADE == ["open ada", "close ada"]

        async def unresolvable(nope: int) -> Settings:
            return Settings("x")

        with container.override(real_settings, unresolvable), pytest.raises(InvalidSignature):
            container.compile(handler)
        # A replacement that would capture a CALL value in an APP slot is refused too.
        container.provide(real_settings, scope=Scope.APP)

        async def captive(user: str) -> Settings:
            return Settings(user)

        with container.override(real_settings, captive), pytest.raises(InvalidSignature):
            container.compile(client)


async def test_an_unregistered_resolver_is_overridden_by_identity() -> None:
    async def value() -> int:
        return 1

    async def replacement() -> int:
        return 2

    async def handler(v: Annotated[int, Resolve(value)]) -> int:
        return v

    container = Container()
    assert await container.run(handler) == 1
    with container.override(value, replacement):
        assert await container.run(handler) == 2
    assert await container.run(handler) == 1


async def test_the_fixture_overrides_for_this_test(resolvent_override: Override) -> None:
    container = app_container()
    resolvent_override(container, real_settings, fake_settings)
    resolvent_override(container, Settings, other_fake)
    async with container:
        assert await container.run(by_function) == "other"


PLUGIN_TESTS = """
from typing import Annotated
from resolvent import Container, Resolve

container = Container()

def real() -> str:
    return "real"

def fake() -> str:
    return "fake"

def handler(v: Annotated[str, Resolve(real)]) -> str:
    return v

def test_overridden(resolvent_override):
    resolvent_override(container, real, fake)
    assert container.compile(handler).steps[0].fn is fake

def test_undone_after_the_test():
    assert container.compile(handler).steps[0].fn is real
"""


def test_the_plugin_is_registered_and_undoes_overrides_at_teardown(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, "test_inner.py", PLUGIN_TESTS)
    assert "2 passed" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("mode", MODES)
async def test_a_mock_replacement_is_called_with_no_arguments(
    mode: str, resolvent_override: Override
) -> None:
    # `Mock(return_value=fake)` and `AsyncMock(...)`, the usual test doubles, were refused
    # for their `*args` parameter, with a fix ("make it a regular parameter") that no
    # mock can follow. They are called with no arguments and record their calls.
    container = make_container(mode)
    container.provide(real_settings, scope=Scope.APP)
    fake = Settings("mocked")
    sync_mock = Mock(return_value=fake)
    async_mock = AsyncMock(return_value=Settings("awaited"))
    async with container:
        with container.override(real_settings, sync_mock):
            assert await run(container, by_function, mode) == "mocked"
        async with container.override(Settings, async_mock):
            assert await run(container, by_type, mode) == "awaited"
        resolvent_override(container, real_settings, async_mock)
        assert await run(container, client, mode) == "client(awaited)"
    sync_mock.assert_called_once_with()
    assert async_mock.await_count == 2
    assert "real" not in MADE
