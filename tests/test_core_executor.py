"""The executor: worker threads and hops, inline resolvers, exceptions and their notes."""

import threading
from typing import Annotated

import pytest

from modes import MODES, make_container
from resolvent import Container, Resolve, Scope


def sync_diamond(container: Container, idents: dict[str, int]):  # type: ignore[no-untyped-def]
    def top() -> int:
        idents["top"] = threading.get_ident()
        return 1

    def left(t: Annotated[int, Resolve(top)]) -> int:
        idents["left"] = threading.get_ident()
        return t + 1

    def right(t: Annotated[int, Resolve(top)]) -> int:
        idents["right"] = threading.get_ident()
        return t + 2

    def bottom(a: Annotated[int, Resolve(left)], b: Annotated[int, Resolve(right)]) -> int:
        idents["bottom"] = threading.get_ident()
        return a + b

    async def handler(v: Annotated[int, Resolve(bottom)]) -> tuple[int, int]:
        return v, threading.get_ident()

    return handler


async def test_sync_resolvers_run_in_one_worker_thread_hop() -> None:
    container = Container()
    idents: dict[str, int] = {}
    handler = sync_diamond(container, idents)
    value, loop_thread = await container.run(handler)
    assert value == 5
    assert set(idents) == {"top", "left", "right", "bottom"}
    assert len(set(idents.values())) == 1  # one hop for the whole diamond
    assert idents["top"] != loop_thread
    source = container.compile(handler).source()
    run_part, _, resolve_part = source.partition("async def resolve(")
    assert "async def run(" in run_part
    assert run_part.count("await in_thread(") == 1  # one hop in `run` ...
    assert resolve_part.count("await in_thread(") == 1  # ... and one in `resolve`


async def test_sync_resolvers_in_the_interpreter_run_in_worker_threads() -> None:
    container = Container(concurrent=True)
    idents: dict[str, int] = {}
    handler = sync_diamond(container, idents)
    value, loop_thread = await container.run(handler)
    assert value == 5
    assert loop_thread not in idents.values()


async def test_inline_sync_resolver_runs_on_the_loop_thread() -> None:
    container = Container()
    idents: dict[str, int] = {}

    @container.provider(inline=True)
    def here() -> int:
        idents["here"] = threading.get_ident()
        return 1

    def away() -> int:
        idents["away"] = threading.get_ident()
        return 2

    async def handler(a: Annotated[int, Resolve(here)], b: Annotated[int, Resolve(away)]) -> int:
        idents["loop"] = threading.get_ident()
        return a + b

    assert await container.run(handler) == 3
    assert idents["here"] == idents["loop"]
    assert idents["away"] != idents["loop"]

    idents.clear()
    async with container.call(concurrent=True) as call:
        assert await call.run(handler) == 3
    assert idents["here"] == idents["loop"]


async def test_sync_app_provider_runs_in_a_worker_thread() -> None:
    container = Container()
    idents: dict[str, int] = {}

    @container.provider(scope=Scope.APP)
    def heavy() -> int:
        idents["heavy"] = threading.get_ident()
        return 1

    async def handler(v: Annotated[int, Resolve(heavy)]) -> int:
        idents["loop"] = threading.get_ident()
        return v

    async with container:
        assert await container.run(handler) == 1
    assert idents["heavy"] != idents["loop"]


class Boom(Exception):
    pass


def failing(container: Container, sync: bool):  # type: ignore[no-untyped-def]
    error = Boom("original")

    if sync:

        def broken() -> int:
            raise error

    else:

        async def broken() -> int:
            raise error

    async def middle(b: Annotated[int, Resolve(broken)]) -> int:
        return b

    async def handler(m: Annotated[int, Resolve(middle)]) -> int:
        return m

    return handler, error


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("concurrent", [False, True], ids=["generated", "interpreted"])
async def test_resolver_exception_propagates_unchanged_with_a_note(
    sync: bool, concurrent: bool
) -> None:
    container = Container(concurrent=concurrent)
    handler, error = failing(container, sync)
    with pytest.raises(Boom) as info:
        await container.run(handler)
    assert info.value is error
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1
    note = notes[0]
    assert "broken" in note
    assert "middle" in note
    assert "handler" in note
    assert note.index("handler") < note.index("middle") < note.rindex("broken")


async def test_exception_in_the_body_gets_no_resolver_note() -> None:
    container = Container()
    error = Boom("body")

    async def dep() -> int:
        return 1

    async def handler(d: Annotated[int, Resolve(dep)]) -> int:
        raise error

    with pytest.raises(Boom) as info:
        await container.run(handler)
    assert info.value is error
    assert not getattr(error, "__notes__", [])


async def test_resolver_exception_reaches_generator_teardown() -> None:
    container = Container()
    seen: list[BaseException] = []
    error = Boom("late")

    async def resource():  # type: ignore[no-untyped-def]
        try:
            yield 1
        except Boom as exc:
            seen.append(exc)
            raise

    async def broken(r: Annotated[int, Resolve(resource)]) -> int:
        raise error

    async def handler(b: Annotated[int, Resolve(broken)]) -> int:
        return b

    with pytest.raises(Boom) as info:
        await container.run(handler)
    assert info.value is error
    assert seen == [error]


def sync_chain(error: BaseException):  # type: ignore[no-untyped-def]
    def first() -> int:
        raise error

    def second(a: Annotated[int, Resolve(first)]) -> int:
        return a

    def third(b: Annotated[int, Resolve(second)]) -> int:
        return b

    async def handler(c: Annotated[int, Resolve(third)]) -> int:
        return c

    return handler


@pytest.mark.parametrize("concurrent", [False, True], ids=["generated", "interpreted"])
async def test_note_names_the_failing_resolver_inside_a_thread_hop(concurrent: bool) -> None:
    error = Boom("first fails")
    handler = sync_chain(error)
    container = Container(concurrent=concurrent)
    with pytest.raises(Boom) as info:
        await container.run(handler)
    assert info.value is error
    prefix = "test_core_executor.sync_chain.<locals>."
    assert [note.replace(prefix, "") for note in error.__notes__] == [
        "resolvent: raised by first (CALL) resolving "
        "handler(c=...) -> third(b=...) -> second(a=...) -> first"
    ]


@pytest.mark.parametrize("concurrent", [False, True], ids=["generated", "interpreted"])
async def test_missing_argument_inside_a_thread_hop_is_explained(concurrent: bool) -> None:
    from resolvent import ResolventError

    def needs(user_id: str) -> str:
        return user_id

    def after(u: Annotated[str, Resolve(needs)]) -> str:
        return u

    async def handler(user_id: str, a: Annotated[str, Resolve(after)]) -> str:
        return a

    with pytest.raises(ResolventError) as info:
        await Container(concurrent=concurrent).run(handler)
    message = str(info.value)
    assert "call argument 'user_id' needed by" in message
    assert "needs was not given" in message
    assert "fix: pass user_id=..." in message


class Request:
    """A framework value type."""


class AdminRequest(Request):
    """Given under its own type, where the plan asks for Request."""


@pytest.mark.parametrize("mode", MODES)
async def test_a_missing_argument_or_value_names_what_the_call_was_given(mode: str) -> None:
    # A misspelled argument (`usr_id=`) or a value given under a subclass's type: the
    # message shows what came instead, next to what was missing.
    from resolvent import ResolventError

    container = make_container(mode)
    container.add_value_type(Request)

    async def user(user_id: str) -> str:
        return user_id

    async def handler(user_id: str, u: Annotated[str, Resolve(user)]) -> str:
        return u

    async def path(request: Request) -> str:
        return "/"

    async def route(p: Annotated[str, Resolve(path)]) -> str:
        return p

    with pytest.raises(ResolventError) as info:
        if mode == "interpreter":
            async with container.call(rounds=True) as call:
                await call.run(handler, usr_id="ada")
        else:
            await container.run(handler, usr_id="ada")
    assert str(info.value).startswith(
        "call argument 'user_id' needed by "
        "test_core_executor.test_a_missing_argument_or_value_names_what_the_call_was_given."
        "<locals>.user was not given; it was given usr_id.\n"
    )
    with pytest.raises(ResolventError) as info:
        rounds = mode == "interpreter"
        async with container.call(values={AdminRequest: AdminRequest()}, rounds=rounds) as call:
            await call.run(route)
    assert "(parameter 'request'); it was given AdminRequest.\n" in str(info.value)
