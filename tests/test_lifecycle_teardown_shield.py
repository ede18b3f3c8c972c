"""Property: `container.run` tears its CALL resources down with the same guarantee as a
call scope entered with its shield, a cancel scope, before any setup. `run` and
``async with container.call()`` put that shield in only once a finalizer suspends.

Random chains of resources (async generators and async context-manager classes), each
holding nothing, a task group, a cancel scope or a deadline across its ``yield``, with
teardowns that check for cancellation in every way anyio offers (checkpoints, a lock,
``checkpoint_if_cancelled``, a scope of their own, work after leaving the held scope),
cancel what they hold, wait while the caller is cancelled from another task, cancel the
caller themselves, or fail; the handler returns, raises, is cancelled, or cancels the
caller and returns. Each case runs
through `container.run`, through a call scope, and through a call scope whose shield is
entered before any setup (the reference), on asyncio and trio: every finalizer must run to
its end, in reverse order, and all three must agree on everything that happened and on
what the caller saw.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Annotated, Any
from unittest.mock import patch

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modes import MODES, make_container, run
from resolvent import Container, Resolve
from resolvent._container import call as _call
from resolvent._runtime import shield as _shield
from resolvent._runtime import teardown as _teardown

SHAPES = ("generator", "context manager")
HOLDS = ("nothing", "task group", "cancel scope", "deadline")
ACTIONS = (
    "checkpoint",
    "sleep",
    "lock",
    "checkpoint if cancelled",
    "own scope",
    "cancel own hold",
    "caller cancelled meanwhile",
    "cancel caller",
)
BODIES = ("returns", "raises", "is cancelled", "cancels the caller and returns")


class BodyError(Exception):
    pass


class TeardownError(Exception):
    pass


@dataclass(frozen=True)
class Resource:
    shape: str
    hold: str
    inside: tuple[str, ...]  # teardown within the held scope
    after: tuple[str, ...]  # teardown after leaving it
    fails: bool


resources = st.builds(
    Resource,
    shape=st.sampled_from(SHAPES),
    hold=st.sampled_from(HOLDS),
    inside=st.lists(st.sampled_from(ACTIONS), max_size=3).map(tuple),
    after=st.lists(st.sampled_from(ACTIONS), max_size=3).map(tuple),
    fails=st.booleans(),
)


class Entered:
    """An async context-manager class around a resource's generator."""

    def __init__(self, manager: AbstractAsyncContextManager[int]) -> None:
        self.manager = manager

    async def __aenter__(self) -> int:
        return await self.manager.__aenter__()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        return await self.manager.__aexit__(kind, error, traceback)


class World:
    """One run's providers, handler and record of what happened."""

    def __init__(self, specs: Sequence[Resource], body: str) -> None:
        self.specs = specs
        self.body = body
        self.events: list[str] = []
        self.caller: anyio.CancelScope | None = None
        self.in_body = anyio.Event()
        self.held: dict[int, anyio.CancelScope] = {}
        self.wanted = anyio.Event()  # a finalizer wants the caller cancelled meanwhile
        self.done = anyio.Event()  # ... and it was

    @asynccontextmanager
    async def hold(self, index: int, spec: Resource) -> AsyncIterator[None]:
        if spec.hold == "task group":
            async with anyio.create_task_group() as group:
                # A child that is done by the yield: on asyncio a child cancelled with
                # the caller cancels its group too, shield or not (see RELIABILITY.md).
                await group.start(started)
                self.held[index] = group.cancel_scope
                yield
        elif spec.hold in ("cancel scope", "deadline"):
            with (
                anyio.CancelScope()
                if spec.hold == "cancel scope"
                else anyio.move_on_after(60) as scope
            ):
                self.held[index] = scope
                yield
        else:
            yield

    async def act(self, index: int, action: str) -> None:
        if action == "checkpoint":
            await anyio.lowlevel.checkpoint()
        elif action == "sleep":
            await anyio.sleep(0)
        elif action == "lock":
            async with anyio.Lock():
                await anyio.lowlevel.checkpoint()
        elif action == "checkpoint if cancelled":
            await anyio.lowlevel.checkpoint_if_cancelled()
        elif action == "own scope":
            with anyio.CancelScope():
                await anyio.lowlevel.checkpoint()
        elif action == "cancel own hold":
            if index in self.held:
                self.held[index].cancel()
            await anyio.lowlevel.checkpoint()
        elif action == "caller cancelled meanwhile":
            assert self.caller is not None
            if self.caller.cancel_called:
                await anyio.lowlevel.checkpoint()
            else:  # suspended here while another task cancels the caller
                self.wanted.set()
                await self.done.wait()
        else:
            # After a checkpoint: a finalizer that cancels its own caller before it
            # first suspends is not shielded from that (see resolvent._runtime.shield).
            await anyio.lowlevel.checkpoint()
            assert self.caller is not None
            self.caller.cancel()
        self.events.append(f"{index}: {action}")

    def generator(self, index: int) -> Callable[[int], AsyncIterator[int]]:
        spec = self.specs[index]

        async def resource(dep: int) -> AsyncIterator[int]:
            self.events.append(f"open {index}")
            try:
                async with self.hold(index, spec):
                    try:
                        yield index
                    finally:
                        for action in spec.inside:
                            await self.act(index, action)
            finally:
                for action in spec.after:
                    await self.act(index, action)
                self.events.append(f"closed {index}")
                if spec.fails:
                    raise TeardownError(index)

        return resource

    def provider(self, index: int) -> Callable[..., Any]:
        previous = self.providers[index - 1] if index else origin
        dep = Annotated[int, Resolve(previous)]
        generator = self.generator(index)
        if self.specs[index].shape == "generator":
            generator.__annotations__ = {"dep": dep, "return": AsyncIterator[int]}
            return generator

        async def entered(dep: int) -> Entered:
            return Entered(asynccontextmanager(generator)(dep))

        entered.__annotations__ = {"dep": dep, "return": Entered}
        return entered

    def build(self) -> Callable[..., Awaitable[int]]:
        self.providers: list[Callable[..., Any]] = []
        for index in range(len(self.specs)):
            self.providers.append(self.provider(index))

        async def handler(last: int) -> int:
            if self.body == "raises":
                raise BodyError
            if self.body == "is cancelled":
                self.in_body.set()
                await anyio.sleep_forever()
            if self.body == "cancels the caller and returns":  # teardown starts cancelled
                assert self.caller is not None
                self.caller.cancel()
            return last

        handler.__annotations__ = {
            "last": Annotated[int, Resolve(self.providers[-1])],
            "return": int,
        }
        return handler

    async def cancel_when_wanted(self, *, task_status: Any) -> None:
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            await self.wanted.wait()
            assert self.caller is not None
            self.caller.cancel()
            self.done.set()


async def started(*, task_status: Any) -> None:
    await anyio.lowlevel.checkpoint()
    task_status.started()


async def origin() -> int:
    return -1


async def attempt(specs: Sequence[Resource], body: str, way: str) -> tuple[list[str], str]:
    """Run one call; return what happened and what the caller saw."""
    world = World(specs, body)
    handler = world.build()
    container = Container()
    outcome: list[BaseException] = []

    async def call(helper: anyio.CancelScope) -> None:
        try:
            if way == "run":
                await container.run(handler)
            elif way == "call scope":
                async with container.call() as scope:
                    await scope.run(handler)
            elif way == "eager run":  # what `run` falls back to on a backend of another shape
                with (
                    patch.object(_shield, "_ok", False),
                    patch.object(_shield, "_trio_ok", False),
                    patch.object(_shield, "_loop", None),
                ):
                    await container.run(handler)
            else:  # the reference: the shield entered before any setup, on every backend
                # (a call scope marks in its own `__aenter__`, `_call.begin`)
                with (
                    patch.object(_teardown, "begin", _shield.eager),
                    patch.object(_call, "begin", _shield.eager),
                ):
                    async with container.call() as scope:
                        await scope.run(handler)
        except Exception as exc:
            outcome.append(exc)
        finally:
            helper.cancel()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            world.caller = group.cancel_scope
            helper = await group.start(world.cancel_when_wanted)
            group.start_soon(call, helper)
            if body == "is cancelled":
                await world.in_body.wait()
                group.cancel_scope.cancel()
    seen = "cancelled" if group.cancel_scope.cancelled_caught else "returned"
    for error in outcome:
        notes = getattr(error, "__notes__", [])
        seen = f"{type(error).__name__} with {len(notes)} note(s)"
    return world.events, seen


def expected_actions(spec: Resource) -> list[str]:
    """What a finalizer does when nothing outside it interrupts it: all of it, but for
    the held scope's rest once it cancelled what it holds."""
    inside = list(spec.inside)
    if "cancel own hold" in inside and spec.hold != "nothing":
        inside = inside[: inside.index("cancel own hold")]
    return [*inside, *spec.after]


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(specs=st.lists(resources, min_size=1, max_size=3), body=st.sampled_from(BODIES))
async def test_run_tears_down_like_a_call_scope_even_when_cancelled(
    specs: list[Resource], body: str
) -> None:
    events, seen = await attempt(specs, body, "run")
    # Every finalizer ran to its end, in reverse order of setup, whatever was cancelled.
    assert [e for e in events if e.startswith("open")] == [f"open {i}" for i in range(len(specs))]
    closed = [e for e in events if e.startswith("closed")]
    assert closed == [f"closed {i}" for i in reversed(range(len(specs)))]
    for index, spec in enumerate(specs):
        done = [e.split(": ")[1] for e in events if e.startswith(f"{index}: ")]
        assert done == expected_actions(spec)
    # And exactly as a call scope does, and one whose shield is entered before any setup.
    assert (events, seen) == await attempt(specs, body, "call scope")
    assert (events, seen) == await attempt(specs, body, "eager call scope")
    assert (events, seen) == await attempt(specs, body, "eager run")


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_finalizer_waiting_while_the_caller_is_cancelled_finishes(shape: str) -> None:
    """The plain case the property covers, spelled out: a teardown that suspends, and
    the request is cancelled by another task meanwhile (a client gone)."""
    spec = Resource(shape, "task group", ("caller cancelled meanwhile", "sleep"), ("lock",), False)
    events, _ = await attempt([spec, spec], "returns", "run")
    assert [e for e in events if not e.startswith("open")] == [
        "1: caller cancelled meanwhile",
        "1: sleep",
        "1: lock",
        "closed 1",
        "0: caller cancelled meanwhile",
        "0: sleep",
        "0: lock",
        "closed 0",
    ]


async def test_a_finalizer_cancelling_its_own_caller_before_suspending(anyio_backend: str) -> None:
    """The one documented difference (docs/benchmarks.md, "S7"): a finalizer is not
    shielded from a cancellation it causes itself before it first suspends; the
    finalizers after it are. The eagerly entered shield covers it (and is what runs where
    the lazy one is not available: then all three agree)."""
    cancels = Resource("generator", "nothing", (), ("cancel caller now", "sleep"), False)
    later = Resource("generator", "nothing", (), ("sleep", "lock"), False)
    world_events: list[list[str]] = []
    for way in ("run", "call scope", "eager call scope"):
        events, _ = await attempt_with_immediate_cancel([later, cancels], way)
        world_events.append(events)
    run_events, call_events, scope_events = world_events
    assert call_events == run_events
    assert scope_events == [
        "open 0",
        "open 1",
        "1: cancel caller now",
        "1: sleep",
        "closed 1",
        "0: sleep",
        "0: lock",
        "closed 0",
    ]
    if not lazy_shield_available(anyio_backend):
        assert run_events == scope_events
        return
    assert run_events == [  # its sleep is cancelled: it ends there
        "open 0",
        "open 1",
        "1: cancel caller now",
        "0: sleep",
        "0: lock",
        "closed 0",
    ]


async def attempt_with_immediate_cancel(
    specs: Sequence[Resource], way: str
) -> tuple[list[str], str]:
    """`attempt`, with one more teardown action: cancel the caller before any checkpoint."""
    original = World.act

    async def act(self: World, index: int, action: str) -> None:
        if action != "cancel caller now":
            await original(self, index, action)
            return
        assert self.caller is not None
        self.caller.cancel()
        self.events.append(f"{index}: {action}")

    World.act = act  # type: ignore[method-assign]
    try:
        return await attempt(specs, "returns", way)
    finally:
        World.act = original  # type: ignore[method-assign]


# The first anyio whose scope tree has the shape the lazy shield reads; an older one
# (which the package supports) gets the eager shield.
LAZY_SHIELD_ANYIO = (4, 16)


def lazy_shield_available(backend: str) -> bool:
    return _shield.available() if backend == "asyncio" else _shield._trio_available()


async def test_the_lazy_shield_is_in_use_with_the_installed_backends(
    anyio_backend: str, pytestconfig: pytest.Config
) -> None:
    """A newer anyio or trio whose scope tree has another shape falls back to the eager
    scope (correct, slower): this says so in the test run rather than only in a benchmark.
    With ``--eager-shield`` (tests/conftest.py), the run is of that fallback: every call
    begins with a cancel scope entered there and then."""
    if pytestconfig.getoption("eager_shield"):
        assert not lazy_shield_available(anyio_backend)
        with anyio.CancelScope() as outer:
            guard = _shield.begin()
            assert isinstance(guard, anyio.CancelScope)
            guard.__exit__(None, None, None)
            assert _shield.here() is not _shield.here()  # every resource looks held open
        assert not outer.cancel_called
        return
    installed = importlib.metadata.version("anyio")
    if anyio_backend == "asyncio" and tuple(map(int, installed.split(".")[:2])) < LAZY_SHIELD_ANYIO:
        assert not _shield.available()
        pytest.skip(f"anyio {installed} predates the lazy shield: the eager one is in use")
    assert lazy_shield_available(anyio_backend)
    assert _shield.begin().__class__ is tuple


# The resources and handler of the test below (module level: annotations are strings).
first_scope_events: list[str] = []
first_scope_scopes: list[anyio.CancelScope] = []


async def connection() -> AsyncIterator[str]:
    yield "connection"
    await anyio.sleep(0)  # the teardown suspends
    first_scope_events.append("closed")


async def cancels_its_scope(conn: Annotated[str, Resolve(connection)]) -> str:
    if first_scope_scopes:
        first_scope_scopes[-1].cancel()
    return conn


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a trio task always has its status
@pytest.mark.parametrize("way", ["run", "call scope"])
@pytest.mark.parametrize("mode", MODES)
async def test_a_task_entering_its_first_cancel_scope_between_calls_is_shielded(
    mode: str, way: str
) -> None:
    """An asyncio task that is in no anyio cancel scope (one uvicorn starts per request)
    runs calls, then one inside a scope that is cancelled while a finalizer waits: that
    teardown still runs to its end. (anyio gives the task its state only when it first
    enters a scope, so what a call saw of the task before must not be taken for now.)"""
    import asyncio

    events, scopes = first_scope_events, first_scope_scopes
    events.clear()
    scopes.clear()
    container = make_container(mode)
    container.provide(connection)

    async def once() -> str:
        if way == "run":
            result: str = await run(container, cancels_its_scope, mode)
            return result
        async with container.call() as call:
            return await call.run(cancels_its_scope)

    async def requests() -> None:
        for _ in range(8):  # past the interpreted first calls: the generated code
            assert await once() == "connection"
        assert events == ["closed"] * 8
        events.clear()
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await once()
        assert scope.cancel_called
        assert events == ["closed"]

    async with container:
        await asyncio.get_running_loop().create_task(requests())
