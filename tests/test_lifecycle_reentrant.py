"""A run made while a shared value is being created, that needs that value again.

What a user writes by accident: an APP provider that warms itself up by running one of
the application's own functions through ``container.run``, and that function (or one it
runs) needs the very value being created. The value waits for the run, the run waits for
the value: before, the call hung (also through a worker thread). Now the run fails at
once with a `ResolventError` naming the chain and the fix, the value fails to start, and
the container stays usable.
"""

from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
import anyio.from_thread
import pytest
from tests.snapshot import assert_snapshot

from resolvent import Container, Resolve, ResolventError, Scope

MODES: list[Any] = [
    pytest.param({}, id="generated"),
    pytest.param({"concurrent": True}, id="concurrent"),
    pytest.param({"call_timeout": 30}, id="timeout"),
]

# Bounds every test: on a deadlock the test fails instead of hanging the suite.
BOUND = 10


def short(message: str, *fns: Any) -> str:
    """The message with the test module's qualified names shortened to the bare names."""
    for fn in fns:
        message = message.replace(f"{__name__}.{fn.__qualname__}", fn.__name__)
    return message


# -- module-level providers, so the snapshot names are stable ----------------------------

chain = Container()


@chain.provider(scope=Scope.APP)
async def settings() -> dict[str, str]:
    # Warms the feature flags up by running the app's own loader...
    flags = await chain.run(load_flags)
    return {"flags": flags}


@chain.provider(scope=Scope.APP)
async def flags() -> str:
    # ...and the loader's flags read the settings: settings -> flags -> settings.
    return await chain.run(read_mode)


async def load_flags(value: Annotated[str, Resolve(flags)]) -> str:
    return value


async def read_mode(config: Annotated[dict[str, str], Resolve(settings)]) -> str:
    return config.get("mode", "dev")


async def handler(config: Annotated[dict[str, str], Resolve(settings)]) -> str:
    return config["flags"]


async def test_a_cycle_through_two_shared_values_names_the_chain(anyio_backend: str) -> None:
    async with chain:
        with anyio.fail_after(BOUND), pytest.raises(ResolventError) as info:
            await chain.run(handler)
    assert_snapshot("reentrant_run_cycle", short(str(info.value), settings, flags))


# -- every way a run can re-enter ---------------------------------------------------------


@pytest.mark.parametrize("options", MODES)
async def test_a_provider_that_runs_a_function_needing_itself(
    anyio_backend: str, options: dict[str, Any]
) -> None:
    container = Container(**options)

    @container.provider(scope=Scope.APP)
    async def pool() -> list[str]:
        return [await container.run(ping)]

    async def ping(conn: Annotated[list[str], Resolve(pool)]) -> str:
        return "pong"

    async with container:
        with anyio.fail_after(BOUND), pytest.raises(ResolventError) as info:
            await container.run(ping)
    message = short(str(info.value), pool)
    assert message.startswith("re-entrant run forms a cycle: pool -> pool.")
    assert "fix:" in message


async def test_a_resource_that_runs_a_function_needing_itself_before_its_yield(
    anyio_backend: str,
) -> None:
    container = Container()
    closed: list[str] = []

    @container.provider(scope=Scope.APP)
    async def client() -> AsyncIterator[str]:
        # An async resource is set up, held and closed in its home task.
        greeting = await container.run(hello)
        try:
            yield greeting
        finally:
            closed.append("client")

    async def hello(c: Annotated[str, Resolve(client)]) -> str:
        return "hi"

    async with container:
        with (
            anyio.fail_after(BOUND),
            pytest.raises(ResolventError, match=r"cycle: \S*client -> \S*client\."),
        ):
            await container.run(hello)
    assert closed == []  # it never opened, so there was nothing to close


async def test_a_sync_provider_in_a_worker_thread_calling_back_into_the_loop(
    anyio_backend: str,
) -> None:
    container = Container()

    @container.provider(scope=Scope.APP)
    def database() -> str:
        # A sync provider runs in a worker thread; it reaches the loop through anyio.
        return anyio.from_thread.run(container.run, schema_version)

    def schema_version(db: Annotated[str, Resolve(database)]) -> str:
        return "v1"

    async with container:
        with anyio.fail_after(BOUND), pytest.raises(ResolventError) as info:
            await container.run(schema_version)
    assert short(str(info.value), database).startswith(
        "re-entrant run forms a cycle: database -> database."
    )


async def test_a_handler_run_by_a_provider_that_runs_again(anyio_backend: str) -> None:
    # The cycle may pass through plain (CALL) handlers: only the shared value waits.
    container = Container()

    @container.provider(scope=Scope.APP)
    async def catalog() -> list[str]:
        return await container.run(index)

    async def index() -> list[str]:
        return [await container.run(first_item)]

    async def first_item(items: Annotated[list[str], Resolve(catalog)]) -> str:
        return items[0]

    async with container:
        with anyio.fail_after(BOUND), pytest.raises(ResolventError) as info:
            await container.run(first_item)
    assert "catalog -> catalog." in short(str(info.value), catalog)


async def test_a_session_value_that_runs_a_function_needing_itself(anyio_backend: str) -> None:
    container = Container()

    @container.provider(scope=Scope.SESSION)
    async def cart() -> list[str]:
        return [await session.run(total)]

    async def total(items: Annotated[list[str], Resolve(cart)]) -> str:
        return str(len(items))

    async with container, container.session() as session:
        with anyio.fail_after(BOUND), pytest.raises(ResolventError) as info:
            await session.run(total)
    message = short(str(info.value), cart)
    assert message.startswith("re-entrant run forms a cycle: cart -> cart.")
    assert "(Scope.SESSION)" in message


# -- what is not a cycle keeps working ------------------------------------------------------


async def test_a_provider_may_run_functions_that_need_other_shared_values(
    anyio_backend: str,
) -> None:
    container = Container()
    made: list[str] = []

    @container.provider(scope=Scope.APP)
    async def secrets() -> str:
        made.append("secrets")
        return "s3cret"

    @container.provider(scope=Scope.APP)
    async def database() -> str:
        made.append("database")
        return await container.run(connect)  # needs secrets, not database: no cycle

    async def connect(key: Annotated[str, Resolve(secrets)]) -> str:
        return f"db({key})"

    async def query(db: Annotated[str, Resolve(database)]) -> str:
        return db

    async with container:
        with anyio.fail_after(BOUND):
            results: list[str] = []

            async def one() -> None:
                results.append(await container.run(query))

            async with anyio.create_task_group() as group:  # concurrent callers share it
                for _ in range(5):
                    group.start_soon(one)
    assert results == ["db(s3cret)"] * 5
    assert made == ["database", "secrets"]


async def test_the_container_stays_usable_after_a_reentrant_run(anyio_backend: str) -> None:
    container = Container()
    warm = {"up": True}

    @container.provider(scope=Scope.APP)
    async def cache() -> dict[str, int]:
        if warm["up"]:
            await container.run(size)  # the mistake, on the first start only
        return {"hits": 0}

    async def size(c: Annotated[dict[str, int], Resolve(cache)]) -> int:
        return len(c)

    async with container:
        with anyio.fail_after(BOUND):
            with pytest.raises(ResolventError, match="re-entrant run"):
                await container.run(size)
            warm["up"] = False  # fixed: the next call starts the value again
            assert await container.run(size) == 1
