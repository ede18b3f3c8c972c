"""Resolving parameters: Resolve(fn) at any depth, Resolve() by type, and the other sources.

No ``from __future__ import annotations`` here: resolvers are local functions, and
string annotations could not see them.
"""

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import pytest

from modes import MODES, make_container
from resolvent import Container, InvalidSignature, Resolve, ResolventError


@dataclass
class Settings:
    dsn: str


@dataclass
class Pool:
    settings: Settings


class Request:
    """A framework value type, supplied per call."""

    def __init__(self, path: str) -> None:
        self.path = path


async def test_resolve_fn_at_any_depth() -> None:
    container = Container()

    async def a() -> int:
        return 1

    def b(x: Annotated[int, Resolve(a)]) -> int:
        return x + 10

    async def c(y: Annotated[int, Resolve(b)]) -> int:
        return y + 100

    async def handler(z: Annotated[int, Resolve(c)]) -> int:
        return z

    assert await container.run(handler) == 111


async def test_resolve_by_return_annotation() -> None:
    container = Container()

    @container.provider()
    async def settings() -> Settings:
        return Settings("db://x")

    async def handler(s: Annotated[Settings, Resolve()]) -> str:
        return s.dsn

    assert await container.run(handler) == "db://x"


@pytest.mark.parametrize("flavour", ["async_iterator", "iterator"])
async def test_resolve_by_generator_yielded_type(flavour: str) -> None:
    container = Container()
    closed: list[str] = []

    if flavour == "async_iterator":

        async def pool_async() -> AsyncIterator[Pool]:
            yield Pool(Settings("a"))
            closed.append("pool")

        container.provide(pool_async)
    else:

        def pool_sync() -> Iterator[Pool]:
            yield Pool(Settings("a"))
            closed.append("pool")

        container.provide(pool_sync)

    async def handler(p: Annotated[Pool, Resolve()]) -> str:
        assert closed == []
        return p.settings.dsn

    assert await container.run(handler) == "a"
    assert closed == ["pool"]


async def test_resolve_by_provides() -> None:
    container = Container()

    @container.provider(provides=Settings)
    async def make():  # type: ignore[no-untyped-def]
        return Settings("from provides")

    async def handler(s: Annotated[Settings, Resolve()]) -> str:
        return s.dsn

    assert await container.run(handler) == "from provides"


def test_two_providers_for_one_type_register_fine_but_resolve_by_type_fails() -> None:
    container = Container()

    @container.provider()
    def first_name() -> str:
        return "a"

    @container.provider()
    def last_name() -> str:
        return "b"

    async def named(n: Annotated[str, Resolve(first_name)]) -> str:
        return n

    container.compile(named)  # naming one is fine

    async def ambiguous(n: Annotated[str, Resolve()]) -> str:
        return n

    with pytest.raises(InvalidSignature) as info:
        container.compile(ambiguous)
    message = str(info.value)
    assert "first_name" in message
    assert "last_name" in message
    assert "Resolve(" in message


def test_resolve_by_type_with_no_provider() -> None:
    container = Container()

    async def handler(s: Annotated[Settings, Resolve()]) -> str:
        return s.dsn

    with pytest.raises(InvalidSignature, match="no provider offers it") as info:
        container.compile(handler)
    assert "Settings" in str(info.value)


async def test_call_argument_by_name_reaches_resolvers() -> None:
    container = Container()
    seen: list[str] = []

    async def user(user_id: str) -> str:
        seen.append(user_id)
        return f"user:{user_id}"

    async def handler(user_id: str, u: Annotated[str, Resolve(user)]) -> tuple[str, str]:
        return user_id, u

    assert await container.run(handler, user_id="u1") == ("u1", "user:u1")
    assert seen == ["u1"]


async def test_root_default_is_used_when_caller_omits_it() -> None:
    container = Container()

    async def page(limit: int) -> int:
        return limit * 2

    async def handler(limit: int = 7, doubled: Annotated[int, Resolve(page)] = 0) -> int:
        return doubled

    assert await container.run(handler) == 14
    assert await container.run(handler, limit=1) == 2
    async with container.call() as call:
        assert await call.resolve(container.compile(handler), {}) == {"doubled": 14}


@pytest.mark.parametrize("mode", [*MODES, "resource"])
async def test_call_arguments_reach_the_handler_exactly_as_given(mode: str) -> None:
    """A route handler gets its own arguments as the caller passed them: in any order,
    with a default left out, extras through its ``**kwargs``; one it does not take fails
    in the handler's call as it would without the container."""
    container = Container() if mode == "resource" else make_container(mode)

    async def profile(user_id: str) -> str:
        return f"profile:{user_id}"

    async def profile_session(user_id: str) -> AsyncIterator[str]:
        yield f"profile:{user_id}"  # a per-call resource: set up and torn down per call

    found = profile_session if mode == "resource" else profile

    async def handler(
        user_id: str,
        p: Annotated[str, Resolve(found)],
        page: int = 1,
        **filters: str,
    ) -> tuple[str, str, int, dict[str, str]]:
        return user_id, p, page, filters

    async def call(fn: Callable[..., Any], **kwargs: Any) -> Any:
        if mode == "interpreter":
            async with container.call(rounds=True) as scope:
                return await scope.run(fn, **kwargs)
        return await container.run(fn, **kwargs)

    assert await call(handler, page=3, user_id="u1") == ("u1", "profile:u1", 3, {})
    assert await call(handler, user_id="u1") == ("u1", "profile:u1", 1, {})
    got = await call(handler, user_id="u1", page=2, tag="x")
    assert got == ("u1", "profile:u1", 2, {"tag": "x"})

    async def strict(user_id: str, p: Annotated[str, Resolve(found)]) -> str:
        return p

    for kwargs in ({"user_id": "u1", "page": 2}, {"page": 2, "user_id": "u1"}):
        with pytest.raises(TypeError, match="unexpected keyword argument 'page'"):
            await call(strict, **kwargs)
    assert await call(strict, user_id="u1") == "profile:u1"


async def test_resolver_default_used_when_not_a_call_argument() -> None:
    container = Container()

    async def dep(retries: int = 3) -> int:
        return retries

    async def handler(d: Annotated[int, Resolve(dep)]) -> int:
        return d

    assert await container.run(handler) == 3


async def test_framework_value_by_type() -> None:
    container = Container(values=(Request,))

    async def path(req: Request) -> str:
        return req.path

    async def handler(p: Annotated[str, Resolve(path)], req: Request) -> tuple[str, bool]:
        return p, isinstance(req, Request)

    request = Request("/x")
    async with container.call(values={Request: request}) as call:
        assert await call.run(handler) == ("/x", True)


async def test_add_value_type_declares_after_construction() -> None:
    container = Container()

    async def path(req: Request) -> str:
        return req.path

    async def handler(p: Annotated[str, Resolve(path)]) -> str:
        return p

    with pytest.raises(InvalidSignature):
        container.compile(handler)
    container.add_value_type(Request)
    async with container.call(values={Request: Request("/y")}) as call:
        assert await call.run(handler) == "/y"


def test_unclassifiable_parameter_lists_the_choices() -> None:
    container = Container(values=(Request,))

    async def needs(thing: Settings) -> str:
        return thing.dsn

    async def handler(user_id: str, s: Annotated[str, Resolve(needs)]) -> str:
        return s

    with pytest.raises(InvalidSignature) as info:
        container.compile(handler)
    message = str(info.value)
    assert "'thing'" in message
    assert "needs" in message
    assert "user_id" in message  # the call arguments on offer
    assert "Request" in message  # the declared values
    assert "Resolve(" in message
    assert "default" in message


async def test_missing_call_argument_names_resolver_and_fix() -> None:
    container = Container()

    async def user(user_id: str) -> str:
        return user_id

    async def handler(user_id: str, u: Annotated[str, Resolve(user)]) -> str:
        return u

    with pytest.raises(ResolventError) as info:
        await container.run(handler)
    message = str(info.value)
    assert "'user_id'" in message
    assert "user" in message
    assert "fix: pass user_id=..." in message

    async with container.call() as call:
        with pytest.raises(ResolventError, match="fix: pass user_id=") as info2:
            await call.resolve(container.compile(handler), {})
    assert "handler" in str(info2.value)


async def test_missing_framework_value_names_resolver_and_fix() -> None:
    container = Container(values=(Request,))

    async def path(req: Request) -> str:
        return req.path

    async def handler(p: Annotated[str, Resolve(path)]) -> str:
        return p

    with pytest.raises(ResolventError) as info:
        await container.run(handler)
    message = str(info.value)
    assert "Request" in message
    assert "path" in message
    assert "values={Request: ...}" in message

    async with container.call(concurrent=True) as call:
        with pytest.raises(ResolventError, match=r"values=\{Request: \.\.\.\}"):
            await call.run(handler)


async def test_call_resolve_returns_only_injected_parameters() -> None:
    container = Container(values=(Request,))

    async def user(user_id: str) -> str:
        return f"user:{user_id}"

    async def handler(
        user_id: str, req: Request, u: Annotated[str, Resolve(user)], flag: bool = False
    ) -> str:
        return u

    plan = container.compile(handler)
    request = Request("/r")
    async with container.call(values={Request: request}) as call:
        kwargs = await call.resolve(plan, {"user_id": "u1"})
    assert kwargs == {"req": request, "u": "user:u1"}


async def test_call_resolve_of_a_function_follows_overrides() -> None:
    # `call.resolve(fn)` finds a compiled function's plan without compiling it again: the
    # plan it finds must be the one in force (an override block open) and its container's.
    container = Container()

    class Greeting(str):
        pass

    async def hello() -> Greeting:
        return Greeting("hello")

    async def fake() -> Greeting:
        return Greeting("fake")

    async def handler(g: Annotated[Greeting, Resolve()]) -> str:
        return g

    container.provide(hello)

    async def resolved() -> object:
        async with container.call() as call:
            return (await call.resolve(handler))["g"]

    assert await resolved() == "hello"
    assert await resolved() == "hello"  # the compiled plan, found
    with container.override(hello, fake):
        assert await resolved() == "fake"
    assert await resolved() == "hello"
    other = Container()
    other.provide(fake)
    async with other.call() as call:  # another container's plan is not this one's
        assert (await call.resolve(handler))["g"] == "fake"
    assert await resolved() == "hello"


async def test_same_resolver_used_twice_runs_once_per_call() -> None:
    container = Container()
    runs: list[int] = []

    async def shared() -> object:
        runs.append(1)
        return object()

    async def left(s: Annotated[object, Resolve(shared)]) -> object:
        return s

    async def right(s: Annotated[object, Resolve(shared)]) -> object:
        return s

    async def handler(
        a: Annotated[object, Resolve(left)], b: Annotated[object, Resolve(right)]
    ) -> bool:
        return a is b

    assert await container.run(handler) is True
    assert await container.run(handler) is True
    assert len(runs) == 2  # once per call


async def test_sync_root_function_is_called() -> None:
    container = Container()

    async def dep() -> int:
        return 4

    def handler(d: Annotated[int, Resolve(dep)]) -> int:
        return d + 1

    assert await container.run(handler) == 5


def test_ambiguity_between_providers_without_a_name_is_still_explained() -> None:
    container = Container()

    def make(label: str = "x") -> Settings:
        return Settings(label)

    class Factory:
        def __call__(self) -> Settings:
            return Settings("factory")

    container.provide(functools.partial(make, label="p"), provides=Settings)
    container.provide(Factory())

    async def handler(s: Annotated[Settings, Resolve()]) -> str:
        return s.dsn

    with pytest.raises(InvalidSignature) as info:
        container.compile(handler)
    assert "partial(" in str(info.value)
    assert "Factory" in str(info.value)
