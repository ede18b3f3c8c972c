"""Resources: every provider shape at every scope, teardown timing and order, the scope's
exception thrown in at the ``yield``, finalizer errors, cancellation, and early ends."""

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel

import resolvent
from modes import MODES, make_container, run
from resolvent import Container, Elicit, InputRequired, Resolve, Scope

# -- every provider shape -----------------------------------------------------------------


class Log:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.seen: dict[str, BaseException | None] = {}
        # A context manager class's exit arguments, the exception's traceback beside them.
        self.exits: dict[str, tuple[Any, Any, Any]] = {}

    def exit(self, name: str, tp: Any, exc: BaseException | None, tb: Any) -> None:
        self.seen[name] = exc
        self.exits[name] = (tp, tb, None if exc is None else exc.__traceback__)

    def add(self, event: str) -> None:
        self.events.append(event)


def shapes(log: Log, name: str) -> dict[str, tuple[Callable[..., Any], bool]]:
    """Providers of the value *name*, one per resource shape -> (fn, inline)."""

    async def async_gen() -> AsyncIterator[str]:
        log.add(f"open {name}")
        try:
            yield name
        except BaseException as exc:
            log.seen[name] = exc
            raise
        finally:
            log.add(f"close {name}")

    def sync_gen() -> Iterator[str]:
        log.add(f"open {name}")
        try:
            yield name
        except BaseException as exc:
            log.seen[name] = exc
            raise
        finally:
            log.add(f"close {name}")

    class AsyncCM:
        async def __aenter__(self) -> str:
            log.add(f"open {name}")
            return name

        async def __aexit__(self, tp: Any, exc: BaseException | None, tb: Any) -> None:
            log.exit(name, tp, exc, tb)
            log.add(f"close {name}")

    class SyncCM:
        def __enter__(self) -> str:
            log.add(f"open {name}")
            return name

        def __exit__(self, tp: Any, exc: BaseException | None, tb: Any) -> None:
            log.exit(name, tp, exc, tb)
            log.add(f"close {name}")

    def async_cm() -> contextlib.AbstractAsyncContextManager[str]:
        return AsyncCM()

    def sync_cm() -> contextlib.AbstractContextManager[str]:
        return SyncCM()

    @contextlib.asynccontextmanager
    async def decorated_async() -> AsyncIterator[str]:
        async with AsyncCM() as value:
            yield value

    @contextlib.contextmanager
    def decorated_sync() -> Iterator[str]:
        with SyncCM() as value:
            yield value

    return {
        "async generator": (async_gen, False),
        "generator in a thread": (sync_gen, False),
        "generator inline": (sync_gen, True),
        "async context manager": (async_cm, False),
        "context manager": (sync_cm, False),
        "context manager inline": (sync_cm, True),
        "@asynccontextmanager": (decorated_async, False),
        "@contextmanager": (decorated_sync, False),
    }


SHAPES = list(shapes(Log(), "x"))
SCOPES = [Scope.CALL, Scope.SESSION, Scope.APP]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("scope", SCOPES, ids=lambda s: s.name)
async def test_each_shape_lives_exactly_as_long_as_its_scope(shape: str, scope: Scope) -> None:
    log = Log()
    container = Container()
    fn, inline = shapes(log, "r")[shape]
    container.provide(fn, scope=scope, inline=inline)

    async def handler(r: Annotated[str, Resolve(fn)]) -> str:
        log.add("body")
        return r

    async with container:
        async with container.session() as session:
            assert await session.run(handler) == "r"
            log.add("call over")
            assert await session.run(handler) == "r"
            log.add("session closing")
        log.add("app closing")
    log.add("app closed")

    one_call = ["open r", "body", "close r"]
    expected = {
        Scope.CALL: [*one_call, "call over", *one_call, "session closing", "app closing"],
        Scope.SESSION: [
            *["open r", "body", "call over", "body", "session closing", "close r"],
            "app closing",
        ],
        Scope.APP: [
            *["open r", "body", "call over", "body", "session closing", "app closing"],
            "close r",
        ],
    }[scope]
    assert log.events == [*expected, "app closed"]
    assert log.seen.get("r") is None  # a clean end throws nothing in
    assert log.exits.get("r", (None, None, None)) == (None, None, None)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("scope", SCOPES, ids=lambda s: s.name)
async def test_the_exception_ending_the_scope_is_thrown_in(shape: str, scope: Scope) -> None:
    log = Log()
    container = Container()
    fn, inline = shapes(log, "r")[shape]
    container.provide(fn, scope=scope, inline=inline)
    boom = LookupError("boom")

    async def handler(r: Annotated[str, Resolve(fn)]) -> str:
        raise boom

    with pytest.raises(LookupError) as caught:
        async with container, container.session() as session:
            await session.run(handler)
    assert caught.value is boom
    assert log.seen["r"] is boom
    if "context manager" in shape:  # its exit is given the three, as `with` gives them
        tp, tb, traceback = log.exits["r"]
        assert tp is LookupError and tb is traceback and tb is not None
    assert log.events == ["open r", "close r"]


# -- order and exceptions ---------------------------------------------------------------

EVENTS: list[str] = []


async def outer() -> AsyncIterator[str]:
    EVENTS.append("open outer")
    try:
        yield "outer"
    except Exception as exc:
        EVENTS.append(f"outer saw {exc!r}")
        raise
    finally:
        EVENTS.append("close outer")


def middle(o: Annotated[str, Resolve(outer)]) -> Iterator[str]:
    EVENTS.append("open middle")
    try:
        yield f"middle({o})"
    except Exception as exc:
        EVENTS.append(f"middle swallowed {exc!r}")  # and does not re-raise
    finally:
        EVENTS.append("close middle")


@contextlib.asynccontextmanager
async def inner(m: Annotated[str, Resolve(middle)]) -> AsyncIterator[str]:
    EVENTS.append("open inner")
    try:
        yield f"inner({m})"
    finally:
        EVENTS.append("close inner")


async def uses_all(i: Annotated[str, Resolve(inner)]) -> str:
    EVENTS.append(f"body {i}")
    return i


async def fails_with_all(i: Annotated[str, Resolve(inner)]) -> str:
    raise KeyError("body")


@pytest.fixture(autouse=True)
def _clear() -> None:
    EVENTS.clear()


async def test_teardown_runs_in_reverse_order_of_setup() -> None:
    assert await Container().run(uses_all) == "inner(middle(outer))"
    assert EVENTS == [
        "open outer",
        "open middle",
        "open inner",
        "body inner(middle(outer))",
        "close inner",
        "close middle",
        "close outer",
    ]


async def test_a_generator_that_swallows_the_exception_cannot_hide_it() -> None:
    with pytest.raises(KeyError) as caught:
        await Container().run(fails_with_all)
    assert caught.value.args == ("body",)
    assert EVENTS[-5:] == [
        "close inner",
        "middle swallowed KeyError('body')",
        "close middle",
        "outer saw KeyError('body')",  # every generator gets the same exception
        "close outer",
    ]


def failing_closer(name: str, error: BaseException) -> Callable[[], AsyncIterator[str]]:
    async def resource() -> AsyncIterator[str]:
        try:
            yield name
        finally:
            EVENTS.append(f"close {name}")
            raise error

    resource.__qualname__ = f"closer_{name}"
    return resource


async def test_several_finalizer_errors_form_one_group_and_all_run() -> None:
    e1, e2 = ValueError("one"), OSError("two")
    a, b = failing_closer("a", e1), failing_closer("b", e2)

    async def clean() -> AsyncIterator[str]:
        yield "c"
        EVENTS.append("close c")

    async def handler(
        x: Annotated[str, Resolve(a)],
        c: Annotated[str, Resolve(clean)],
        y: Annotated[str, Resolve(b)],
    ) -> str:
        return x + c + y

    with pytest.raises(ExceptionGroup) as caught:
        await Container().run(handler)
    assert set(map(id, caught.value.exceptions)) == {id(e1), id(e2)}
    assert sorted(EVENTS) == ["close a", "close b", "close c"]


async def test_one_finalizer_error_is_raised_as_itself() -> None:
    e1 = ValueError("one")
    a = failing_closer("a", e1)

    async def handler(x: Annotated[str, Resolve(a)]) -> str:
        return x

    with pytest.raises(ValueError) as caught:
        await Container().run(handler)
    assert caught.value is e1


async def test_finalizer_errors_never_mask_the_body_exception() -> None:
    e1, e2 = ValueError("one"), OSError("two")
    a, b = failing_closer("a", e1), failing_closer("b", e2)
    body = LookupError("body")

    async def handler(x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)]) -> str:
        raise body

    with pytest.raises(LookupError) as caught:
        await Container().run(handler)
    assert caught.value is body
    notes = "\n".join(caught.value.__notes__)
    assert repr(e1) in notes and repr(e2) in notes
    assert sorted(EVENTS) == ["close a", "close b"]


async def test_a_context_manager_re_raising_the_scope_exception_is_not_a_finalizer_error() -> None:
    body = LookupError("body")

    class Reraises:
        async def __aenter__(self) -> int:
            return 1

        async def __aexit__(self, tp: Any, exc: BaseException | None, tb: Any) -> None:
            if exc is not None:
                raise exc

    def res() -> contextlib.AbstractAsyncContextManager[int]:
        return Reraises()

    async def handler(x: Annotated[int, Resolve(res)]) -> None:
        raise body

    with pytest.raises(LookupError) as caught:
        await Container().run(handler)
    assert caught.value is body
    assert not getattr(body, "__notes__", None)


async def test_a_generator_raising_a_new_error_in_rollback_reports_both() -> None:
    body = LookupError("body")

    async def res() -> AsyncIterator[int]:
        try:
            yield 1
        except LookupError as exc:
            raise RuntimeError("rollback failed") from exc

    async def handler(x: Annotated[int, Resolve(res)]) -> None:
        raise body

    with pytest.raises(LookupError) as caught:
        await Container().run(handler)
    assert caught.value is body
    assert any("rollback failed" in note for note in caught.value.__notes__)


# -- cancellation -----------------------------------------------------------------------


def slow_closer(name: str, started: list[str]) -> Callable[[], AsyncIterator[str]]:
    async def resource() -> AsyncIterator[str]:
        started.append(name)
        try:
            yield name
        finally:
            # Several checkpoints: each would raise at once if teardown were not shielded.
            for _ in range(3):
                await anyio.lowlevel.checkpoint()
            EVENTS.append(f"closed {name} in full")

    return resource


@pytest.mark.parametrize(
    "options",
    [{}, {"concurrent": True}, {"call_timeout": 60}],
    ids=["sequential", "concurrent", "timeout"],
)
async def test_teardown_runs_to_completion_when_the_call_is_cancelled(
    options: dict[str, Any],
) -> None:
    started: list[str] = []
    a, b, c = (slow_closer(n, started) for n in "abc")
    in_body = anyio.Event()

    def sync_closer() -> Iterator[str]:
        try:
            yield "d"
        finally:
            EVENTS.append("closed d in full")

    async def handler(
        x: Annotated[str, Resolve(a)],
        y: Annotated[str, Resolve(b)],
        d: Annotated[str, Resolve(sync_closer)],
        z: Annotated[str, Resolve(c)],
    ) -> None:
        in_body.set()
        await anyio.Event().wait()  # forever, until cancelled

    container = Container(**options)
    async with anyio.create_task_group() as group:
        group.start_soon(container.run, handler)
        await in_body.wait()
        group.cancel_scope.cancel()
    assert sorted(EVENTS) == [f"closed {n} in full" for n in "abcd"]
    if not options.get("concurrent"):  # concurrent: independent, so any order is valid
        closing = [e.split()[1] for e in EVENTS if e != "closed d in full"]
        assert closing == list(reversed(started))


async def test_a_resolver_cancelled_during_setup_leaves_no_resource_open() -> None:
    started: list[str] = []
    a = slow_closer("a", started)
    reached = anyio.Event()

    async def stuck(x: Annotated[str, Resolve(a)]) -> str:
        reached.set()
        await anyio.Event().wait()
        return "never"

    async def handler(s: Annotated[str, Resolve(stuck)]) -> None:
        raise AssertionError("not reached")

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(Container().run, handler)
            await reached.wait()
            scope.cancel()
    assert EVENTS == ["closed a in full"]


# -- early ends -------------------------------------------------------------------------


async def test_resources_of_a_call_that_fails_in_another_resolver_close_at_once() -> None:
    started: list[str] = []
    a = slow_closer("a", started)
    failure = ValueError("resolver failed")

    async def broken(x: Annotated[str, Resolve(a)]) -> str:
        raise failure

    async def handler(b: Annotated[str, Resolve(broken)]) -> None:
        raise AssertionError("not reached")

    container = Container()
    with pytest.raises(ValueError) as caught:
        await container.run(handler)
    assert caught.value is failure
    assert EVENTS == ["closed a in full"]  # closed before the caller saw the error


class Answer(BaseModel):
    text: str


async def test_resources_of_a_pending_round_close_when_the_round_ends() -> None:
    started: list[str] = []
    a = slow_closer("a", started)

    async def ask(x: Annotated[str, Resolve(a)]) -> Elicit[Answer] | Answer:
        return Elicit("name?", Answer)

    async def handler(x: Annotated[str, Resolve(a)], name: Annotated[Answer, Resolve(ask)]) -> str:
        raise AssertionError("not reached")

    container = Container()
    with pytest.raises(InputRequired):
        async with container.call(rounds=True) as call:
            try:
                await call.run(handler)
            finally:
                assert EVENTS == []  # still open while the round is live
    assert EVENTS == ["closed a in full"]
    assert started == ["a"]


# -- providers whose task group spans their yield ---------------------------------------


@pytest.mark.parametrize(
    "options",
    [{}, {"concurrent": True}, {"call_timeout": 60}],
    ids=["sequential", "concurrent", "timeout"],
)
async def test_a_task_group_spanning_the_yield_works(options: dict[str, Any]) -> None:
    tasks_done: list[str] = []

    async def with_tasks() -> AsyncIterator[str]:
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(anyio.lowlevel.checkpoint)
                yield "tasks"
        finally:
            tasks_done.append("left group")

    async def cm_tasks() -> AsyncIterator[str]:
        with anyio.CancelScope():
            yield "scope"

    async def plain() -> str:
        return "plain"

    async def handler(
        t: Annotated[str, Resolve(with_tasks)],
        p: Annotated[str, Resolve(plain)],
        s: Annotated[str, Resolve(cm_tasks)],
    ) -> str:
        return f"{t} {p} {s}"

    container = Container(**options)
    assert await container.run(handler) == "tasks plain scope"
    assert tasks_done == ["left group"]
    error = ZeroDivisionError()
    with pytest.raises(ZeroDivisionError) as caught:
        async with container.call() as call:
            await call.run(handler)
            raise error
    # The group re-raises the thrown exception wrapped; that is no teardown failure.
    assert caught.value is error
    assert not getattr(error, "__notes__", None)
    assert tasks_done == ["left group"] * 2

    async def failing(
        t: Annotated[str, Resolve(with_tasks)], s: Annotated[str, Resolve(cm_tasks)]
    ) -> str:
        raise error

    # The handler raising in generated code (from the first call): the resources held in
    # tasks of their own close too.
    generated = Container(**options)
    generated._plans.tiered = False
    with anyio.fail_after(10), pytest.raises(ZeroDivisionError):
        await generated.run(failing)
    assert tasks_done == ["left group"] * 3


@pytest.mark.parametrize("mode", MODES)
async def test_a_resource_opening_in_a_task_of_its_own_as_its_caller_gives_up_closes(
    mode: str,
) -> None:
    # A resource holding a task group across its `yield` opens in a task of its own; the
    # caller is cancelled just as it opens: the call ends cancelled, the resource closes.
    events: list[str] = []
    caller = anyio.CancelScope()

    async def held() -> AsyncIterator[str]:
        async with anyio.create_task_group():
            caller.cancel()  # the caller gives up as the resource opens
            events.append("open")
            yield "held"
        events.append("closed")

    async def handler(h: Annotated[str, Resolve(held)]) -> str:
        return h

    container = make_container(mode)
    with anyio.fail_after(10):
        with caller:
            await run(container, handler, mode)
        await anyio.sleep(0)  # a holder task closing on its own gets to run
    assert caller.cancelled_caught
    assert events == ["open", "closed"]


# -- a failed teardown is logged -------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("level", [logging.ERROR, logging.DEBUG])
async def test_a_failed_teardown_is_logged_in_one_line_traceback_on_debug(
    mode: str, level: int, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator sees the failure in the ``resolvent`` log as one line naming the resolver
    and the exception, whichever way the call ran; the traceback rides along only when the
    ``resolvent`` logger is enabled for DEBUG."""
    container = make_container(mode)

    @container.provider(scope=Scope.CALL)
    async def session() -> AsyncIterator[str]:
        yield "db"
        raise OSError("connection reset while closing")

    async def handler(db: Annotated[str, Resolve(session)]) -> str:
        return db

    with caplog.at_level(level, logger="resolvent"), contextlib.suppress(Exception):
        await run(container, handler, mode)
    [record] = [r for r in caplog.records if r.name == "resolvent"]
    assert record.levelno == logging.ERROR
    message = record.getMessage()
    assert message.startswith("resolvent: teardown of ")
    assert "session failed: OSError: connection reset while closing" in message
    assert "\n" not in message
    if level == logging.DEBUG:
        assert record.exc_info is not None
        assert isinstance(record.exc_info[1], OSError)
    else:
        assert not record.exc_info
        assert "Traceback" not in caplog.text
    # The record names resolvent's teardown code, not a logging helper in between.
    assert Path(resolvent.__file__).parent in Path(record.pathname).parents
    assert record.funcName not in ("error", "failed", "_log")
