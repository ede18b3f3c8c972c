"""Per-request callables share one plan; caches are bounded; "may ask" costs no scope."""

import functools
import inspect
from dataclasses import dataclass
from typing import Annotated, Any

import pytest

from resolvent import Container, Resolve

MODES = [
    pytest.param({}, id="generated"),
    pytest.param({"concurrent": True}, id="concurrent"),
    pytest.param({"call_timeout": 5.0}, id="call_timeout"),
]
OPTIONS: dict[str, dict[str, Any]] = {
    "concurrent": {"concurrent": True},
    "timeout": {"call_timeout": 5.0},
}
MODE_NAMES = ["generated", "concurrent", "timeout"]


async def user_name(user_id: str) -> str:
    return f"user {user_id}"


@dataclass
class RequestHandler:
    """A per-request object whose method is the handler (a class-based view)."""

    tenant: str

    async def handle(self, user_id: str, name: Annotated[str, Resolve(user_name)]) -> str:
        return f"{self.tenant}: {name}"


async def greet(greeting: str, user_id: str, name: Annotated[str, Resolve(user_name)]) -> str:
    return f"{greeting}, {name}"


@pytest.mark.parametrize("options", MODES)
async def test_per_request_methods_and_partials_compile_once(options: dict[str, Any]) -> None:
    container = Container(**options)
    async with container:
        for i in range(20):
            handler = RequestHandler(f"t{i}").handle
            assert await container.run(handler, user_id="u") == f"t{i}: user u"
            hello = functools.partial(greet, f"hi {i}")
            assert await container.run(hello, user_id="u") == f"hi {i}, user u"
            bye = functools.partial(greet, greeting="bye")
            assert await container.run(bye, user_id="v") == "bye, user v"
            async with container.session() as session:
                assert await session.run(handler, user_id="w") == f"t{i}: user w"
    # one plan per function, however many objects and partials ran
    assert len(container._plans) == 2  # pyright: ignore[reportPrivateUsage]
    assert len(container._ready) <= 2  # pyright: ignore[reportPrivateUsage]


async def test_a_partial_binding_an_injected_parameter_still_works() -> None:
    container = Container()
    fixed = functools.partial(greet, "hey", name="fixed")
    assert await container.run(fixed, user_id="u") == "hey, user u"  # as before


async def test_the_run_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import resolvent._container.plans as module

    monkeypatch.setattr(module, "_MAX_PLANS", 8)
    container = Container()
    for i in range(50):

        async def handler(n: Annotated[str, Resolve(user_name)], user_id: str = str(i)) -> str:
            return n

        assert await container.run(handler) == f"user {i}"
    assert len(container._plans) <= 8  # pyright: ignore[reportPrivateUsage]
    assert len(container._ready) <= 8  # pyright: ignore[reportPrivateUsage]


async def test_an_unannotated_resolver_runs_without_a_call_scope() -> None:
    container = Container()
    opened: list[int] = []

    def count(*args: Any, **kwargs: Any) -> None:
        opened.append(1)

    async def name(user_id: str):  # type: ignore[no-untyped-def]
        return f"user {user_id}"

    async def handler(user_id: str, n: Annotated[str, Resolve(name)]) -> str:
        return n

    import resolvent._container.call as module

    original = module.Call.__aenter__

    async def spy(self: Any) -> Any:
        count()
        return await original(self)

    module.Call.__aenter__ = spy  # type: ignore[method-assign]
    try:
        for _ in range(3):
            assert await container.run(handler, user_id="u") == "user u"
    finally:
        module.Call.__aenter__ = original  # type: ignore[method-assign]
    assert opened == []
    assert container.compile(handler).steps[0].may_ask  # it still may ask in a call


async def test_an_unannotated_resolver_that_asks_in_run_says_who_to_ask() -> None:
    from pydantic import BaseModel

    from resolvent import Elicit, ResolventError

    class Confirm(BaseModel):
        ok: bool

    container = Container()

    async def confirm():  # type: ignore[no-untyped-def]
        return Elicit("sure?", Confirm)

    async def handler(answer: Annotated[Confirm, Resolve(confirm)]) -> bool:
        return answer.ok

    with pytest.raises(ResolventError, match="nobody to ask"):
        await container.run(handler)


@pytest.mark.parametrize("options", MODES)
async def test_call_resolve_shares_the_plan_of_a_per_request_method(
    options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A framework adapter that resolves a class-based view's method itself, then calls it.
    import resolvent._container.plans as module

    compiled: list[str] = []
    original = module.build_graph

    def counting(fn: Any, *args: Any) -> Any:
        compiled.append(getattr(fn, "__qualname__", repr(fn)))
        return original(fn, *args)

    monkeypatch.setattr(module, "build_graph", counting)
    container = Container(**options)
    async with container:
        for i in range(1_000):
            view = RequestHandler(f"t{i}").handle
            partial = functools.partial(greet, f"hi {i}")
            async with container.call() as call:
                injected = await call.resolve(view, {"user_id": "u"})
                assert injected == {"name": "user u"}  # only what was injected
                assert await view(user_id="u", **injected) == f"t{i}: user u"
            async with container.call() as call:
                injected = await call.resolve(partial, {"user_id": "v"})
                assert await partial(user_id="v", **injected) == f"hi {i}, user v"
    assert compiled == ["RequestHandler.handle", "greet"]  # once per function, not per object
    assert len(container._plans) == 2  # pyright: ignore[reportPrivateUsage]


def checked(fn: Any) -> Any:
    """A decorator as users write them: it reads the instance positionally, as ``args[0]``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        assert isinstance(args[0], DecoratedView), "the instance comes first"
        return fn(*args, **kwargs)

    return wrapper


@dataclass
class DecoratedView:
    """A per-request object whose handlers carry a ``functools.wraps`` decorator."""

    tenant: str

    @checked
    async def handle(self, user_id: str, name: Annotated[str, Resolve(user_name)]) -> str:
        return f"{self.tenant}: {name}"

    @checked
    def handle_sync(self, user_id: str, name: Annotated[str, Resolve(user_name)]) -> str:
        return f"{self.tenant} (sync): {name}"


async def _run_as(container: Container, handler: Any, mode: str, **kwargs: Any) -> Any:
    if mode == "interpreter":
        async with container.call(rounds=True) as call:
            return await call.run(handler, **kwargs)
    if mode == "call":
        async with container.call() as call:
            return await call.run(handler, **kwargs)
    if mode == "session":
        async with container.session() as session:
            return await session.run(handler, **kwargs)
    if mode == "resolve":
        async with container.call() as call:
            injected = await call.resolve(handler, kwargs)
            result = handler(**kwargs, **injected)
            return await result if inspect.isawaitable(result) else result
    return await container.run(handler, **kwargs)


@pytest.mark.parametrize("mode", [*MODE_NAMES, "interpreter", "call", "session", "resolve"])
async def test_decorated_methods_of_per_request_objects_compile_once(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import resolvent._container.plans as module

    compiled: list[str] = []
    original = module.build_graph

    def counting(fn: Any, *args: Any) -> Any:
        compiled.append(getattr(fn, "__qualname__", repr(fn)))
        return original(fn, *args)

    monkeypatch.setattr(module, "build_graph", counting)
    container = Container(**OPTIONS.get(mode, {}))
    async with container:
        for i in range(20):
            view = DecoratedView(f"t{i}")
            assert await _run_as(container, view.handle, mode, user_id="u") == f"t{i}: user u"
            expected = f"t{i} (sync): user v"
            assert await _run_as(container, view.handle_sync, mode, user_id="v") == expected
    # one plan per decorated function, however many objects ran
    assert sorted(compiled) == ["DecoratedView.handle", "DecoratedView.handle_sync"]
