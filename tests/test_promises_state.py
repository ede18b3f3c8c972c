"""Promises of docs/state.md that a realistic slip in the code would break quietly.

Each test is written from a sentence of the docs (quoted above it) and runs through the
public API: a container's calls, the three stores (SQLite on a file, a real Valkey server),
asyncio and trio.
"""

import contextlib
import functools
import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from mcp_helpers import free_port
from resolvent import (
    Container,
    Handle,
    Held,
    InvalidSignature,
    MemoryStore,
    Resolve,
    ResolventError,
    Scope,
    SqliteStore,
    State,
    StateConflict,
    StateError,
    StateKey,
    StateNotFound,
    StateStore,
    StateTooLarge,
    open_store,
)
from snapshot import assert_snapshot
from state_helpers import STORES, Clock, open_test_store

pytestmark = pytest.mark.network  # the Redis store talks to 127.0.0.1


class Cart(BaseModel):
    items: dict[str, int] = {}


class CartV2(BaseModel):
    lines: list[str] = []


def ada() -> str:
    return "ada"


class Carts:
    """One kind of state on a given store, and the handlers the tests call."""

    def __init__(self, container: Container, store: Callable[..., Any], **options: Any) -> None:
        self.container = container
        options.setdefault("principal", ada)
        self.state = carts = State("cart", options.pop("model", Cart), store=store, **options)
        self.gate: Callable[[], Any] | None = None

        async def open_cart(cart: Annotated[Held[Any], Resolve(carts.new)]) -> str:
            return cart.handle

        async def add(cart: Handle, item: str, edit: Annotated[Held[Any], Resolve(carts.edit)]):
            edit.value.items[item] = edit.value.items.get(item, 0) + 1
            if self.gate is not None:
                await self.gate()
            return dict(edit.value.items)

        async def show(cart: Handle, value: Annotated[Any, Resolve(carts.read)]) -> Any:
            return value

        async def drop(cart: Handle, edit: Annotated[Held[Any], Resolve(carts.edit)]) -> None:
            edit.delete()
            if self.gate is not None:
                await self.gate()

        self.open_cart, self.add, self.show, self.drop = open_cart, add, show, drop

    async def run(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        return await self.container.run(fn, **kwargs)


def provider_of(store: StateStore) -> Callable[..., Any]:
    async def provide() -> AsyncIterator[StateStore]:
        yield store

    return provide


def on(store: StateStore, **options: Any) -> Carts:
    """A fresh container whose one kind of state lives in *store*."""
    container = Container()
    provide = provider_of(store)
    container.provide(provide, scope=Scope.APP)
    return Carts(container, provide, **options)


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    if kind == "redis":
        request.getfixturevalue("valkey_url")
    return kind


def opened(kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock | None = None):
    valkey = request.getfixturevalue("valkey_url") if kind == "redis" else None
    return open_test_store(kind, tmp_path, valkey, clock)


# "every read and edit refreshes it" (the idle time-to-live): the refresh that ends an
# edit counts from its end, so a long edit does not leave its value about to expire. (Its
# lease, shorter than the idle time, keeps the value no longer than the idle time would.)
async def test_an_edit_refreshes_the_idle_time_when_it_ends(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    clock = Clock()
    async with opened(store_kind, tmp_path, request, clock) as store:
        carts = on(store, idle_ttl=100, lease=30)
        async with carts.container:
            handle = await carts.run(carts.open_cart)

            async def long_edit() -> None:
                clock.advance(90)  # the handler works for 90 s of the 100 s idle time

            carts.gate = long_edit
            await carts.run(carts.add, cart=handle, item="apple")
            carts.gate = None
            clock.advance(99)  # 99 s since the edit ended (189 s since it began)
            assert await carts.run(carts.show, cart=handle) == Cart(items={"apple": 1})


# "An edit whose renewal the store refused (another call holds the handle) ... its save fails
# with StateConflict ... and nothing of it is written." A delete is such a save.
async def test_a_delete_past_its_lease_fails_and_deletes_nothing(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    clock = Clock()
    async with opened(store_kind, tmp_path, request, clock) as store:
        carts = on(store, lease=30, wait=30)
        async with carts.container:
            handle = await carts.run(carts.open_cart)
            inside, release = anyio.Event(), anyio.Event()

            async def slow() -> None:
                inside.set()
                await release.wait()

            carts.gate = slow
            failures: list[BaseException] = []

            async def late_delete() -> None:
                try:
                    await carts.run(carts.drop, cart=handle)
                except StateConflict as exc:
                    failures.append(exc)

            async with anyio.create_task_group() as group:
                group.start_soon(late_delete)
                await inside.wait()
                carts.gate = None
                clock.advance(30)  # the delete's lease is over; another call takes it
                assert await carts.run(carts.add, cart=handle, item="kept") == {"kept": 1}
                release.set()
            assert len(failures) == 1, "a delete that lost its lease reported success"
            assert await carts.run(carts.show, cart=handle) == Cart(items={"kept": 1})


# "A value that no longer validates raises StateError naming the kind, the handle and what
# failed" -- and every such call says so: the failed edit holds nothing afterwards.
async def test_an_edit_of_a_value_that_does_not_decode_lets_go_of_it(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with opened(store_kind, tmp_path, request) as store:
        old = on(store, wait=0.05)
        new = on(store, model=CartV2, version=2, wait=0.05)  # no migrate: v1 is an error
        async with old.container, new.container:
            handle = await old.run(old.open_cart)
            for _ in range(2):  # the second edit sees the error too, not a conflict
                with pytest.raises(StateError, match="schema version 1") as caught:
                    await new.run(new.add, cart=handle, item="x")
                assert not isinstance(caught.value, StateConflict)
            assert await old.run(old.add, cart=handle, item="apple") == {"apple": 1}


# "carts.new ... The value is stored when the call succeeds" and `delete()`: "the handle
# is not found afterwards" -- a value made and deleted in one call is never stored.
async def test_a_value_created_and_deleted_in_one_call_is_not_stored(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with opened(store_kind, tmp_path, request) as store:
        carts = on(store)

        async def open_and_discard(cart: Annotated[Held[Cart], Resolve(carts.state.new)]) -> str:
            cart.delete()
            return cart.handle

        async with carts.container:
            handle = await carts.run(open_and_discard)
            with pytest.raises(StateNotFound, match="not found or expired"):
                await carts.run(carts.show, cart=handle)
        if isinstance(store, MemoryStore):
            assert len(store) == 0


# "A value larger than max_size= bytes (1 MB by default) is refused": one of exactly
# max_size bytes is not larger, so it is stored.
async def test_a_value_of_exactly_max_size_bytes_is_stored() -> None:
    store = MemoryStore()
    tight = on(store, max_size=1)
    async with tight.container:
        with pytest.raises(StateError, match=r"takes \d+ bytes, over the limit of 1") as caught:
            await tight.run(tight.open_cart)
    size = int(re.search(r"takes ([\d,]+) bytes", str(caught.value))[1].replace(",", ""))  # type: ignore[index]
    exact = on(store, max_size=size)
    async with exact.container:
        handle = await exact.run(exact.open_cart)
        assert await exact.run(exact.show, cart=handle) == Cart()
    below = on(store, max_size=size - 1)
    async with below.container:
        with pytest.raises(StateError, match="over the limit"):
            await below.run(below.open_cart)


# "Kinds that name the same URL share one store."
async def test_kinds_naming_the_same_url_share_one_store() -> None:
    container = Container()
    first = Carts(container, State("cart", Cart, store="memory:").store)
    second = Carts(container, State("cart", Cart, store="memory:").store)
    async with container:
        handle = await first.run(first.open_cart)
        await first.run(first.add, cart=handle, item="apple")
        assert await second.run(second.show, cart=handle) == Cart(items={"apple": 1})


# "sqlite:///relative.db" (the table of stores): three slashes before a relative path,
# which is relative to the working directory.
async def test_a_relative_sqlite_url_opens_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    name = f"relative-{free_port()}.db"
    carts = State("cart", Cart, store=f"sqlite:///{name}", principal=ada)
    container = Container()
    kit = Carts(container, carts.store)
    async with container:
        handle = await kit.run(kit.open_cart)
    assert not Path("/", name).exists()
    with sqlite3.connect(tmp_path / name) as conn:
        assert conn.execute("select handle from resolvent_state").fetchall() == [(handle,)]


# "every read ... refreshes it" and "Redis removes them with PEXPIRE": the refresh reaches
# the server's own expiry of the key, or the server drops a value still in use.
async def test_a_redis_read_moves_the_servers_expiry(valkey_url: str) -> None:
    from resolvent.redis import RedisStore

    async with RedisStore.connect(valkey_url, prefix=f"p{free_port()}") as store:
        short = on(store, idle_ttl=5)
        long = on(store, idle_ttl=500)
        async with short.container, long.container:
            handle = await short.run(short.open_cart)
            await long.run(long.show, cart=handle)
        keys = [key async for key in store.client.scan_iter(match=f"{store.prefix}:*")]
        assert len(keys) == 1
        assert await store.client.pttl(keys[0]) > 100_000  # not the 5 s the value began with


# "an unreachable store is one public error naming the redacted URL and cause" and "a
# store that cannot be reached fails the start with 'cannot reach redis://…: …'"
@pytest.mark.parametrize(
    ("userinfo", "shown"),
    [(":s3cret-pw", ":***@"), ("alice:s3cret-pw", "alice:***@"), ("bob:s3c@ret-pw", "bob:***@")],
)
async def test_cannot_reach_redis_names_the_url_without_its_password(
    userinfo: str, shown: str
) -> None:
    pytest.importorskip("coredis", reason="the Redis store needs the redis extra (coredis)")
    port = free_port()
    url = f"redis://{userinfo}@127.0.0.1:{port}/0"
    with pytest.raises(ResolventError, match="cannot reach redis://") as caught:
        async with open_store(url):
            pass
    assert "s3c" not in str(caught.value) and "ret-pw" not in str(caught.value)
    assert f"redis://{shown}127.0.0.1:{port}/0" in str(caught.value)


# "Stores never see the principal in clear: keys carry a digest of it."
@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_stores_never_see_the_principal_in_clear(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with opened(kind, tmp_path, request) as store:
        carts = on(store, principal=lambda: "ada.lovelace@example.com")
        async with carts.container:
            handle = await carts.run(carts.open_cart)
            await carts.run(carts.add, cart=handle, item="apple")
        if kind == "sqlite":
            assert isinstance(store, SqliteStore)
            with sqlite3.connect(store.path) as conn:
                rows = conn.execute("select * from resolvent_state").fetchall()
            seen = repr(rows)
        else:
            from resolvent.redis import RedisStore

            assert isinstance(store, RedisStore)
            keys = [k async for k in store.client.scan_iter(match=f"{store.prefix}:*")]
            seen = repr(keys) + repr([await store.client.hgetall(k) for k in keys])
        assert handle in seen  # what the store keeps was looked at
        # Not a part of it either ("ada" alone turns up in random handles and digests).
        assert "lovelace" not in seen and "example.com" not in seen


class Strict(BaseModel):
    lines: list[str]


# "A value that no longer validates raises StateError naming the kind, the handle and what
# failed": what failed is the validation's own first lines, or the error's type when it
# says nothing more.
async def test_a_value_that_no_longer_validates_says_what_failed() -> None:
    store = MemoryStore()

    def unhelpful(version: int, data: Any) -> Any:
        raise ValueError

    old = on(store)
    strict = on(store, model=Strict)
    migrating = on(store, model=CartV2, version=2, migrate=unhelpful)
    async with old.container, strict.container, migrating.container:
        handle = await old.run(old.open_cart)
        with pytest.raises(StateError) as caught:
            await strict.run(strict.show, cart=handle)
        message = str(caught.value)
        assert f"cart {handle!r}" in message
        assert "1 validation error for Strict lines Field required [type=missing" in message
        assert "For further information" not in message  # the first lines, not the link
        with pytest.raises(StateError, match=r"\(version 2\): ValueError\.") as caught:
            await migrating.run(migrating.show, cart=handle)


# docs/state.md: an edit is "written when the call ends, only if it succeeded" -- an edit
# that changes nothing leaves the value as it was.
async def test_an_edit_that_changes_nothing_keeps_the_value() -> None:
    carts = on(MemoryStore())

    async def look(cart: Handle, edit: Annotated[Held[Cart], Resolve(carts.state.edit)]) -> str:
        return edit.handle

    async with carts.container:
        handle = await carts.run(carts.open_cart)
        await carts.run(carts.add, cart=handle, item="apple")
        assert await carts.run(look, cart=handle) == handle
        assert await carts.run(carts.show, cart=handle) == Cart(items={"apple": 1})


# The house's errors say what went wrong, where, and how to fix it: every message of state
# reads as written (tests/snapshots/state_messages.txt).
async def test_state_messages_read_as_written() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    messages: list[str] = []

    async def expect(error: type[Exception], carts: Carts, fn: Any, **kwargs: Any) -> None:
        with pytest.raises(error) as caught:
            await carts.run(fn, **kwargs)
        text = re.sub(r"'[A-Za-z0-9_-]{32}'", "'HANDLE'", str(caught.value))
        messages.append(f"{type(caught.value).__name__}: {text}")

    carts = on(store, lease=1, wait=0.01)  # a lease of one second is a lease too
    tiny = on(store, max_size=8)
    newer = on(store, model=CartV2, version=2)
    older = on(store, model=CartV2, version=0)

    strict = on(store, model=Strict)

    async def swap(cart: Handle, edit: Annotated[Held[Any], Resolve(carts.state.edit)]) -> None:
        edit.value = CartV2()

    containers = (carts, tiny, newer, older, strict)
    async with contextlib.AsyncExitStack() as stack:
        for kit in containers:
            await stack.enter_async_context(kit.container)
        handle = await carts.run(carts.open_cart)
        await expect(StateNotFound, carts, carts.show, cart="not-a-handle")
        await expect(StateNotFound, carts, carts.show, cart="x" * 60)
        await expect(StateNotFound, carts, carts.show, cart="x" * 46)  # shown whole
        await expect(StateNotFound, carts, carts.show, cart="x" * 47)  # one more: cut
        await expect(StateNotFound, carts, carts.show, cart="A" * 32)  # well-formed, unknown
        await expect(StateError, tiny, tiny.open_cart)
        await expect(StateError, tiny, tiny.add, cart=handle, item="apple")
        await expect(StateError, carts, swap, cart=handle)
        await expect(StateError, newer, newer.show, cart=handle)
        await expect(StateError, older, older.show, cart=handle)
        await expect(StateError, strict, strict.show, cart=handle)
        inside, release = anyio.Event(), anyio.Event()

        async def hold() -> None:
            inside.set()
            await release.wait()

        carts.gate = hold
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: expect(StateConflict, carts, carts.add, cart=handle, item="late")
            )
            await inside.wait()
            carts.gate = None
            await expect(StateConflict, carts, carts.add, cart=handle, item="waits")
            clock.advance(1)  # the lease is over once its time is up, not a moment later
            await carts.run(carts.add, cart=handle, item="prompt")
            release.set()
    for bad in ("two words", ""):
        with pytest.raises(ValueError) as caught:
            State(bad, Cart)
        messages.append(str(caught.value))
    for options in (
        {"argument": "not valid"},
        {"idle_ttl": 0},
        {"max_lifetime": -1},
        {"lease": 0},
        {"idempotency_ttl": -1},
        {"lease": float("nan")},
    ):
        with pytest.raises(ValueError) as caught:
            State("cart", Cart, **options)
        messages.append(str(caught.value))
    assert_snapshot("state_messages", "\n\n".join(messages))


class Corrupted:
    """A store whose one value was written by something else: no schema version header."""

    async def create(self, key: StateKey, data: bytes, idle: float, lifetime: float) -> None:
        raise AssertionError("not used")

    async def load(self, key: StateKey, idle: float, token: str, lease: float) -> bytes | None:
        return b"garbage\n{}"

    async def save(
        self, key: StateKey, idle: float, token: str, data: bytes | None, delete: bool
    ) -> bool:
        return True

    async def aclose(self) -> None:
        pass


# "Every stored value carries its kind's schema version": a value without one is a
# StateError naming the kind and the handle, never read as some version.
async def test_a_stored_value_without_a_schema_version_is_refused() -> None:
    carts = on(Corrupted())
    async with carts.container:
        with pytest.raises(StateError, match=r"cart 'A{32}'.*schema version -1"):
            await carts.run(carts.show, cart="A" * 32)


# docs/state.md names each default: "(`idle_ttl=`, one hour by default ...)", "(`lease=`,
# 60 s by default)" and so on. The code keeps what the page says; any positive time is one.
DEFAULTS = {
    "idle_ttl": (r"`idle_ttl=`, one hour by default", 3600),
    "max_lifetime": (r"`max_lifetime=`, a week by default", 7 * 86400),
    "max_size": (r"`max_size=` bytes \(1 MB by default\)", 1_000_000),
    "lease": (r"`lease=`, (\d+) s by default", None),
    "wait": (r"`wait=`\s+seconds \((\d+) by default\)", None),
    "version": (r"`version=`, (\d+) by default", None),
}


@pytest.mark.parametrize("name", DEFAULTS)
def test_the_documented_defaults(name: str) -> None:
    page = (Path(__file__).parent.parent / "docs" / "state.md").read_text(encoding="utf-8")
    pattern, value = DEFAULTS[name]
    said = re.search(pattern, page)
    assert said is not None, f"docs/state.md no longer says the default of {name}="
    expected = value if value is not None else int(said[1])
    carts = State("Cart.v2-x_", Cart, argument="cart")  # either case, digits, _ . -
    assert getattr(carts, name) == expected
    assert State("cart", Cart, idle_ttl=0.5, max_lifetime=0.5).idle_ttl == 0.5


# "carts.read gives the current value of the handle in the call argument named like the
# kind (cart; pass argument= to name it otherwise)"; "initial: makes the value new starts
# from".
async def test_argument_and_initial_are_followed() -> None:
    baskets = State("cart", Cart, argument="basket", initial=lambda: Cart(items={"bag": 1}))
    container = Container()

    async def open_basket(new: Annotated[Held[Cart], Resolve(baskets.new)]) -> str:
        return new.handle

    async def show(basket: Handle, value: Annotated[Cart, Resolve(baskets.read)]) -> Cart:
        return value

    async with container:
        handle = await container.run(open_basket)
        assert await container.run(show, basket=handle) == Cart(items={"bag": 1})


class Unwritable(Corrupted):
    """A store that reads a value but cannot write: its release fails too."""

    async def load(self, key: StateKey, idle: float, token: str, lease: float) -> bytes | None:
        return b'1\n{"items": {}}'

    async def save(
        self, key: StateKey, idle: float, token: str, data: bytes | None, delete: bool
    ) -> bool:
        raise OSError("the store went away")


# A failed edit writes nothing and releases its lease; when even the release fails, the
# handler's own error is what the caller gets, and the log says which handle stays leased
# (until its lease runs out).
async def test_a_release_that_fails_is_logged_and_the_handlers_error_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    carts = on(Unwritable())

    async def fail(cart: Handle, edit: Annotated[Held[Cart], Resolve(carts.state.edit)]) -> None:
        raise RuntimeError("handler failed")

    async with carts.container:
        with pytest.raises(RuntimeError, match="handler failed"):
            await carts.run(fail, cart="A" * 32)
    said = [r.getMessage() for r in caplog.records if r.name == "resolvent"]
    assert said == [f"resolvent: could not release cart {'A' * 32!r}"]


# "the call that holds it renews it every quarter of that time for as long as its handler
# runs" (docs/state.md): each call of the process that holds one, however many run at once.
async def test_calls_editing_at_once_each_keep_their_lease() -> None:
    carts = on(MemoryStore(), lease=0.4)

    async def slow() -> None:
        await anyio.sleep(0.5)  # past the lease time: only its renewals keep each lease

    added: list[Any] = []

    async def add(handle: str) -> None:
        added.append(await carts.run(carts.add, cart=handle, item="fig"))

    async with carts.container:
        handles = [await carts.run(carts.open_cart) for _ in range(3)]
        carts.gate = slow
        async with anyio.create_task_group() as group:
            for handle in handles:
                group.start_soon(add, handle)
    assert added == [{"fig": 1}] * 3


class RefusesOne(MemoryStore):
    """A memory store that refuses the *nth* write it is asked for (as when the call's
    lease lapsed and another call took the value), or fails it with *error* (as when the
    store went away) leaving the lease in place, and notes the handles it wrote."""

    def __init__(self, nth: int, error: Exception | None = None) -> None:
        super().__init__()
        self.nth = nth
        self.error = error
        self.wrote: list[str] = []

    async def save(
        self,
        key: StateKey,
        idle: float,
        token: str,
        data: bytes | None,
        delete: bool,
        remember: tuple[str, bytes, float] | None = None,
    ) -> bool:
        if data is None and not delete:  # only ends a lease
            return await super().save(key, idle, token, data, delete, remember)
        if len(self.wrote) + 1 == self.nth:
            self.nth = 0
            if self.error is not None:
                raise self.error
            await super().save(key, idle, token, None, False)  # its lease ends all the same
            return False
        saved = await super().save(key, idle, token, data, delete, remember)
        self.wrote.append(key.handle)
        return saved


def three_carts(carts: Carts) -> Callable[..., Any]:
    """A handler that adds an item to the three carts its arguments name, one kind each."""
    state = carts.state
    kinds = [State("cart", Cart, store=state.store, principal=ada, argument=a) for a in "bc"]

    async def add_to_three(
        cart: Handle,
        b: Handle,
        c: Handle,
        one: Annotated[Held[Cart], Resolve(state.edit)],
        two: Annotated[Held[Cart], Resolve(kinds[0].edit)],
        three: Annotated[Held[Cart], Resolve(kinds[1].edit)],
    ) -> None:
        for held in (one, two, three):
            held.value.items["fig"] = 1

    return add_to_three


# "When a write of a call is refused [...], the call writes nothing after it, and the error
# says what it wrote before: [...] which values were" (docs/state.md): each of them.
async def test_a_refused_write_names_every_value_the_call_wrote_before() -> None:
    store = RefusesOne(3)
    carts = on(store)
    add_to_three = three_carts(carts)
    async with carts.container:
        handles = [await carts.run(carts.open_cart) for _ in range(3)]
        store.wrote.clear()
        with pytest.raises(StateConflict) as caught:
            await carts.run(add_to_three, cart=handles[0], b=handles[1], c=handles[2])
    first, second = store.wrote
    (refused,) = set(handles) - {first, second}
    assert str(caught.value).startswith(
        f"cart {refused!r} was not saved: this call's lease lapsed (unrenewed for 4 s) and "
        "another call changed or removed it meanwhile; nothing of this change was written, "
        f"but this call's changes to cart {first!r}, cart {second!r} were.\n"
    ), str(caught.value)


# "The lease is released on every path that can reach the store" (docs/state.md): also
# the leases of the values a call does not write because another write was refused, or
# failed (and that one's); the next call to edit them does not wait for them to lapse.
@pytest.mark.parametrize("refusal", ["lease lost", "store failed"])
async def test_the_values_a_refused_call_leaves_unwritten_are_free_at_once(
    refusal: str,
) -> None:
    error = OSError("the store went away") if refusal == "store failed" else None
    store = RefusesOne(1, error)
    carts = on(store, lease=30, wait=0.05)
    add_to_three = three_carts(carts)
    async with carts.container:
        handles = [await carts.run(carts.open_cart) for _ in range(3)]
        store.wrote.clear()
        said = "the store went away" if error else "nothing of this call was written"
        with pytest.raises(OSError if error else StateConflict, match=said):
            await carts.run(add_to_three, cart=handles[0], b=handles[1], c=handles[2])
        assert store.wrote == []
        for handle in handles:  # each free now, not in 30 s (this call waits 0.05 s)
            assert await carts.run(carts.add, cart=handle, item="pear") == {"pear": 1}


# "When a write of a call is refused [...], the call writes nothing after it, and the error
# says what it wrote before" (docs/state.md), also of a call that creates one value and
# edits another: the new value refused, the edit is not written; the edit refused, the
# error names the value the call created.
async def test_a_call_that_creates_and_edits_writes_nothing_after_a_refusal() -> None:
    store = RefusesOne(0)
    carts = on(store, max_size=100)
    state = carts.state
    minted: list[str] = []

    async def split(
        cart: Handle,
        big: bool,
        edit: Annotated[Held[Cart], Resolve(state.edit)],
        fresh: Annotated[Held[Cart], Resolve(state.new)],  # set up last, so written first
    ) -> None:
        edit.value.items["split"] = 1
        fresh.value.items["x" * (200 if big else 1)] = 1
        minted.append(fresh.handle)

    async with carts.container:
        handle = await carts.run(carts.open_cart)
        with pytest.raises(StateTooLarge):
            await carts.run(split, cart=handle, big=True)
        assert await carts.run(carts.show, cart=handle) == Cart()
        store.nth = 1  # the edit's write is refused
        with pytest.raises(StateConflict) as caught:
            await carts.run(split, cart=handle, big=False)
    assert str(caught.value).startswith(
        f"cart {handle!r} was not saved: this call's lease lapsed (unrenewed for 4 s) and "
        "another call changed or removed it meanwhile; nothing of this change was written, "
        f"but this call's changes to cart {minted[-1]!r} were.\n"
    ), str(caught.value)


class LosesAnswers(MemoryStore):
    """A memory store whose renewals take effect (for 30 s) but never answer: the
    connection dropped on the way back."""

    def __init__(self) -> None:
        super().__init__()
        self.renewed = anyio.Event()

    async def renew(self, key: StateKey, token: str, lease: float) -> bool:
        await super().renew(key, token, 30)
        self.renewed.set()
        raise ConnectionError("the answer was lost")


# "An edit [...] that could not renew within its lease time (the store did not answer),
# learns it before it commits: its save fails with StateConflict [...], and nothing of it
# is written"; and "The lease is released on every path that can reach the store": the
# next call does not wait for the lease the store did extend.
async def test_an_edit_whose_renewals_went_unanswered_writes_nothing_and_lets_go() -> None:
    store = LosesAnswers()
    carts = on(store, lease=0.2, wait=0.05)

    async def past_the_lease() -> None:
        with anyio.fail_after(10):  # only a hang fails here
            await store.renewed.wait()
        await anyio.sleep(0.25)  # no renewal confirmed: the lease is past its time

    async with carts.container:
        handle = await carts.run(carts.open_cart)
        carts.gate = past_the_lease
        with pytest.raises(StateConflict, match="this call lost its lease"):
            await carts.run(carts.add, cart=handle, item="fig")
        carts.gate = None
        assert await carts.run(carts.add, cart=handle, item="pear") == {"pear": 1}


# "A value the call read before it edits it is the one it edits, unless another call
# changed it in between; then the edit fails with StateConflict before anything is
# written" (docs/state.md).
async def test_a_value_changed_between_a_calls_read_and_its_edit_is_a_conflict() -> None:
    carts = on(MemoryStore())
    state = carts.state

    async def meddled(cart: Handle, before: Annotated[Cart, Resolve(state.read)]) -> Cart:
        await carts.run(carts.add, cart=cart, item="meddler")  # another call, in between
        return before

    async def restock(
        cart: Handle,
        before: Annotated[Cart, Resolve(meddled)],
        edit: Annotated[Held[Cart], Resolve(state.edit)],
    ) -> None:
        edit.value.items["restocked"] = 1

    async with carts.container:
        handle = await carts.run(carts.open_cart)
        with pytest.raises(StateConflict) as caught:
            await carts.run(restock, cart=handle)
        assert await carts.run(carts.show, cart=handle) == Cart(items={"meddler": 1})
    assert str(caught.value) == (
        f"cart {handle!r} was changed by another call between this call's read of it and "
        "its edit; nothing of this call was written.\n  fix: try again"
    )


class CountsRenewals(MemoryStore):
    """A memory store that notes the handle of each renewal it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.renewed: list[str] = []

    async def renew(self, key: StateKey, token: str, lease: float) -> bool:
        self.renewed.append(key.handle)
        return await super().renew(key, token, lease)


# "the call that holds it renews it every quarter of that time for as long as its handler
# runs" (docs/state.md): and no longer. A lease whose call has ended is not renewed while
# another call's is.
async def test_a_lease_is_renewed_while_its_call_runs_and_not_after() -> None:
    store = CountsRenewals()
    carts = on(store, lease=0.2)

    def until_renewed(handle: str, times: int) -> Callable[[], Any]:
        async def gate() -> None:
            with anyio.fail_after(10):  # only a hang fails here
                while store.renewed.count(handle) < times:
                    await anyio.sleep(0.01)

        return gate

    async with carts.container:
        first, second = await carts.run(carts.open_cart), await carts.run(carts.open_cart)
        carts.gate = until_renewed(first, 1)
        await carts.run(carts.add, cart=first, item="fig")
        # The second call's lease falls due after the first one's would: renewed twice,
        # while the first, ended, is renewed no more.
        carts.gate = until_renewed(second, 2)
        await carts.run(carts.add, cart=second, item="fig")
    assert store.renewed.count(first) == 1


# -- retries that do not double: docs/state.md, "Retries that do not double" --------------


class Total(BaseModel):
    count: int


def test_idempotent_refuses_a_function_it_cannot_keep_from_doubling() -> None:
    carts = State("cart", Cart)

    async def show(cart: Handle, value: Annotated[Cart, Resolve(carts.read)]) -> Cart:
        return value

    async def keyed(
        cart: Handle, idempotency_key: str, edit: Annotated[Held[Cart], Resolve(carts.edit)]
    ) -> None: ...

    async def ledgered(
        cart: Handle, resolvent_call: str, edit: Annotated[Held[Cart], Resolve(carts.edit)]
    ) -> None: ...

    for fn, name in ((show, "edits_nothing"), (keyed, "key_taken"), (ledgered, "name_taken")):
        with pytest.raises(ValueError) as caught:
            carts.idempotent(fn)
        assert_snapshot(f"idempotent_{name}", str(caught.value))


def test_idempotent_takes_functions_and_methods_and_says_so_of_anything_else() -> None:
    carts = State("cart", Cart)

    class Shop:
        async def add(self, cart: Handle, edit: Annotated[Held[Cart], Resolve(carts.edit)]) -> None:
            """A method: its name keys what it keeps, as a function's does."""

        async def __call__(
            self, cart: Handle, edit: Annotated[Held[Cart], Resolve(carts.edit)]
        ) -> None: ...

    assert carts.idempotent(Shop().add).__name__ == "add"
    for fn in (Shop(), functools.partial(Shop().add)):
        with pytest.raises(TypeError) as caught:
            carts.idempotent(fn)
        message = str(caught.value)
        assert message.startswith("State('cart').idempotent(") and "takes a function" in message
        assert type(fn).__name__ in message and "\n  fix: decorate an async def" in message


# "What comes back: the first result, validated again as the handler's return annotation";
# "1 to 200 characters"; a key belongs to one handler ("same principal, handle and
# handler"), also when the call reads the value before it edits it.
async def test_a_retry_returns_the_first_result_as_the_handler_returned_it() -> None:
    carts = on(MemoryStore())
    state = carts.state

    async def count(cart: Handle, edit: Annotated[Held[Cart], Resolve(state.edit)]) -> Total:
        edit.value.items["n"] = edit.value.items.get("n", 0) + 1
        return Total(count=edit.value.items["n"])

    async def bare(
        cart: Handle,
        before: Annotated[Cart, Resolve(state.read)],
        edit: Annotated[Held[Cart], Resolve(state.edit)],
    ):
        edit.value.items["b"] = before.items.get("b", 0) + 1
        return {"b": edit.value.items["b"]}

    targets = State("cart", Cart, store=state.store, principal=ada, argument="dst")

    async def merge(
        cart: Handle,
        dst: Handle,
        old: Annotated[Held[Cart], Resolve(targets.edit)],  # loads the handle first
        into: Annotated[Held[Cart], Resolve(state.edit)],
    ) -> dict[str, int]:
        into.value.items["m"] = into.value.items.get("m", 0) + 1
        return dict(into.value.items)

    count_once, bare_once = state.idempotent(count), state.idempotent(bare)
    merge_once = state.idempotent(merge)
    async with carts.container:
        handle = await carts.run(carts.open_cart)
        for key in ("k", "k" * 200):
            first = await carts.run(count_once, cart=handle, idempotency_key=key)
            again = await carts.run(count_once, cart=handle, idempotency_key=key)
            assert isinstance(again, Total) and again == first
        assert first == Total(count=2)
        for _ in range(2):  # the same key, another handler: a request of its own
            assert await carts.run(bare_once, cart=handle, idempotency_key="k") == {"b": 1}
        merged = {"n": 2, "b": 1, "m": 1}
        for _ in range(2):
            assert (
                await carts.run(merge_once, cart=handle, dst=handle, idempotency_key="k") == merged
            )
        assert await carts.run(carts.show, cart=handle) == Cart(items=merged)
        for key in ("", "k" * 201):
            with pytest.raises(StateError) as caught:
                await carts.run(count_once, cart=handle, idempotency_key=key)
            assert_snapshot(f"idempotency_key_of_{len(key)}", str(caught.value))


# @carts.idempotent on a handler of a module that postpones its annotations (`from
# __future__ import annotations`): the handler keeps its name, its docstring and the
# types resolvent reads from its module, which any reader of a signature finds too
# (`typing.get_type_hints`, `inspect.signature`: what frameworks read).
async def test_an_idempotent_handler_reads_as_the_function_it_wraps() -> None:
    import importlib
    import inspect
    import typing

    import state_postponed

    # Imported afresh, as a new process would: the decorator runs within this test, not
    # once for every test of the process.
    module = importlib.reload(state_postponed)

    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        assert (
            getattr(module.add, attribute)
            == {
                "__module__": "state_postponed",
                "__name__": "add",
                "__qualname__": "add",
                "__doc__": "Add one item to a basket.",
            }[attribute]
        )
    assert typing.get_type_hints(module.add)["return"] is module.Basket
    assert inspect.signature(module.add).return_annotation is module.Basket
    async with Container() as container:
        handle = await container.run(module.open_basket)
        for _ in range(2):
            added = await container.run(module.add, basket=handle, item="fig", idempotency_key="k")
            # The retry's too: a Basket, read back as the annotation of the module names it.
            assert type(added) is module.Basket and added.items == {"fig": 1}


class Refusing(MemoryStore):
    """A memory store that says when it refused a renewal."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock=clock)
        self.refused = anyio.Event()

    async def renew(self, key: StateKey, token: str, lease: float) -> bool:
        renewed = await super().renew(key, token, lease)
        if not renewed:
            self.refused.set()
        return renewed


# "An edit whose renewal the store refused (another call holds the handle) [...] learns
# it before it commits, and nothing of it is written" (docs/state.md): the error says
# which of the two happened.
async def test_an_edit_whose_renewal_was_refused_says_so_and_writes_nothing() -> None:
    from resolvent._state import owner_digest

    clock = Clock()
    store = Refusing(clock)
    carts = on(store, lease=0.4, wait=0.01)
    inside, release = anyio.Event(), anyio.Event()
    failures: list[StateConflict] = []

    async def slow() -> None:
        inside.set()
        await release.wait()

    async def late(handle: str) -> None:
        try:
            await carts.run(carts.add, cart=handle, item="late")
        except StateConflict as exc:
            failures.append(exc)

    async with carts.container:
        handle = await carts.run(carts.open_cart)
        carts.gate = slow
        async with anyio.create_task_group() as group:
            group.start_soon(late, handle)
            await inside.wait()
            carts.gate = None
            clock.advance(1)  # on the store's clock the lease ran out: another call takes it
            assert await store.load(StateKey("cart", owner_digest("ada"), handle), 60, "b", 30)
            with anyio.fail_after(10):
                await store.refused.wait()
            release.set()  # well within the lease time since the last renewal that held
        (failure,) = failures
        assert str(failure).startswith(
            f"cart {handle!r} was not saved: this call lost its lease (the store refused its "
            "renewal, or did not confirm one within 0.4 s), so another call may have changed it"
        ), str(failure)
        clock.advance(31)
        assert await carts.run(carts.show, cart=handle) == Cart()


class Recording(MemoryStore):
    """A memory store that notes the name each save keeps a result under."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[str] = []

    async def save(
        self,
        key: StateKey,
        idle: float,
        token: str,
        data: bytes | None,
        delete: bool,
        remember: tuple[str, bytes, float] | None = None,
    ) -> bool:
        if remember is not None:
            self.kept.append(remember[0])
        return await super().save(key, idle, token, data, delete, remember)


# A key's record is found by a name stores keep: a server of the next release finds what
# this one kept (a retry across a deploy still returns the first result). The name is the
# handler's and the key's, also when another parameter of the call edits the handle first.
async def test_a_keys_record_is_named_as_the_records_already_stored_expect() -> None:
    store = Recording()
    carts = on(store)
    targets = State("cart", Cart, store=carts.state.store, principal=ada, argument="dst")

    async def add_once(cart: Handle, edit: Annotated[Held[Cart], Resolve(carts.state.edit)]):
        edit.value.items["fig"] = 1

    keyed = carts.state.idempotent(add_once)

    async def add_once_too(  # the same handler, its handle edited through `dst` first
        cart: Handle,
        dst: Handle,
        old: Annotated[Held[Cart], Resolve(targets.edit)],
        edit: Annotated[Held[Cart], Resolve(carts.state.edit)],
    ) -> None:
        edit.value.items["fig"] = 1

    add_once_too.__name__ = "add_once"
    keyed_too = carts.state.idempotent(add_once_too)
    async with carts.container:
        handle, other = await carts.run(carts.open_cart), await carts.run(carts.open_cart)
        await carts.run(keyed, cart=handle, idempotency_key="req-1")
        await carts.run(keyed_too, cart=other, dst=other, idempotency_key="req-1")
    assert store.kept == ["285a007a92296561fae89aa5d5385193"] * 2


# "Parameters of one call that reach the same handle share it": through two kinds of one
# name, only with one model.
async def test_one_handle_through_two_kinds_of_different_models_is_refused() -> None:
    container = Container()
    provide = provider_of(MemoryStore())
    container.provide(provide, scope=Scope.APP)
    carts = State("cart", Cart, store=provide, principal=ada)
    others = State("cart", CartV2, store=provide, principal=ada, argument="other")

    async def open_cart(cart: Annotated[Held[Cart], Resolve(carts.new)]) -> str:
        return cart.handle

    async def both(
        cart: Handle,
        other: Handle,
        one: Annotated[Cart, Resolve(carts.read)],
        two: Annotated[CartV2, Resolve(others.read)],
    ) -> None: ...

    twins = State("cart", Cart, store=provide, principal=ada, argument="other")

    async def same(
        cart: Handle,
        other: Handle,
        one: Annotated[Cart, Resolve(carts.read)],
        two: Annotated[Cart, Resolve(twins.read)],
    ) -> bool:
        return one is two  # one load, one value

    async def read_then_edit(
        cart: Handle,
        other: Handle,
        one: Annotated[Cart, Resolve(carts.read)],
        two: Annotated[Held[CartV2], Resolve(others.edit)],
    ) -> None: ...

    async with container:
        handle = await container.run(open_cart)
        assert await container.run(same, cart=handle, other=handle)
        with pytest.raises(StateError) as caught:
            await container.run(both, cart=handle, other=handle)
        with pytest.raises(StateError) as edited:  # the same refusal for an edit
            await container.run(read_then_edit, cart=handle, other=handle)
    assert_snapshot("one_handle_two_models", str(caught.value).replace(handle, "H"))
    assert str(edited.value) == str(caught.value)


# Held: "Change value in place or assign a new one; call delete to remove it" -- and its
# repr, in a debugger or a log, says which handle, what value and whether it goes.
def test_a_held_values_repr_says_its_handle_value_and_deletion() -> None:
    held = Held("h" * 32, Cart(items={"fig": 1}))
    assert held.deleted is False
    assert repr(held) == f"Held({'h' * 32!r}, Cart(items={{'fig': 1}}))"
    held.delete()
    assert held.deleted is True
    assert repr(held) == f"Held({'h' * 32!r}, Cart(items={{'fig': 1}}), deleted)"


# A kind's resolvers read like the rest of the plan: named after the kind in a plan's text
# and in errors, and judged by the model they give ("The consumer's T is also checked
# against what the resolver declares it returns", docs/concepts.md).
def test_a_kinds_resolvers_are_named_and_typed_in_the_plan() -> None:
    carts = State("cart", Cart)
    container = Container()

    async def add(cart: Handle, edit: Annotated[Held[Cart], Resolve(carts.edit)]) -> None:
        pass

    async def wrong(cart: Handle, n: Annotated[int, Resolve(carts.read)]) -> None:
        pass

    async def open_cart(cart: Annotated[Held[Cart], Resolve(carts.new)]) -> None:
        pass

    async def show(cart: Handle, value: Annotated[Cart, Resolve(carts.read)]) -> None:
        pass

    described = container.compile(add).describe()
    assert "resolvent.State['cart'].edit" in described
    # An edit's lease is renewed by an APP resource named where it lives, as traces name it.
    assert "resolvent._state.leases.lease_keeper  APP" in described
    assert "resolvent.State['cart'].new" in container.compile(open_cart).describe()
    assert "resolvent.State['cart'].read" in container.compile(show).describe()
    with pytest.raises(
        InvalidSignature, match=r"expects int, .*State\['cart'\]\.read returns Cart"
    ):
        container.compile(wrong)


# "idle_ttl: seconds a value lives after its last use": once they have passed, it is gone,
# on every store alike.
async def test_a_value_is_gone_once_its_idle_time_has_passed(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    clock = Clock()
    valkey = request.getfixturevalue("valkey_url") if store_kind == "redis" else None
    options = {} if store_kind == "redis" else {"sweep": 1e9}  # the answer, not a sweep
    async with open_test_store(store_kind, tmp_path, valkey, clock, **options) as store:
        carts = on(store, idle_ttl=100)
        async with carts.container:
            handle = await carts.run(carts.open_cart)
            clock.advance(100)
            with pytest.raises(StateNotFound):
                await carts.run(carts.show, cart=handle)
            for use in (carts.show, carts.add):  # a read, then an edit, each refresh it
                handle = await carts.run(carts.open_cart)
                clock.advance(50)
                await carts.run(use, cart=handle, **({"item": "x"} if use is carts.add else {}))
                clock.advance(100)
                with pytest.raises(StateNotFound):
                    await carts.run(carts.show, cart=handle)
            lived = on(store, idle_ttl=100, max_lifetime=150)
            async with lived.container:
                handle = await lived.run(lived.open_cart)
                clock.advance(90)
                await lived.run(lived.show, cart=handle)
                clock.advance(60)  # 150 s since it was made: its lifetime is over
                with pytest.raises(StateNotFound):
                    await lived.run(lived.show, cart=handle)


# open_store: "a SQLite URL has three slashes before a relative path and four before an
# absolute one", and a URL naming no known store is refused with the ones that exist.
@pytest.mark.parametrize("url", ["sqlite://state.db", "sqlite:///", "postgres://db/state"])
async def test_a_url_naming_no_store_says_which_would(url: str) -> None:
    with pytest.raises(ResolventError) as caught:
        async with open_store(url):
            pass
    assert_snapshot(f"open_store_{url.split(':')[0]}_{len(url)}", str(caught.value))


# RedisStore: "Keys are `{prefix}:{kind}:{owner}:{handle}`" (docs/state.md), the prefix
# "resolvent" unless given.
async def test_redis_keys_start_with_the_default_prefix(valkey_url: str) -> None:
    from resolvent.redis import RedisStore

    async with RedisStore.connect(valkey_url) as store:
        key = StateKey("cart", "owner", "h" * 32)
        assert store.key(key) == f"resolvent:cart:owner:{'h' * 32}"
        assert RedisStore(store.client).key(key) == store.key(key)  # a client of your own
