"""Promises of docs/concepts.md, docs/testing.md and the command line's help about the core
runtime and the compiler that a realistic slip in the code would break quietly.

Each test is written from a sentence of the docs (quoted above it), through the public API,
on asyncio and trio.
"""

import logging
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from resolvent import Container, Elicit, InvalidSignature, Resolve, Scope
from resolvent.__main__ import main


class Name(BaseModel):
    name: str


# -- teardown -------------------------------------------------------------------------------


# "if the body or resolution raised, that exception reaches the caller unchanged (same
# object); finalizer errors are logged and attached to it as notes" -- also an error of
# the finalizer's own that comes back grouped with the call's (a task group in a resource).
async def test_a_finalizer_error_grouped_with_the_calls_is_noted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    container = Container()

    async def connection() -> AsyncIterator[str]:
        try:
            yield "conn"
        except ValueError as exc:
            raise ExceptionGroup("rollback", [exc, RuntimeError("rollback broke")]) from None

    async def handler(c: Annotated[str, Resolve(connection)]) -> None:
        raise ValueError("handler failed")

    for _ in range(4):  # cold and hot: interpreted, then generated code
        caplog.clear()
        with (
            caplog.at_level(logging.DEBUG, logger="resolvent"),
            pytest.raises(ValueError, match="handler failed") as caught,
        ):
            await container.run(handler)
        notes = "\n".join(getattr(caught.value, "__notes__", []))
        assert "rollback broke" in notes
        assert any("connection" in r.getMessage() for r in caplog.records)


# docs/testing.md: "Leaving a block closes the APP/SESSION values built from its
# replacement" -- and resources close "in reverse order of set-up" (docs/concepts.md).
async def test_leaving_a_plain_override_closes_in_reverse_order_of_set_up() -> None:
    container = Container()
    events: list[str] = []

    @container.provider(scope=Scope.APP)
    def settings() -> Iterator[str]:
        yield "real"

    @container.provider(scope=Scope.APP)
    def db(s: Annotated[str, Resolve(settings)]) -> Iterator[str]:
        events.append(f"open db on {s}")
        yield f"db on {s}"
        events.append(f"close db on {s}")

    def fake_settings() -> Iterator[str]:
        events.append("open fake")
        yield "fake"
        events.append("close fake")

    async def handler(d: Annotated[str, Resolve(db)]) -> str:
        return d

    async with container:
        with container.override(settings, fake_settings):
            assert await container.run(handler) == "db on fake"
        assert events == ["open fake", "open db on fake", "close db on fake", "close fake"]


# -- sharing and threads ---------------------------------------------------------------------


# docs/concepts.md: resolutions of one call scope running at once share each CALL value,
# made once; a resolution whose maker is cancelled makes the value itself instead of
# failing with a cancellation that was not its own.
@pytest.mark.parametrize("blocked_flight", [False, True])
async def test_waiters_make_a_shared_call_value_whose_maker_was_cancelled(
    blocked_flight: bool,
) -> None:
    container = Container()
    entered, hold = anyio.Event(), anyio.Event()
    made: list[str] = []

    async def shared() -> str:
        made.append("shared")
        if len(made) == 1:
            entered.set()
            await anyio.sleep_forever()  # the first maker hangs until it is cancelled
        return "value"

    async def other() -> str:
        await hold.wait()
        return "other"

    async def first(v: Annotated[str, Resolve(shared)]) -> str:
        return v

    async def second(v: Annotated[str, Resolve(shared)]) -> str:
        return v

    async def flight(o: Annotated[str, Resolve(other)]) -> str:
        return o

    got: dict[str, Any] = {}
    async with container.call() as call, anyio.create_task_group() as group:
        if blocked_flight:  # the call's first resolution holds the flight meanwhile
            group.start_soon(call.resolve, container.compile(flight), {})
            await anyio.wait_all_tasks_blocked()
        maker = anyio.CancelScope()

        async def resolve_first() -> None:
            with maker:
                await call.resolve(container.compile(first), {})

        async def resolve_second() -> None:
            got.update(await call.resolve(container.compile(second), {}))

        group.start_soon(resolve_first)
        await entered.wait()
        group.start_soon(resolve_second)
        await anyio.wait_all_tasks_blocked()
        maker.cancel()
        with anyio.fail_after(10):
            while not got:
                await anyio.sleep(0.01)
        hold.set()
    assert got == {"v": "value"}
    assert made == ["shared", "shared"]


# docs/concepts.md: "a sync generator ... is abandoned during its set-up only at the
# deadline ... On any other cancellation the call waits for the set-up to finish and
# closes the resource with the rest."
async def test_a_cancelled_call_waits_for_a_sync_set_up_and_closes_it() -> None:
    container = Container()
    started, go = threading.Event(), threading.Event()
    events: list[str] = []

    def connection() -> Iterator[str]:
        started.set()
        go.wait(10)
        events.append("opened")
        try:
            yield "conn"
        finally:
            events.append("closed")

    async def handler(c: Annotated[str, Resolve(connection)]) -> str:
        return c

    async def cancel_once_started(scope: anyio.CancelScope) -> None:
        await anyio.to_thread.run_sync(started.wait)
        threading.Timer(0.05, go.set).start()
        scope.cancel()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(cancel_once_started, group.cancel_scope)
            await container.run(handler)
        assert events == ["opened", "closed"], "the call did not wait for its resource"
    finally:
        go.set()
        with anyio.fail_after(10):
            while len(events) < 2:
                await anyio.sleep(0.01)


# -- calls -----------------------------------------------------------------------------------


# docs/concepts.md: a handler's parameters are its call arguments; an argument it does not
# take is a mistake, refused whether the plan is still interpreted or already generated.
async def test_an_argument_the_handler_does_not_take_is_refused_hot_or_cold() -> None:
    container = Container()

    async def ping() -> str:
        return "pong"

    for _ in range(5):
        assert await container.run(ping) == "pong"
        with pytest.raises(TypeError, match="nmae"):
            await container.run(ping, nmae="typo")


# -- compile checks --------------------------------------------------------------------------


# docs/concepts.md: only CALL-scoped resolvers may ask; "InvalidSignature is raised as
# early as the information allows ... before any resolver runs".
@pytest.mark.parametrize("scope", [Scope.SESSION, Scope.APP])
def test_a_longer_lived_provider_that_asks_does_not_compile(scope: Scope) -> None:
    container = Container()

    @container.provider(scope=scope)
    async def who() -> Elicit[Name]:
        raise AssertionError("must not run")

    async def handler(n: Annotated[Name, Resolve(who)]) -> str:
        return n.name

    with pytest.raises(InvalidSignature, match="only CALL-scoped resolvers may ask"):
        container.compile(handler)


# DESIGN/concepts: "A provider may depend ... on call arguments / framework values only if
# it is CALL-scoped" -- a SESSION value would keep the first call's argument.
@pytest.mark.parametrize("scope", [Scope.SESSION, Scope.APP])
def test_a_longer_lived_provider_taking_a_call_argument_does_not_compile(scope: Scope) -> None:
    container = Container()

    @container.provider(scope=scope)
    async def account(user_id: str) -> str:
        raise AssertionError("must not run")

    async def handler(user_id: str, a: Annotated[str, Resolve(account)]) -> str:
        return a

    with pytest.raises(InvalidSignature, match=r"captive dependency.*'user_id'"):
        container.compile(handler)


def named_pool(label: str, opened: list[str]) -> Any:
    async def pool() -> str:  # two modules, each with its own `pool`
        opened.append(label)
        return label

    return pool


# `container.start(*targets)`: "Create APP values now" -- every target, however named.
async def test_start_creates_every_target_even_two_of_one_name() -> None:
    container = Container()
    opened: list[str] = []
    a_pool, b_pool = named_pool("a", opened), named_pool("b", opened)
    container.provide(a_pool, scope=Scope.APP)
    container.provide(b_pool, scope=Scope.APP)
    async with container:
        await container.start(a_pool, b_pool)
        assert sorted(opened) == ["a", "b"]


# -- the command line --------------------------------------------------------------------------


# `resolvent graph module:function` imports the module "from the working directory", as
# the console script (whose sys.path starts at its own bin directory) too.
def test_the_console_script_imports_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = f"promise_app_{id(tmp_path)}"
    (tmp_path / f"{module}.py").write_text(
        "from resolvent import Container\n"
        "container = Container()\n"
        "async def greet(name: str) -> str:\n"
        "    return name\n"
    )
    monkeypatch.chdir(tmp_path)
    here = {"", ".", str(Path(__file__).parent), str(tmp_path)}
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in here])
    try:
        assert main(["graph", f"{module}:greet"]) == 0, capsys.readouterr().err
    finally:
        sys.modules.pop(module, None)
    assert f"plan for {module}.greet(name)" in capsys.readouterr().out


# `resolvent bench --calls N`: "timed calls per mode" -- one is a valid count.
def test_bench_accepts_a_single_call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(Path(__file__).parent)
    code = main(["bench", "bench_sample:trivial", "--calls", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "resolvent bench bench_sample:trivial" in out
