"""Decorated resolvers: what a decorator hides is read through ``functools.wraps``.

Users put their own decorators on resolvers: logging, timing, retry, caching. A sync
``functools.wraps`` wrapper around an ``async def`` returns a coroutine; around an async
generator it returns an async generator. The resolver is what the innermost function
says it is, so the value injected is the awaited result or the resource's value, never
the coroutine or generator object. A wrapper that hides its function (no ``wraps``) is
refused with the fix.
"""

import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Annotated, Any, ParamSpec, TypeVar

import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES as MCP_MODES
from mcp_helpers import client, text
from modes import MODES, make_container, run
from resolvent import Container, InvalidSignature, Resolve, Scope
from resolvent.mcp import inject
from snapshot import assert_snapshot

P = ParamSpec("P")
R = TypeVar("R")

CALLS: list[str] = []
EVENTS: list[str] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    CALLS.clear()
    EVENTS.clear()
    RATES.clear()


# -- decorators as users write them --------------------------------------------------------


def logged(fn: Callable[P, R]) -> Callable[P, R]:
    """A sync logging decorator, written once and put on anything."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        CALLS.append(fn.__name__)
        return fn(*args, **kwargs)

    return wrapper


def retry(times: int) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """An async retry decorator: calls the function again while it raises ConnectionError."""

    def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            for attempt in range(times):
                try:
                    return await fn(*args, **kwargs)
                except ConnectionError:
                    CALLS.append(f"retry {attempt + 1}")
            return await fn(*args, **kwargs)

        return wrapper

    return decorate


class counted:
    """A class-based decorator: counts calls, forwards them through ``__call__``."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.fn(*args, **kwargs)


RATES: dict[Any, Any] = {}


def cached(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A tiny async cache (the shape of async-lru), sync outside: returns an awaitable."""
    results: dict[Any, Any] = RATES

    async def fetch(key: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        if key not in results:
            results[key] = await fn(*args, **kwargs)
        result: R = results[key]
        return result

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Awaitable[R]:
        return fetch(tuple(sorted(kwargs.items())), *args, **kwargs)

    return wrapper


# -- resolvers ----------------------------------------------------------------------------


@logged
async def current_user() -> str:
    return "ada"


@logged
async def session_token(user: Annotated[str, Resolve(current_user)]) -> AsyncIterator[str]:
    EVENTS.append("token open")
    try:
        yield f"token-{user}"
    finally:
        EVENTS.append("token close")


@logged
def cursor() -> Iterator[str]:
    EVENTS.append("cursor open")
    try:
        yield "cursor"
    finally:
        EVENTS.append("cursor close")


@logged
@contextlib.asynccontextmanager
async def transaction() -> AsyncIterator[str]:
    EVENTS.append("tx begin")
    try:
        yield "tx"
    finally:
        EVENTS.append("tx end")


@logged
@contextlib.contextmanager
def lock() -> Iterator[str]:
    EVENTS.append("lock")
    try:
        yield "locked"
    finally:
        EVENTS.append("unlock")


FLAKY = {"left": 0}


@retry(times=3)
async def flaky_config() -> dict[str, int]:
    if FLAKY["left"]:
        FLAKY["left"] -= 1
        raise ConnectionError("config server busy")
    return {"port": 8080}


@counted
async def feature_flags() -> set[str]:
    return {"beta"}


@cached
async def exchange_rate() -> float:
    CALLS.append("fetch rate")
    return 1.25


async def handler(
    user: Annotated[str, Resolve(current_user)],
    token: Annotated[str, Resolve(session_token)],
    cur: Annotated[str, Resolve(cursor)],
    tx: Annotated[str, Resolve(transaction)],
    held: Annotated[str, Resolve(lock)],
    config: Annotated[dict[str, int], Resolve(flaky_config)],
    flags: Annotated[set[str], Resolve(feature_flags)],
    rate: Annotated[float, Resolve(exchange_rate)],
) -> tuple[Any, ...]:
    EVENTS.append("body")
    return user, token, cur, tx, held, config, flags, rate


EXPECTED = ("ada", "token-ada", "cursor", "tx", "locked", {"port": 8080}, {"beta"}, 1.25)


@pytest.mark.parametrize("mode", MODES)
async def test_decorated_resolvers_inject_values_not_coroutines_or_generators(
    mode: str,
) -> None:
    FLAKY["left"] = 2
    feature_flags.calls = 0
    container = make_container(mode)
    async with container:
        assert await run(container, handler, mode) == EXPECTED
        assert await run(container, handler, mode) == EXPECTED
    # Each resource was entered and closed by the call that opened it, in reverse order.
    one_call = [
        *["token open", "cursor open", "tx begin", "lock", "body"],
        *["unlock", "tx end", "cursor close", "token close"],
    ]
    if mode == "concurrent":  # branches open in any order; each call closes them all
        assert sorted(EVENTS) == sorted(one_call * 2)
    else:
        assert one_call * 2 == EVENTS
    assert CALLS.count("fetch rate") == 1  # the cache decorator still caches
    assert [c for c in CALLS if c.startswith("retry")] == ["retry 1", "retry 2"]
    assert CALLS.count("current_user") == 2  # once per call: token reuses the call's user
    assert feature_flags.calls == 2


async def test_decorated_resolvers_through_a_call_scope_and_a_session() -> None:
    container = Container()
    container.provide(session_token, scope=Scope.SESSION)
    container.provide(current_user, scope=Scope.SESSION)
    async with container, container.session() as session:
        async with session.call() as call:
            assert (await call.resolve(handler))["token"] == "token-ada"
        assert await session.run(handler) == EXPECTED
        assert EVENTS.count("token open") == 1
    assert EVENTS.count("token close") == 1


async def test_an_async_decorator_around_an_async_def_is_awaited_once() -> None:
    @retry(times=1)
    @logged
    async def port() -> int:
        return 8080

    async def serve(p: Annotated[int, Resolve(port)]) -> int:
        return p

    assert await Container().run(serve) == 8080
    assert CALLS == ["port"]


async def test_a_decorated_handler_is_awaited() -> None:
    @logged
    async def tool(user: Annotated[str, Resolve(current_user)]) -> str:
        return f"hello {user}"

    assert await Container().run(tool) == "hello ada"


async def test_a_decorated_provider_is_found_by_type() -> None:
    container = Container()
    container.provide(session_token)

    async def uses(token: Annotated[str, Resolve()]) -> str:
        return token

    assert await container.run(uses) == "token-ada"
    assert EVENTS == ["token open", "token close"]


def test_the_plan_shows_what_the_decorated_function_really_is() -> None:
    text = Container().compile(handler).describe()
    assert "current_user   CALL    async function" in text
    assert "session_token  CALL    async generator" in text
    assert "cursor         CALL    generator (thread)" in text
    assert "transaction    CALL    async context manager" in text
    assert "lock           CALL    context manager (thread)" in text
    assert "exchange_rate  CALL    async function" in text


# -- a decorator that hides its function ------------------------------------------------


def hiding(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator that forgot functools.wraps."""

    def wrapper(**kwargs: Any) -> Any:
        return fn(**kwargs)

    return wrapper


def hiding_positional(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


def test_a_wrapper_without_wraps_around_an_async_def_is_refused() -> None:
    async def tool(user: Annotated[str, Resolve(hiding(current_user))]) -> str:
        return user

    with pytest.raises(InvalidSignature) as info:
        Container().compile(tool)
    message = str(info.value).replace(hiding.__qualname__, "hiding")
    assert_snapshot("decorator_without_wraps", message)
    assert "@functools.wraps(current_user)" in message


def test_a_wrapper_without_wraps_around_a_generator_is_refused() -> None:
    with pytest.raises(InvalidSignature) as info:
        Container().provide(hiding_positional(cursor))
    message = str(info.value).replace(hiding_positional.__qualname__, "hiding_positional")
    assert_snapshot("decorator_without_wraps_generator", message)


async def test_a_wrapper_without_wraps_that_says_it_returns_an_awaitable_is_awaited() -> None:
    def timed(fn: Callable[..., Awaitable[str]]) -> Callable[..., Awaitable[str]]:
        def wrapper(**kwargs: Any) -> Awaitable[str]:
            CALLS.append("timed")
            return fn(**kwargs)

        return wrapper

    async def tool(user: Annotated[str, Resolve(timed(current_user))]) -> str:
        return user

    assert await Container().run(tool) == "ada"
    assert CALLS == ["timed", "current_user"]


async def test_a_wrapper_of_a_plain_function_stays_a_plain_value() -> None:
    @logged
    def region() -> str:
        return "eu"

    async def tool(r: Annotated[str, Resolve(hiding(region))]) -> str:
        return r

    assert await Container().run(tool) == "eu"


@pytest.mark.parametrize("mode", MCP_MODES)
async def test_decorated_resolvers_behind_an_mcp_tool(mode: str) -> None:
    container = Container()
    server = MCPServer("decorated", lifespan=container.lifespan)

    @server.tool()
    @inject(container)
    async def whoami(
        user: Annotated[str, Resolve(current_user)],
        token: Annotated[str, Resolve(session_token)],
        tx: Annotated[str, Resolve(transaction)],
    ) -> str:
        return f"{user} {token} {tx}"

    async with client(server, mode) as c:
        assert text(await c.call_tool("whoami", {})) == "ada token-ada tx"
    assert EVENTS == ["token open", "tx begin", "tx end", "token close"]


@pytest.mark.parametrize("mode", MCP_MODES)
async def test_a_tool_under_a_sync_logging_decorator_is_awaited(mode: str) -> None:
    """``@logged`` on the tool itself: its result is the awaited value, not a coroutine."""
    container = Container()
    server = MCPServer("decorated", lifespan=container.lifespan)

    @server.tool()
    @inject(container)
    @logged
    async def greet(name: str, user: Annotated[str, Resolve(current_user)]) -> str:
        return f"hello {name}, I am {user}"

    async with client(server, mode) as c:
        assert text(await c.call_tool("greet", {"name": "bob"})) == "hello bob, I am ada"
    assert CALLS == ["current_user", "greet"]


def fetch_settings(env: str) -> Callable[[], Awaitable[dict[str, str]]]:
    async def settings() -> dict[str, str]:
        return {"env": env}

    return settings


async def load_settings(env: str) -> dict[str, str]:
    return {"env": env}


def test_a_lambda_calling_an_async_function_is_refused_with_the_fix() -> None:
    async def tool(
        settings: Annotated[dict[str, str], Resolve(lambda: load_settings("prod"))],
    ) -> None: ...

    with pytest.raises(InvalidSignature) as info:
        Container().compile(tool)
    message = str(info.value).replace(
        f"{__name__}.test_a_lambda_calling_an_async_function_is_refused_with_the_fix.<locals>.", ""
    )
    assert_snapshot("lambda_calls_async", message)


async def test_the_fix_for_a_lambda_a_partial_is_awaited() -> None:
    async def tool(
        settings: Annotated[dict[str, str], Resolve(functools.partial(load_settings, "prod"))],
        port: Annotated[int, Resolve(lambda: 8080)],  # a lambda of a plain value is fine
    ) -> tuple[str, int]:
        return settings["env"], port

    assert await Container().run(tool) == ("prod", 8080)


async def test_an_async_wrapper_without_wraps_says_what_it_is_itself() -> None:
    """No ``functools.wraps`` needed when the wrapper is itself an ``async def`` or an
    async generator: its own code tells what calling it gives."""

    def timed(fn: Callable[..., Awaitable[str]]) -> Callable[..., Awaitable[str]]:
        async def wrapper(**kwargs: Any) -> Any:
            CALLS.append("timed")
            return await fn(**kwargs)

        return wrapper

    def traced(fn: Callable[..., AsyncIterator[str]]) -> Callable[..., AsyncIterator[str]]:
        async def wrapper(**kwargs: Any) -> Any:
            async for value in fn(**kwargs):
                yield value

        return wrapper

    async def lease() -> AsyncIterator[str]:
        EVENTS.append("lease")
        yield "leased"
        EVENTS.append("returned")

    async def tool(
        user: Annotated[str, Resolve(timed(current_user))],
        held: Annotated[str, Resolve(traced(lease))],
    ) -> str:
        return f"{user} {held}"

    assert await Container().run(tool) == "ada leased"
    assert EVENTS == ["lease", "returned"]


class Settings:
    def load(self) -> dict[str, str]:
        return {"env": "dev"}


SETTINGS = Settings()


async def load() -> dict[str, str]:  # an async function that happens to share the name
    return {"env": "prod"}


async def test_a_lambda_calling_a_sync_method_of_the_same_name_is_not_refused() -> None:
    async def tool(s: Annotated[dict[str, str], Resolve(lambda: SETTINGS.load())]) -> str:
        return s["env"]

    assert await Container().run(tool) == "dev"


# -- callable objects whose __call__ is a generator ------------------------------------------


class OpenTicket:
    """A callable object whose ``__call__`` is an async generator: a resource."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    async def __call__(self, user: Annotated[str, Resolve(current_user)]) -> AsyncIterator[str]:
        EVENTS.append("ticket open")
        try:
            yield f"{self.prefix}-{user}"
        finally:
            EVENTS.append("ticket close")


class OpenFile:
    """A callable object whose ``__call__`` is a sync generator: a resource."""

    def __call__(self) -> Iterator[str]:
        EVENTS.append("file open")
        try:
            yield "file"
        finally:
            EVENTS.append("file close")


open_ticket = OpenTicket("T")
open_file = OpenFile()


async def uses_callable_objects(
    ticket: Annotated[str, Resolve(open_ticket)], file: Annotated[str, Resolve(open_file)]
) -> tuple[str, str]:
    EVENTS.append("body")
    return ticket, file


@pytest.mark.parametrize("mode", MODES)
async def test_a_callable_object_with_a_generator_call_is_a_resource(mode: str) -> None:
    # Its value is what __call__ yields, and it is closed with the call, in reverse order;
    # the generator object itself is never injected.
    container = make_container(mode)
    async with container:
        assert await run(container, uses_callable_objects, mode) == ("T-ada", "file")
    if mode == "concurrent":
        assert EVENTS[-1].endswith("close") and EVENTS[-2].endswith("close")
        assert sorted(EVENTS) == sorted(
            ["ticket open", "file open", "body", "file close", "ticket close"]
        )
    else:
        assert EVENTS == ["ticket open", "file open", "body", "file close", "ticket close"]


async def test_a_callable_object_with_a_generator_call_is_found_by_its_yielded_type() -> None:
    container = Container()
    container.provide(open_file, scope=Scope.APP)

    async def uses(file: Annotated[str, Resolve()]) -> str:
        return file

    async with container:
        assert await container.run(uses) == "file"
        assert await container.run(uses) == "file"
        assert EVENTS == ["file open"]
    assert EVENTS == ["file open", "file close"]


class Tagger:
    """A callable object taking an argument a partial binds."""

    async def __call__(self, tag: str, user: Annotated[str, Resolve(current_user)]) -> str:
        return f"{tag}-{user}"


tag_admin = functools.partial(Tagger(), "admin")
file_again = functools.partial(open_file)


async def uses_partials_of_callable_objects(
    tag: Annotated[str, Resolve(tag_admin)], file: Annotated[str, Resolve(file_again)]
) -> tuple[str, str]:
    return tag, file


@pytest.mark.parametrize("mode", MODES)
async def test_a_partial_of_a_callable_object_is_seen_through(mode: str) -> None:
    # functools.partial(obj, ...) is read through obj's __call__, as partial(fn, ...)
    # is through fn (it was "cannot read the annotations of partial(Tagger)").
    container = make_container(mode)
    async with container:
        assert await run(container, uses_partials_of_callable_objects, mode) == (
            "admin-ada",
            "file",
        )
    assert EVENTS == ["file open", "file close"]
