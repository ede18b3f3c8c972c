"""Fault injection: random graphs of resources (async generators, generators, async
context managers, plain resolvers) at random scopes, with failures and cancellations
injected at random points (setup, body, teardown), run sequentially, concurrently and
under a deadline, on asyncio and trio.

After every run: each resource that was opened was closed exactly once; a resource was
closed before every resource it depends on (and, sequentially, in reverse order of
setup); the exception that ended the scope was thrown into every generator; and the
caller saw the right exception, with every finalizer error reported."""

import contextlib
import logging
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resolvent import Container, Resolve, Scope

KINDS = ("async generator", "generator", "async context manager", "plain")
SYNC_ACTIONS = ("ok", "raise")
ASYNC_ACTIONS = ("ok", "raise", "cancel")
MODES = ("sequential", "concurrent", "deadline")


class SetupError(Exception):
    pass


class BodyError(Exception):
    pass


class TeardownError(Exception):
    pass


@dataclass(frozen=True)
class Node:
    kind: str
    deps: tuple[int, ...]
    scope: Scope
    setup: str
    teardown: str
    swallow: bool


@st.composite
def graphs(draw: st.DrawFn) -> tuple[tuple[Node, ...], str, str]:
    nodes: list[Node] = []
    for index in range(draw(st.integers(1, 5))):
        deps = tuple(sorted(draw(st.sets(st.integers(0, index - 1), max_size=3)))) if index else ()
        longest = min((nodes[d].scope for d in deps), default=Scope.APP)
        scope = draw(st.sampled_from([s for s in Scope if s <= longest]))
        kind = draw(st.sampled_from(KINDS))
        actions = SYNC_ACTIONS if kind == "generator" else ASYNC_ACTIONS
        # Mostly clean runs, so failures combine rather than always stopping at once.
        weighted = st.sampled_from(("ok", "ok", *actions))
        setup = draw(weighted)
        teardown = draw(weighted) if kind != "plain" else "ok"
        nodes.append(Node(kind, deps, scope, setup, teardown, draw(st.booleans())))
    return (
        tuple(nodes),
        draw(st.sampled_from(("ok", "ok", *ASYNC_ACTIONS))),
        draw(st.sampled_from(MODES)),
    )


class World:
    """Builds the providers for one graph and records what happened to them."""

    def __init__(self, nodes: tuple[Node, ...], body: str) -> None:
        self.nodes = nodes
        self.body_action = body
        self.scope = anyio.CancelScope()
        self.opened: list[int] = []
        self.closed: list[int] = []
        self.thrown: dict[int, BaseException | None] = {}
        self.fired: list[tuple[str, BaseException | None]] = []  # setup/body, in order
        self.teardown_errors: list[BaseException] = []
        self.providers: list[Any] = []
        # A shared sync resource whose set-up is still in its thread when its scope
        # closes is abandoned: closed later by that thread, as soon as the set-up returns.
        self.late: set[int] = set()
        self.late_errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.in_threads = 0  # sync resources between set-up and teardown
        for index, node in enumerate(nodes):
            self.providers.append(self._build(index, node))

    # -- actions -------------------------------------------------------------------------

    async def act(self, action: str, error: BaseException, record: list[Any]) -> None:
        await anyio.lowlevel.checkpoint()  # let concurrent branches interleave
        if action == "raise":
            record.append(("raise", error) if record is self.fired else error)
            raise error
        if action == "cancel":
            if record is self.fired:
                record.append(("cancel", None))
            self.scope.cancel()
            await anyio.lowlevel.checkpoint()  # raises, unless shielded (teardown)

    def act_sync(self, action: str, error: BaseException, record: list[Any]) -> None:
        if action == "raise":
            record.append(("raise", error) if record is self.fired else error)
            raise error

    async def setup(self, index: int) -> int:
        await self.act(self.nodes[index].setup, SetupError(f"setup {index}"), self.fired)
        if self.nodes[index].kind != "plain":
            self.opened.append(index)
        return index

    def setup_sync(self, index: int) -> int:
        with self.lock:
            self.in_threads += 1
        try:
            self.act_sync(self.nodes[index].setup, SetupError(f"setup {index}"), self.fired)
        except BaseException:
            with self.lock:
                self.in_threads -= 1
            raise
        self.opened.append(index)
        return index

    def _closing(self, index: int, seen: BaseException | None) -> TeardownError:
        self.closed.append(index)
        self.thrown[index] = seen
        return TeardownError(f"teardown {index}")

    async def teardown(self, index: int, seen: BaseException | None) -> None:
        error = self._closing(index, seen)
        await self.act(self.nodes[index].teardown, error, self.teardown_errors)

    def teardown_sync(self, index: int, seen: BaseException | None) -> None:
        frame: Any = sys._getframe(1)
        while frame is not None and frame.f_code.co_name != "close_late":
            frame = frame.f_back
        if frame is not None:  # abandoned, closed by its own thread
            self.late.add(index)
        error = self._closing(index, seen)
        try:
            record = self.late_errors if frame is not None else self.teardown_errors
            self.act_sync(self.nodes[index].teardown, error, record)
        finally:
            with self.lock:
                self.in_threads -= 1

    async def body(self, **values: Any) -> None:
        await self.act(self.body_action, BodyError("body"), self.fired)

    # -- providers -----------------------------------------------------------------------

    def _build(self, index: int, node: Node) -> Any:
        world = self

        class Managed:
            async def __aenter__(self) -> int:
                return await world.setup(index)

            async def __aexit__(self, tp: Any, exc: BaseException | None, tb: Any) -> bool:
                await world.teardown(index, exc)
                return node.swallow

        reraise = "pass" if node.swallow else "raise"
        source = {
            "async generator": f"""
async def NAME(PARAMS) -> AsyncIterator[int]:
    value = await W.setup({index})
    try:
        yield value
    except BaseException as exc:
        await W.teardown({index}, exc)
        {reraise}
    else:
        await W.teardown({index}, None)
""",
            "generator": f"""
def NAME(PARAMS) -> Iterator[int]:
    value = W.setup_sync({index})
    try:
        yield value
    except BaseException as exc:
        W.teardown_sync({index}, exc)
        {reraise}
    else:
        W.teardown_sync({index}, None)
""",
            "async context manager": """
def NAME(PARAMS) -> contextlib.AbstractAsyncContextManager[int]:
    return MANAGED()
""",
            "plain": f"""
async def NAME(PARAMS) -> int:
    return await W.setup({index})
""",
        }[node.kind]
        deps = {d: self.providers[d] for d in node.deps}
        return define(source, f"n{index}", deps, W=self, MANAGED=Managed)

    def handler(self) -> Any:
        source = """
async def NAME(PARAMS) -> None:
    await W.body()
"""
        return define(source, "handler", dict(enumerate(self.providers)), W=self)


def define(source: str, name: str, deps: dict[Any, Any], **names: Any) -> Any:
    """Define a function from *source*, with a resolved parameter per entry of *deps*."""
    params = ", ".join(f"d{key}: Annotated[Any, Resolve(P{key})]" for key in deps)
    namespace: dict[str, Any] = {
        "Annotated": Annotated,
        "Any": Any,
        "Resolve": Resolve,
        "AsyncIterator": AsyncIterator,
        "Iterator": Iterator,
        "contextlib": contextlib,
        **names,
        **{f"P{key}": fn for key, fn in deps.items()},
    }
    exec(source.replace("NAME", name).replace("PARAMS", params), namespace)
    return namespace[name]


class Recorder(logging.Handler):
    """Keeps the log records it is given."""

    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.ERROR)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def depends_on(nodes: tuple[Node, ...], later: int, earlier: int) -> bool:
    stack = list(nodes[later].deps)
    while stack:
        d = stack.pop()
        if d == earlier:
            return True
        stack.extend(nodes[d].deps)
    return False


def reported(outcome: BaseException | None) -> tuple[list[BaseException], str]:
    """The errors *outcome* carries (itself or a group's members) and its notes."""
    if outcome is None:
        return [], ""
    notes = "\n".join(getattr(outcome, "__notes__", ()))
    if isinstance(outcome, ExceptionGroup):
        return list(outcome.exceptions), notes
    return [outcome], notes


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=graphs())
async def test_random_faults_close_everything_once_in_order(
    case: tuple[tuple[Node, ...], str, str],
) -> None:
    nodes, body, mode = case
    world = World(nodes, body)
    container = Container(
        concurrent=mode == "concurrent", call_timeout=60 if mode == "deadline" else None
    )
    for node, provider in zip(nodes, world.providers, strict=True):
        container.provide(provider, scope=node.scope)
    handler = world.handler()

    outcome: BaseException | None = None
    logged: list[logging.LogRecord] = []
    handler_ = Recorder(logged)
    logging.getLogger("resolvent").addHandler(handler_)
    try:
        with anyio.fail_after(10), world.scope:
            try:
                async with container, container.session() as session:
                    await session.run(handler)
            except Exception as exc:
                outcome = exc
        # An abandoned set-up (see World.late) finishes in its own thread: wait for it.
        for _ in range(1000):
            if not world.in_threads:
                break
            await anyio.sleep(0.005)
    finally:
        logging.getLogger("resolvent").removeHandler(handler_)
    late = world.late
    # A shared (APP, SESSION) value starts in its scope's home task. When the call stops
    # waiting for it (a sibling branch failed first), its own failure is logged instead.
    logged_starts = [r.exc_info[1] for r in logged if r.exc_info and "failed to start" in r.msg]

    # 1. every opened resource closed exactly once, nothing else closed
    assert sorted(world.closed) == sorted(world.opened)
    assert len(set(world.closed)) == len(world.closed)

    # 2. a resource is closed before everything it depends on
    position = {node: i for i, node in enumerate(world.closed)}
    for later in position:
        for earlier in position:
            if later not in late and depends_on(nodes, later, earlier):
                assert position[later] < position[earlier], (later, earlier)
    if mode == "sequential":
        for scope in Scope:
            opened = [i for i in world.opened if nodes[i].scope is scope and i not in late]
            closed = [i for i in world.closed if nodes[i].scope is scope and i not in late]
            assert closed == opened[::-1]

    # 3. the caller saw the right exception
    raised = [
        error
        for what, error in world.fired
        if what == "raise" and not any(error is e for e in logged_starts)
    ]
    cancelled = any(what == "cancel" for what, _ in world.fired)
    errors, notes = reported(outcome)
    if raised:
        # Sequentially, the first failure ends the call. Concurrently, branches that were
        # already past their last checkpoint (or in a worker thread) may fail too: the
        # first one the call saw is raised and the others are attached as notes.
        first = raised[0] if mode == "sequential" else outcome
        assert outcome is first and any(outcome is e for e in raised)
        for other in raised:
            assert other is outcome or repr(other) in notes
        for error in world.teardown_errors:
            assert repr(error) in notes
        # 4. that same exception was thrown into every generator and context manager
        assert all(world.thrown[i] is first for i in world.closed if i not in late)
    elif cancelled:
        assert outcome is None
        assert world.scope.cancelled_caught or world.scope.cancel_called
    elif world.teardown_errors:
        for error in world.teardown_errors:
            assert any(error is e for e in errors) or repr(error) in notes
        assert all(e in world.teardown_errors for e in errors)
    else:
        assert outcome is None
        if not any(nodes[i].teardown == "cancel" for i in world.closed):
            assert all(world.thrown[i] is None for i in world.closed if i not in late)


@pytest.mark.parametrize("concurrent", [False, True], ids=["sequential", "concurrent"])
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_provider_that_yields_twice_is_named_in_the_error(
    kind: str, concurrent: bool
) -> None:
    # A provider yields exactly one value; one that yields again is a bug in it, and the
    # error at teardown says which provider it is (a resource in a task of its own too).
    container = Container(concurrent=concurrent)

    async def twice_async() -> AsyncIterator[str]:
        yield "a"
        yield "b"

    def twice_sync() -> Iterator[str]:
        yield "a"
        yield "b"

    twice = container.provider(twice_async if kind == "async" else twice_sync)

    async def handler(value: Annotated[str, Resolve(twice)]) -> str:
        return value

    with pytest.raises(RuntimeError) as info:
        await container.run(handler)
    assert str(info.value) == (
        f"test_lifecycle_faults.test_a_provider_that_yields_twice_is_named_in_the_error."
        f"<locals>.twice_{kind} yielded more than once; a provider yields exactly one value"
    )


@pytest.mark.parametrize("concurrent", [False, True], ids=["sequential", "concurrent"])
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_provider_that_never_yields_is_named_with_the_fix(
    kind: str, concurrent: bool
) -> None:
    container = Container(concurrent=concurrent)

    async def empty_async() -> AsyncIterator[str]:
        if False:  # pragma: no cover - a generator that returns before its yield
            yield "never"

    def empty_sync() -> Iterator[str]:
        if False:  # pragma: no cover
            yield "never"

    empty = container.provider(empty_async if kind == "async" else empty_sync)

    async def handler(value: Annotated[str, Resolve(empty)]) -> str:
        return value

    with pytest.raises(RuntimeError) as info:
        await container.run(handler)
    assert str(info.value) == (
        f"test_lifecycle_faults.test_a_provider_that_never_yields_is_named_with_the_fix."
        f"<locals>.empty_{kind} finished without yielding a value\n"
        "  fix: make it `yield` its value exactly once on every path"
    )


async def test_several_teardowns_failing_after_a_success_are_one_group_that_says_so() -> None:
    container = Container()

    @container.provider
    async def first() -> AsyncIterator[str]:
        yield "first"
        raise RuntimeError("first broke")

    @container.provider
    async def second() -> AsyncIterator[str]:
        yield "second"
        raise RuntimeError("second broke")

    async def handler(a: Annotated[str, Resolve(first)], b: Annotated[str, Resolve(second)]) -> str:
        return a + b

    with pytest.raises(BaseExceptionGroup) as info:
        await container.run(handler)
    assert info.value.message == "several finalizers failed during teardown"
    assert sorted(map(str, info.value.exceptions)) == ["first broke", "second broke"]


@pytest.mark.parametrize("mode", ["concurrent", "deadline"])
@pytest.mark.parametrize("failing", ["handler", "teardown"])
async def test_a_call_failing_as_its_caller_is_cancelled_raises_its_error(
    failing: str, mode: str
) -> None:
    # The caller cancelled while its call fails (the handler raising, or a finalizer
    # after a success): the call's error still reaches it, not the cancellation.
    container = Container(
        **{"concurrent": {"concurrent": True}, "deadline": {"call_timeout": 30}}[mode]
    )
    caller = anyio.CancelScope()

    @container.provider
    async def connection() -> AsyncIterator[str]:
        yield "conn"
        if failing == "teardown":
            caller.cancel()
            raise TeardownError("teardown")

    async def handler(conn: Annotated[str, Resolve(connection)]) -> str:
        if failing == "handler":
            caller.cancel()
            raise BodyError("handler")
        return conn

    seen: list[BaseException] = []
    with caller:
        try:
            async with container.call() as call:
                await call.run(handler)
        except Exception as exc:
            seen.append(exc)
    assert [str(e) for e in seen] == [failing]


@pytest.mark.parametrize("way", ["call scope", "generated"])
async def test_a_finalizer_failing_leaves_the_others_given_the_calls_error(way: str) -> None:
    # The call fails and the last resource's teardown fails too: the resources set up
    # before it are still given the call's error (to roll back), not a clean end.
    container = Container()
    container._plans.tiered = way == "call scope"  # "generated": its code from the start
    seen: list[str] = []

    @container.provider
    async def first() -> AsyncIterator[str]:
        try:
            yield "first"
        except BaseException as exc:
            seen.append(repr(exc))
            raise
        seen.append("clean end")

    @container.provider
    async def second() -> AsyncIterator[str]:
        try:
            yield "second"
        finally:
            raise TeardownError("second broke")

    async def handler(a: Annotated[str, Resolve(first)], b: Annotated[str, Resolve(second)]) -> str:
        raise BodyError("the call failed")

    with pytest.raises(BodyError) as caught:
        if way == "call scope":
            async with container.call() as call:
                await call.run(handler)
        else:
            await container.run(handler)
    assert seen == ["BodyError('the call failed')"]
    assert caught.value.__notes__ == [
        "resolvent: a finalizer also failed during teardown: TeardownError('second broke')"
    ]
