"""`Container.run`'s hot path: once a function's plan is hot, `run` finds its generated
entry by the function it is given and starts it, and the entry calls the plan's own
function with the call's arguments read once. A call that is not exactly that (other
arguments, another callable equal to it, an override block, a provider changed since)
still gets what it would get without the fast path.

No ``from __future__ import annotations`` here: resolvers are local functions, and
string annotations could not see them.
"""

from collections.abc import Callable
from types import MethodType
from typing import Annotated, Any

import pytest

from resolvent import Container, Resolve, ResolventError, Scope

made: list[str] = []


async def settings() -> str:
    made.append("settings")
    return "cfg"


async def user(user_id: str) -> str:
    made.append("user")
    return f"user:{user_id}"


async def handler(user_id: str, u: Annotated[str, Resolve(user)]) -> str:
    return f"{user_id}|{u}"


async def with_app(
    user_id: str, s: Annotated[str, Resolve(settings)], u: Annotated[str, Resolve(user)]
) -> str:
    return f"{user_id}|{s}|{u}"


def _hot(container: Container, fn: Callable[..., Any]) -> None:
    """Fail unless `run` starts *fn*'s generated entry itself (bound to the APP scope
    for a plan with APP values): the path these tests are about."""
    start = container._ready[fn]  # pyright: ignore[reportPrivateUsage]
    entry = container.compile(fn).entry_fn
    assert (start.__func__ if isinstance(start, MethodType) else start) is entry


async def _warm(container: Container, fn: Callable[..., Any]) -> None:
    for _ in range(4):  # its first calls interpreted, then the generated entry
        await container.run(fn, user_id="w")
    _hot(container, fn)


@pytest.mark.parametrize("fn", [handler, with_app], ids=["call", "app"])
async def test_a_hot_entry_takes_only_exactly_its_own_arguments(fn: Callable[..., Any]) -> None:
    container = Container()
    container.provide(settings, scope=Scope.APP)
    want = "u1|cfg|user:u1" if fn is with_app else "u1|user:u1"
    async with container:
        await _warm(container, fn)
        assert await container.run(fn, user_id="u1") == want
        # One argument too many: the handler's own call says so, as without a container.
        with pytest.raises(TypeError, match="unexpected keyword argument 'extra'"):
            await container.run(fn, user_id="u1", extra=1)
        # As many arguments, the wrong one; and none.
        with pytest.raises(ResolventError, match="call argument 'user_id'"):
            await container.run(fn, userid="u1")
        with pytest.raises(ResolventError, match="call argument 'user_id'"):
            await container.run(fn)
        assert await container.run(fn, user_id="u1") == want
        _hot(container, fn)


async def test_a_hot_entry_leaves_a_left_out_default_to_its_handler() -> None:
    async def tagged(
        user_id: str, u: Annotated[str, Resolve(user)], tag: str = "t"
    ) -> tuple[str, str, str]:
        return user_id, u, tag

    container = Container()
    for _ in range(4):
        await container.run(tagged, user_id="w", tag="x")
    _hot(container, tagged)
    assert await container.run(tagged, user_id="u", tag="x") == ("u", "user:u", "x")
    assert await container.run(tagged, user_id="u") == ("u", "user:u", "t")
    assert await container.run(tagged, tag="y", user_id="v") == ("v", "user:v", "y")


class Greeter:
    """A callable object equal to every other Greeter: finding one in `run`'s table by
    another must not call the one found."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Greeter)

    def __hash__(self) -> int:
        return 0

    async def __call__(self, user_id: str, u: Annotated[str, Resolve(user)]) -> str:
        return f"{self.name}:{u}"


async def test_an_equal_callable_object_runs_itself() -> None:
    a, b = Greeter("a"), Greeter("b")
    container = Container()
    for _ in range(6):
        assert await container.run(a, user_id="u") == "a:user:u"
        assert await container.run(b, user_id="u") == "b:user:u"


async def test_bound_methods_of_two_objects_each_run_their_own() -> None:
    class Service:
        def __init__(self, base: str) -> None:
            self.base = base

        async def handle(self, user_id: str, u: Annotated[str, Resolve(user)]) -> str:
            return f"{self.base}:{u}"

    one, two = Service("one"), Service("two")
    container = Container()
    for _ in range(6):
        assert await container.run(one.handle, user_id="u") == "one:user:u"
        assert await container.run(two.handle, user_id="u") == "two:user:u"


async def test_a_hot_entry_gives_way_to_an_override_block_and_back() -> None:
    async def fake(user_id: str) -> str:
        return f"fake:{user_id}"

    container = Container()
    async with container:
        await _warm(container, handler)
        with container.override(user, fake):
            for _ in range(4):
                assert await container.run(handler, user_id="u") == "u|fake:u"
        for _ in range(4):
            assert await container.run(handler, user_id="u") == "u|user:u"
        _hot(container, handler)


async def test_a_hot_entry_gives_way_to_a_provider_registered_later() -> None:
    async def token() -> str:
        made.append("token")
        return "t"

    async def guarded(user_id: str, t: Annotated[str, Resolve(token)]) -> str:
        return f"{user_id}|{t}"

    container = Container()
    async with container:
        await _warm(container, guarded)
        made.clear()
        container.provide(token, scope=Scope.APP)  # from now on made once, for every call
        for _ in range(6):
            assert await container.run(guarded, user_id="u") == "u|t"
        _hot(container, guarded)
    assert made == ["token"]
