"""OpenTelemetry spans and metrics: the tree a call emits in every mode, and nothing
secret in it; tracing off by default and when switched off."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

import anyio
import anyio.lowlevel
import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

from modes import MODES, make_container, run
from resolvent import (
    Container,
    Held,
    MemoryStore,
    Resolve,
    Scope,
    State,
    StateConflict,
    StateKey,
    StateStore,
    open_store,
)
from trace_helpers import EXPORTER, Installed, assert_nothing_secret, one, otel, tree

__all__ = ("otel",)  # the fixture, used by name

SECRET = "s3cret-argument"
M = f"{__name__}."  # what resolvent calls this module's functions


async def leaf(user: str) -> str:
    return user.upper()


async def left(value: Annotated[str, Resolve(leaf)]) -> str:
    await anyio.lowlevel.checkpoint()  # concurrent branches: the other one starts meanwhile
    return value + "l"


async def right(value: Annotated[str, Resolve(leaf)]) -> str:
    await anyio.lowlevel.checkpoint()
    return value + "r"


async def diamond(
    a: Annotated[str, Resolve(left)], b: Annotated[str, Resolve(right)], user: str
) -> str:
    return a + b


def _under_test_span(spans: list, name: str = "test") -> list:
    (top,) = [s for s in spans if s.name == name]
    return tree(spans, top)


@pytest.mark.parametrize("mode", MODES)
async def test_a_diamond_is_the_same_tree_in_every_mode(otel: Installed, mode: str) -> None:
    container = make_container(mode)
    async with container:
        with trace.get_tracer("test").start_as_current_span("test"):
            assert (
                await run(container, _bound(diamond), mode) == f"{SECRET.upper()}l{SECRET.upper()}r"
            )
    spans = otel.spans()
    assert _under_test_span(spans) == [
        (
            f"call {M}diamond",
            [(f"resolve {M}leaf", []), (f"resolve {M}left", []), (f"resolve {M}right", [])],
        )
    ]
    call = one(spans, f"call {M}diamond")
    assert call.attributes is not None
    assert call.attributes["resolvent.mode"] == {"timeout": "generated"}.get(mode, mode)
    assert call.attributes["code.function.name"] == f"{M}diamond"
    assert call.attributes["resolvent.scopes"] == ("CALL",)
    assert call.attributes["resolvent.backend"] in ("asyncio", "trio")
    resolver = one(spans, f"resolve {M}left")
    assert dict(resolver.attributes or {}) == {
        "code.function.name": f"{M}left",
        "resolvent.scope": "CALL",
        "resolvent.resolver.kind": "async",
    }
    a, b = one(spans, f"resolve {M}left"), one(spans, f"resolve {M}right")
    assert a.start_time is not None and b.start_time is not None
    assert a.end_time is not None and b.end_time is not None
    overlap = a.start_time < b.end_time and b.start_time < a.end_time
    assert overlap == (mode == "concurrent")  # siblings overlap only in concurrent branches
    assert_nothing_secret(spans, SECRET, SECRET.upper())


def _bound(fn):  # the call's argument, as every mode passes none of its own
    import functools

    return functools.partial(fn, user=SECRET)


async def chain(value: Annotated[str, Resolve(left)], user: str) -> str:
    return value


async def test_the_mode_says_which_code_ran(otel: Installed) -> None:
    # A concurrent container runs a plan with nothing to overlap (a chain) with the
    # sequential code: its span says so, also in a call scope with a deadline.
    container = Container(concurrent=True, call_timeout=30)
    async with container:
        assert await container.run(_bound(chain)) == f"{SECRET.upper()}l"
        assert await container.run(_bound(diamond)) == f"{SECRET.upper()}l{SECRET.upper()}r"
    modes = {
        s.name: (s.attributes or {})["resolvent.mode"]
        for s in otel.spans()
        if s.name.startswith("call ")
    }
    assert modes == {f"call {M}chain": "generated", f"call {M}diamond": "concurrent"}


async def settings() -> str:
    return "eu"


async def region(value: Annotated[str, Resolve(settings)]) -> str:
    return value


async def test_a_resolution_that_keeps_no_call_value_leaves_the_call_to_generated_code(
    otel: Installed,
) -> None:
    # A resolution in a call that makes only APP values records nothing for the call; it
    # must still end its flight, or the next run in that call would be interpreted.
    container = Container()
    container.provide(settings, scope=Scope.APP)
    async with container, container.call() as call:
        assert await call.resolve(region) == {"value": "eu"}
        assert await call.run(_bound(chain)) == f"{SECRET.upper()}l"
    (span,) = [s for s in otel.spans() if s.name == f"call {M}chain"]
    assert (span.attributes or {})["resolvent.mode"] == "generated"


async def test_off_without_a_provider_and_when_switched_off(otel: Installed) -> None:
    from resolvent._container.launch import PLAN_CODE

    container = Container(tracing=False)
    plan = container.compile(diamond)
    assert plan.code is PLAN_CODE and plan.steps[0].fn is leaf  # the plain plan, as ever
    assert await container.run(diamond, user="u") == "Ul" + "Ur"
    assert otel.spans() == []
    container.tracing = True  # at run time: every plan compiles again, traced whole
    assert await container.run(diamond, user="u") == "Ul" + "Ur"
    assert [s.name for s in otel.spans()][-1] == f"call {M}diamond"
    assert container.compile(diamond).code is not PLAN_CODE
    container.tracing = None  # follows the provider: installed here
    assert container.compile(diamond).code is not PLAN_CODE


async def test_no_provider_no_tracing() -> None:
    from resolvent._container.launch import PLAN_CODE

    assert Container().compile(diamond).code is PLAN_CODE


def test_tracing_true_without_the_api_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    from resolvent import ResolventError

    with pytest.raises(ResolventError, match=r"pip install 'resolvent\[otel\]'"):
        Container(tracing=True)


def threaded(user: str) -> str:
    return threading.current_thread().name


async def in_thread(name: Annotated[str, Resolve(threaded)], user: str) -> str:
    return name


async def test_a_worker_thread_resolver_is_a_child_of_the_call(otel: Installed) -> None:
    container = Container()
    thread = await container.run(in_thread, user=SECRET)
    assert thread != threading.current_thread().name
    spans = otel.spans()
    assert tree(spans) == [(f"call {M}in_thread", [(f"resolve {M}threaded", [])])]
    assert one(spans, f"resolve {M}threaded").attributes == {
        "code.function.name": f"{M}threaded",
        "resolvent.scope": "CALL",
        "resolvent.resolver.kind": "thread",
    }
    assert_nothing_secret(spans, SECRET)


closed: list[str] = []


async def connection(user: str) -> AsyncIterator[str]:
    try:
        yield "conn"
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0)
        closed.append("conn")


async def slow(conn: Annotated[str, Resolve(connection)], started: anyio.Event, user: str) -> str:
    started.set()
    await anyio.sleep_forever()
    return conn


async def quick(conn: Annotated[str, Resolve(connection)], user: str) -> str:
    return conn


async def test_a_resource_torn_down_after_cancellation_ends_under_the_call(
    otel: Installed,
) -> None:
    container = Container(values=(anyio.Event,))
    started = anyio.Event()
    closed.clear()
    async with container, anyio.create_task_group() as group:

        async def call() -> None:
            async with container.call(values={anyio.Event: started}) as scope:
                await scope.run(slow, user=SECRET)

        group.start_soon(call)
        await started.wait()
        group.cancel_scope.cancel()
    assert closed == ["conn"]
    async with container:
        # The first set-up is held in a task of its own (whose context is the call's); a
        # later one is known to hold no scope, and closes in the caller's task, outside.
        for count in (2, 3):
            async with container.call(values={anyio.Event: None}) as scope:
                assert await scope.run(quick, user=SECRET) == "conn"
                assert len(closed) == count - 1  # open until the scope closes
            assert len(closed) == count
    spans = otel.spans()
    assert tree(spans) == [
        (f"call {M}quick", [(f"setup {M}connection", []), (f"teardown {M}connection", [])]),
        (f"call {M}quick", [(f"setup {M}connection", []), (f"teardown {M}connection", [])]),
        (f"call {M}slow", [(f"setup {M}connection", []), (f"teardown {M}connection", [])]),
    ]
    call = one(spans, f"call {M}slow")
    assert call.attributes is not None and call.attributes["resolvent.cancelled"] is True
    assert call.status.status_code is StatusCode.UNSET  # a cancellation is no error
    for teardown in spans:
        assert teardown.status.status_code is StatusCode.UNSET or teardown.name == call.name
    assert_nothing_secret(spans, SECRET)


class Broken(Exception):
    pass


async def failing(user: str) -> str:
    raise Broken(f"no such user {user}")  # the message carries the argument


async def uses_failing(value: Annotated[str, Resolve(failing)], user: str) -> str:
    return value


async def test_a_failing_resolver_marks_its_span_and_the_calls(otel: Installed) -> None:
    container = Container()
    with pytest.raises(Broken):
        await container.run(uses_failing, user=SECRET)
    spans = otel.spans()
    assert tree(spans) == [(f"call {M}uses_failing", [(f"resolve {M}failing", [])])]
    for name in (f"resolve {M}failing", f"call {M}uses_failing"):
        span = one(spans, name)
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes is not None
        assert span.attributes["error.type"] == f"{M}Broken"
    # The span that raised it names the resolver on its exception event; the call's
    # span says which resolver failed.
    (event,) = one(spans, f"resolve {M}failing").events
    assert (event.name, dict(event.attributes or {})) == (
        "exception",
        {"exception.type": f"{M}Broken", "code.function.name": f"{M}failing"},
    )
    call = one(spans, f"call {M}uses_failing")
    assert call.attributes is not None
    assert call.attributes["resolvent.error.resolver"] == f"{M}failing"
    assert_nothing_secret(spans, SECRET)  # not the message: it carries the argument
    errors = otel.metrics()["resolvent.resolver.errors"]
    assert [(p.value, dict(p.attributes)) for p in errors] == [
        (
            1,
            {
                "code.function.name": f"{M}failing",
                "resolvent.scope": "CALL",
                "error.type": f"{M}Broken",
            },
        )
    ]


async def stuck(user: str) -> str:
    await anyio.sleep_forever()
    return user


async def uses_stuck(value: Annotated[str, Resolve(stuck)], user: str) -> str:
    return value


async def test_a_call_timeout_expiry_is_marked(otel: Installed) -> None:
    container = Container(call_timeout=0.01)
    async with container:
        with pytest.raises(TimeoutError):
            await container.run(uses_stuck, user=SECRET)
    spans = otel.spans()
    assert tree(spans) == [(f"call {M}uses_stuck", [(f"resolve {M}stuck", [])])]
    call = one(spans, f"call {M}uses_stuck")
    assert call.attributes is not None
    assert call.attributes["resolvent.call_timeout.expired"] is True
    assert call.attributes["resolvent.call_timeout"] == 0.01
    assert call.attributes["error.type"] == "resolvent.CallTimeout"
    stuck_span = one(spans, f"resolve {M}stuck")
    assert stuck_span.attributes is not None
    assert stuck_span.attributes["resolvent.cancelled"] is True
    assert_nothing_secret(spans, SECRET)


async def config() -> str:
    return "config"


async def uses_config(value: Annotated[str, Resolve(config)], user: str) -> str:
    return value


@pytest.mark.parametrize("mode", MODES)
async def test_a_value_from_an_outer_scope_is_made_once_and_timed(
    otel: Installed, mode: str
) -> None:
    container = make_container(mode)
    container.provide(config, scope=Scope.APP)
    async with container:
        for _ in range(3):
            await run(container, _bound(uses_config), mode)
    spans = otel.spans()
    # Made once, in the first call; the later calls take it from the APP scope's memo:
    # no span, an event on the call's span.
    assert tree(spans) == [
        (f"call {M}uses_config", [(f"resolve {M}config", [])]),
        (f"call {M}uses_config", []),
        (f"call {M}uses_config", []),
    ]
    calls = sorted((s for s in spans if s.name.startswith("call ")), key=lambda s: s.start_time)
    hit = ("resolvent.memo.hit", {"code.function.name": f"{M}config", "resolvent.scope": "APP"})
    assert [[(e.name, dict(e.attributes or {})) for e in c.events] for c in calls] == [
        [],
        [hit],
        [hit],
    ]
    assert one(spans, f"resolve {M}config").attributes == {
        "code.function.name": f"{M}config",
        "resolvent.scope": "APP",
        "resolvent.resolver.kind": "async",
    }
    (point,) = otel.metrics()["resolvent.resolver.duration"]
    assert point.count == 1
    assert dict(point.attributes) == {"code.function.name": f"{M}config", "resolvent.scope": "APP"}
    assert_nothing_secret(spans, SECRET)


class Cart(BaseModel):
    items: list[str] = []


STORE_AT: list[Path] = []  # the SQLite file of the test that runs


async def cart_store() -> AsyncIterator[StateStore]:
    async with open_store(f"sqlite:///{STORE_AT[0]}") as store:
        yield store


OWNER = "owner-s3cret"  # the caller's principal, which no span may carry


async def cart_owner() -> str:
    return OWNER


CARTS = State("cart", Cart, store=cart_store, principal=cart_owner)


async def open_cart(cart: Annotated[Held[Cart], Resolve(CARTS.new)]) -> str:
    return cart.handle


async def add_item(cart: str, item: str, edit: Annotated[Held[Cart], Resolve(CARTS.edit)]) -> int:
    edit.value.items.append(item)
    if item == "poison":
        raise Broken("refused")
    return len(edit.value.items)


async def test_a_state_edit_commits_or_rolls_back(otel: Installed, tmp_path: Path) -> None:
    STORE_AT[:] = [tmp_path / "carts.db"]
    container = Container()
    container.provide(cart_store, scope=Scope.APP)
    async with container:
        handle = await container.run(open_cart)
        EXPORTER.clear()
        assert await container.run(add_item, cart=handle, item=SECRET) == 1
        with pytest.raises(Broken):
            await container.run(add_item, cart=handle, item="poison")
        assert await container.run(add_item, cart=handle, item="two") == 2  # not poisoned
    spans = otel.spans()
    call = f"call {M}add_item"
    made = [("resolve resolvent._state.call_ledger", []), (f"resolve {M}cart_owner", [])]
    commits = (call, [*made, ("state.commit cart", []), ("state.load cart", [])])
    rollback = (call, [*made, ("state.load cart", []), ("state.rollback cart", [])])
    # The first edit also starts the APP resource that renews the leases of edits (its
    # teardown, at the container's close, is under the call that made it).
    keeper = [
        (f"{verb} resolvent._state.leases.lease_keeper", []) for verb in ("setup", "teardown")
    ]
    first = (call, sorted([*commits[1], *keeper], key=repr))
    assert tree(spans) == sorted([first, commits, rollback], key=repr)
    for span in spans:
        if span.name.startswith("state."):
            assert span.attributes is not None
            assert span.attributes["resolvent.state.name"] == "cart"
            assert span.attributes["resolvent.state.store"] == "SqliteStore"
    assert_nothing_secret(spans, SECRET, handle, OWNER)


class Waited(MemoryStore):
    """The in-memory store, saying when a load found another call's lease."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = anyio.Event()

    async def load(self, key: StateKey, idle: float, token: str, lease: float) -> bytes | None:
        try:
            return await super().load(key, idle, token, lease)
        except StateConflict:
            self.refused.set()
            raise


WAITED: list[Waited] = []
HOLDING: list[anyio.Event] = []  # set once the holding call has its lease


async def waited_store() -> AsyncIterator[StateStore]:
    yield WAITED[0]


BASKETS = State("basket", Cart, store=waited_store)


async def open_basket(basket: Annotated[Held[Cart], Resolve(BASKETS.new)]) -> str:
    return basket.handle


async def hold_basket(
    basket: str, release: anyio.Event, edit: Annotated[Held[Cart], Resolve(BASKETS.edit)]
) -> None:
    edit.value.items.append("first")
    HOLDING[0].set()
    await release.wait()  # its lease held until the other call waits for it


async def add_to_basket(basket: str, edit: Annotated[Held[Cart], Resolve(BASKETS.edit)]) -> int:
    edit.value.items.append("second")
    return len(edit.value.items)


def lease_container() -> Container:
    """A container whose `BASKETS` live in a fresh `Waited` store."""
    WAITED[:] = [Waited()]
    container = Container(values=(anyio.Event,))
    container.provide(waited_store, scope=Scope.APP)
    return container


async def wait_for_a_lease(container: Container, handle: str) -> list[int]:
    """Two calls edit the basket *handle*: the first holds its lease until the second
    (`add_to_basket`) has found it held and waits. What the second returned."""
    HOLDING[:] = [anyio.Event()]
    release = anyio.Event()
    added: list[int] = []
    async with anyio.create_task_group() as group:

        async def holder() -> None:
            async with container.call(values={anyio.Event: release}) as scope:
                await scope.run(hold_basket, basket=handle)

        async def waiter() -> None:
            added.append(await container.run(add_to_basket, basket=handle))

        group.start_soon(holder)
        with anyio.fail_after(10):  # only a hang fails here
            await HOLDING[0].wait()
            group.start_soon(waiter)
            await WAITED[0].refused.wait()  # it waits for the holder's lease
        release.set()
    return added


async def test_a_state_edit_that_waits_for_another_calls_lease(otel: Installed) -> None:
    container = lease_container()
    async with container:
        handle = await container.run(open_basket)
        EXPORTER.clear()
        added = await wait_for_a_lease(container, handle)
    assert added == [2]
    spans = otel.spans()
    made = [(f"resolve resolvent._state.{f}", []) for f in ("call_ledger", "current_principal")]
    # The first edit starts the APP resource that renews leases (see the test above).
    keeper = [(f"{v} resolvent._state.leases.lease_keeper", []) for v in ("setup", "teardown")]
    holding = (
        f"call {M}hold_basket",
        sorted([*made, *keeper, ("state.commit basket", []), ("state.load basket", [])], key=repr),
    )
    # The lease wait is a span of its own, under the load that waited.
    waiting = (
        f"call {M}add_to_basket",
        [
            *made,
            ("state.commit basket", []),
            ("state.load basket", [("state.lease_wait basket", [])]),
        ],
    )
    assert tree(spans) == [waiting, holding]
    wait = one(spans, "state.lease_wait basket")
    assert dict(wait.attributes or {}) == {
        "code.function.name": "resolvent.State['basket'].edit",
        "resolvent.state.name": "basket",
        "resolvent.state.store": "Waited",
    }
    assert wait.status.status_code is StatusCode.UNSET
    assert_nothing_secret(spans, handle, "anonymous")
