"""One conformance suite for state kept across calls, run against every store.

Memory, SQLite and Redis (a real Valkey server started here), on asyncio and trio, through
real calls of a container: create, read, edit, delete, expiry (sliding and absolute, on a
clock the test drives, and real removal on the real one), principal isolation, unknown and
forged handles, schema mismatch and migration, the size limit, failed or cancelled
edits writing nothing, leases and idempotency keys; and, for a store that talks to a server,
faults injected on the wire by a proxy (latency, a dropped connection, a reset in the middle
of a script, a freeze).
"""

import contextlib
import contextvars
import math
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from resolvent import (
    Container,
    Handle,
    Held,
    Resolve,
    Scope,
    State,
    StateConflict,
    StateError,
    StateKey,
    StateNotFound,
    StateStore,
)
from state_helpers import STORES, Clock, open_test_store

pytestmark = pytest.mark.network  # the Redis store talks to 127.0.0.1

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="ada")


def who() -> str:
    return WHO.get()


class Cart(BaseModel):
    items: dict[str, int] = {}


# and "toy", a store of the tests' own added with add_store_scheme (toy_store.py)
@pytest.fixture(params=[*STORES, "toy"])
def store_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    if kind == "redis":
        request.getfixturevalue("valkey_url")
    return kind


class Kit:
    """A container with one State on a fresh store, and the handlers the tests call."""

    def __init__(self, store: StateStore, **options: Any) -> None:
        self.store = store
        self.container = Container()

        async def provide() -> AsyncIterator[StateStore]:
            yield store

        self.container.provide(provide, scope=Scope.APP)
        options.setdefault("principal", who)
        self.carts = carts = State("cart", options.pop("model", Cart), store=provide, **options)
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

        self.open_cart, self.add, self.show, self.drop = open_cart, add, show, drop

    async def run(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        return await self.container.run(fn, **kwargs)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def opened(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock | None):
    valkey = request.getfixturevalue("valkey_url") if store_kind == "redis" else None
    return open_test_store(store_kind, tmp_path, valkey, clock)


async def test_create_read_edit_delete(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as store:
        kit = Kit(store)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            assert re.fullmatch(r"[A-Za-z0-9_-]{32}", handle)  # 192 bits, URL-safe
            assert await kit.run(kit.show, cart=handle) == Cart()
            assert await kit.run(kit.add, cart=handle, item="apple") == {"apple": 1}
            assert await kit.run(kit.add, cart=handle, item="apple") == {"apple": 2}
            assert await kit.run(kit.show, cart=handle) == Cart(items={"apple": 2})
            other = await kit.run(kit.open_cart)
            assert other != handle
            assert await kit.run(kit.show, cart=other) == Cart()
            await kit.run(kit.drop, cart=handle)
            with pytest.raises(StateNotFound, match="not found or expired"):
                await kit.run(kit.show, cart=handle)
            with pytest.raises(StateNotFound):
                await kit.run(kit.add, cart=handle, item="pear")
            assert await kit.run(kit.show, cart=other) == Cart()


async def test_new_value_is_written_only_when_the_handler_succeeds(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as store:
        kit = Kit(store)
        minted: list[str] = []

        async def open_and_fail(cart: Annotated[Held[Cart], Resolve(kit.carts.new)]) -> None:
            minted.append(cart.handle)
            raise RuntimeError("boom")

        async with kit.container:
            with pytest.raises(RuntimeError):
                await kit.run(open_and_fail)
            with pytest.raises(StateNotFound):
                await kit.run(kit.show, cart=minted[0])


async def test_sliding_idle_expiry(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as store:
        kit = Kit(store, idle_ttl=100, max_lifetime=10_000)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            for _ in range(5):  # 300 s in all, never 100 s idle: every use refreshes it
                clock.advance(60)
                await kit.run(kit.show, cart=handle)
            clock.advance(60)
            await kit.run(kit.add, cart=handle, item="apple")  # edits refresh it too
            clock.advance(99)
            assert await kit.run(kit.show, cart=handle) == Cart(items={"apple": 1})
            clock.advance(101)
            with pytest.raises(StateNotFound, match="not found or expired"):
                await kit.run(kit.show, cart=handle)
            clock.advance(-101)  # gone for good: not merely hidden at that moment
            with pytest.raises(StateNotFound):
                await kit.run(kit.show, cart=handle)


async def test_absolute_lifetime(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as store:
        kit = Kit(store, idle_ttl=100, max_lifetime=250)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            for _ in range(4):  # used every 60 s, up to 240 s
                clock.advance(60)
                await kit.run(kit.add, cart=handle, item="apple")
            clock.advance(11)  # 251 s: past the deadline although used 11 s ago
            with pytest.raises(StateNotFound):
                await kit.run(kit.show, cart=handle)


@pytest.mark.parametrize("idle_ttl, max_lifetime", [(math.inf, math.inf), (math.inf, 250)])
async def test_an_infinite_idle_time_or_lifetime_never_runs_out(
    store_kind: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    clock: Clock,
    idle_ttl: float,
    max_lifetime: float,
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as store:
        kit = Kit(store, idle_ttl=idle_ttl, max_lifetime=max_lifetime)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            clock.advance(240)  # never idle too long; the lifetime alone may end it
            assert await kit.run(kit.add, cart=handle, item="fig") == {"fig": 1}
            clock.advance(20)
            if max_lifetime == math.inf:
                clock.advance(10 * 365 * 86400)  # ten years, unused
                assert await kit.run(kit.show, cart=handle) == Cart(items={"fig": 1})
            else:
                with pytest.raises(StateNotFound):
                    await kit.run(kit.show, cart=handle)


async def test_another_principals_handle_is_not_found_with_the_same_message(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as store:
        kit = Kit(store)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            await kit.run(kit.add, cart=handle, item="apple")
            unknown = "A" * 32
            messages = {}
            token = WHO.set("mallory")
            try:
                for label, fn, args in (
                    ("read", kit.show, {}),
                    ("edit", kit.add, {"item": "x"}),
                    ("delete", kit.drop, {}),
                ):
                    for target in (handle, unknown):
                        with pytest.raises(StateNotFound) as caught:
                            await kit.run(fn, cart=target, **args)
                        messages[label, target] = str(caught.value).replace(target, "H")
            finally:
                WHO.reset(token)
            # No oracle: another's handle and an unknown one read exactly alike.
            assert len(set(messages.values())) == 1
            assert await kit.run(kit.show, cart=handle) == Cart(items={"apple": 1})


@pytest.mark.parametrize(
    "forged",
    ["", "short", "A" * 31, "A" * 33, "../../etc/passwd/xxxxxxxxxxxxxxxx", "a:b:c" + "x" * 27, 42],
)
async def test_forged_handles_are_not_found(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, forged: Any
) -> None:
    async with opened(store_kind, tmp_path, request, None) as store:
        kit = Kit(store)
        async with kit.container:
            with pytest.raises(StateNotFound, match="not found or expired"):
                await kit.run(kit.show, cart=forged)
            with pytest.raises(StateNotFound, match="not found or expired"):
                await kit.run(kit.add, cart=forged, item="x")


class CartV2(BaseModel):
    lines: list[str]


async def test_schema_mismatch_names_kind_and_handle_and_migration_fixes_it(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with opened(store_kind, tmp_path, request, None) as store:
        old = Kit(store)
        async with old.container:
            handle = await old.run(old.open_cart)
            await old.run(old.add, cart=handle, item="apple")
        same_version = Kit(store, model=CartV2)
        async with same_version.container:
            with pytest.raises(StateError) as caught:
                await same_version.run(same_version.show, cart=handle)
        text = str(caught.value)
        assert "cart" in text and handle in text and "CartV2" in text and "migrate" in text
        assert not isinstance(caught.value, StateNotFound)
        no_migration = Kit(store, model=CartV2, version=2)
        async with no_migration.container:
            with pytest.raises(StateError, match="schema version 1") as caught:
                await no_migration.run(no_migration.show, cart=handle)
        assert handle in str(caught.value)

        def migrate(version: int, data: Any) -> Any:
            assert version == 1
            return {"lines": [f"{k} x{v}" for k, v in data["items"].items()]}

        migrated = Kit(store, model=CartV2, version=2, migrate=migrate)
        async with migrated.container:
            assert await migrated.run(migrated.show, cart=handle) == CartV2(lines=["apple x1"])


async def test_size_limit(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    async with opened(store_kind, tmp_path, request, None) as store:
        kit = Kit(store, max_size=200)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            with pytest.raises(StateError, match=r"over the limit of 200.*nothing was saved"):
                await kit.run(kit.add, cart=handle, item="x" * 300)
            # Nothing was written, and the lease is free again.
            assert await kit.run(kit.show, cart=handle) == Cart()
            assert await kit.run(kit.add, cart=handle, item="pear") == {"pear": 1}


async def test_failed_and_cancelled_edits_write_nothing(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with opened(store_kind, tmp_path, request, None) as store:
        kit = Kit(store, wait=30)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            await kit.run(kit.add, cart=handle, item="apple")

            async def fail() -> None:
                raise RuntimeError("handler failed")

            kit.gate = fail
            with pytest.raises(RuntimeError, match="handler failed"):
                await kit.run(kit.add, cart=handle, item="apple")
            assert await kit.run(kit.show, cart=handle) == Cart(items={"apple": 1})

            inside = anyio.Event()

            async def hang() -> None:
                inside.set()
                await anyio.sleep_forever()

            kit.gate = hang
            async with anyio.create_task_group() as group:
                group.start_soon(lambda: kit.run(kit.add, cart=handle, item="apple"))
                await inside.wait()  # mid-edit: the value is changed in memory, lease held
                group.cancel_scope.cancel()
            kit.gate = None
            # Nothing written, and the lease was released: the next edit need not wait.
            assert await kit.run(kit.show, cart=handle) == Cart(items={"apple": 1})
            with anyio.fail_after(20):
                assert await kit.run(kit.add, cart=handle, item="apple") == {"apple": 2}


async def test_concurrent_edits_from_many_tasks_lose_nothing(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with opened(store_kind, tmp_path, request, None) as store:
        kit = Kit(store, wait=60)
        async with kit.container:
            handle = await kit.run(kit.open_cart)

            async def worker() -> None:
                for _ in range(4):
                    await kit.run(kit.add, cart=handle, item="apple")

            with anyio.fail_after(60):
                async with anyio.create_task_group() as group:
                    for _ in range(12):
                        group.start_soon(worker)
            assert await kit.run(kit.show, cart=handle) == Cart(items={"apple": 48})


async def test_an_edit_past_its_lease_loses_it_and_writes_nothing(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as store:
        kit = Kit(store, lease=30, wait=30)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            inside, release = anyio.Event(), anyio.Event()

            async def slow() -> None:
                inside.set()
                await release.wait()

            kit.gate = slow
            failures: list[BaseException] = []

            async def late_edit() -> None:
                try:
                    await kit.run(kit.add, cart=handle, item="late")
                except StateConflict as exc:
                    failures.append(exc)

            async with anyio.create_task_group() as group:
                group.start_soon(late_edit)
                await inside.wait()
                kit.gate = None
                clock.advance(31)  # the slow edit's lease ran out: another call may take it
                assert await kit.run(kit.add, cart=handle, item="prompt") == {"prompt": 1}
                release.set()
            assert len(failures) == 1
            assert "lease" in str(failures[0]) and "nothing" in str(failures[0])
            assert await kit.run(kit.show, cart=handle) == Cart(items={"prompt": 1})


async def test_waiting_for_a_held_lease_gives_up_with_a_conflict(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with opened(store_kind, tmp_path, request, None) as store:
        kit = Kit(store, wait=0.05)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            inside, release = anyio.Event(), anyio.Event()

            async def hold() -> None:
                inside.set()
                await release.wait()

            kit.gate = hold
            async with anyio.create_task_group() as group:
                group.start_soon(lambda: kit.run(kit.add, cart=handle, item="first"))
                await inside.wait()
                kit.gate = None
                with pytest.raises(StateConflict, match="being changed by another call"):
                    await kit.run(kit.add, cart=handle, item="second")
                with pytest.raises(StateConflict):  # a read waits for the edit too
                    await kit.run(kit.show, cart=handle)
                release.set()
            assert await kit.run(kit.show, cart=handle) == Cart(items={"first": 1})


async def test_a_call_reading_what_it_edits_does_not_wait_for_itself(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with opened(store_kind, tmp_path, request, None) as store:
        kit = Kit(store, wait=0.05)
        carts = kit.carts

        async def both(
            cart: Handle,
            edit: Annotated[Held[Cart], Resolve(carts.edit)],
            seen: Annotated[Cart, Resolve(carts.read)],
        ) -> Cart:
            edit.value.items["x"] = 1
            return seen

        async with kit.container:
            handle = await kit.run(kit.open_cart)
            # One handle, one value per call: the read sees the edit's change.
            assert await kit.run(both, cart=handle) == Cart(items={"x": 1})
            assert await kit.run(kit.show, cart=handle) == Cart(items={"x": 1})


async def test_expired_values_are_removed_from_the_store(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # The real clock: expiry is the store's own (PEXPIRE, the SQLite sweeper, the memory
    # sweep), so the value leaves the store itself, not only the answers.
    options = {"sweep": 0.05} if store_kind in ("memory", "sqlite") else {}
    valkey = request.getfixturevalue("valkey_url") if store_kind == "redis" else None
    async with open_test_store(store_kind, tmp_path, valkey, None, **options) as store:
        key = StateKey("cart", "owner", "h" * 32)
        await store.create(key, b"1\n{}", 0.2, 60)
        assert await store.load(key, 0.2, "t", 0) == b"1\n{}"
        with anyio.fail_after(20):
            while await _held(store, key):
                await anyio.sleep(0.05)


async def _held(store: StateStore, key: StateKey) -> bool:
    """Whether the store still keeps *key* at all (looked at below the protocol)."""
    from resolvent import MemoryStore, SqliteStore
    from toy_store import ToyStore

    if isinstance(store, ToyStore):
        store.now()  # drops what has expired, as any use does
        return bool(store.values)
    if isinstance(store, MemoryStore):
        await store.load(StateKey("other", "x", "y" * 32), 1, "t", 0)  # any use sweeps
        return len(store) > 0
    if isinstance(store, SqliteStore):
        import sqlite3

        with sqlite3.connect(store.path) as conn:
            return bool(conn.execute("select count(*) from resolvent_state").fetchone()[0])
    from resolvent.redis import RedisStore

    assert isinstance(store, RedisStore)
    return bool(await store.client.exists([store.key(key)]))


async def test_sqlite_sweep_deletes_what_expired_and_counts_the_values(
    tmp_path: Path, clock: Clock
) -> None:
    # SqliteStore.sweep: "Delete expired rows now; returns how many" (values and kept
    # results alike; the count is the values').
    import sqlite3

    from resolvent import SqliteStore

    store = await SqliteStore.open(str(tmp_path / "swept.db"), clock=clock, sweep=3600)
    try:
        for n in range(3):
            await store.create(StateKey("cart", "owner", f"{n}" * 32), b"1\n{}", 10, 1000)
        kept = StateKey("cart", "owner", "k" * 32)
        await store.create(kept, b"1\n{}", 100, 1000)
        assert await store.load(kept, 100, "mine", 5) is not None
        assert await store.save(kept, 100, "mine", None, False, remember=("req", b"1", 10))
        clock.advance(50)
        assert await store.sweep() == 3
        assert await store.sweep() == 0
        with contextlib.closing(sqlite3.connect(store.path)) as conn:
            tables = ("resolvent_state", "resolvent_receipt")
            counts = [conn.execute(f"select count(*) from {t}").fetchone()[0] for t in tables]
        assert counts == [1, 0]
    finally:
        await store.aclose()


async def test_sqlite_sweeps_on_after_a_sweep_met_another_writers_lock(tmp_path: Path) -> None:
    import sqlite3

    from resolvent import SqliteStore

    store = await SqliteStore.open(str(tmp_path / "locked.db"), sweep=0.02)
    try:
        key = StateKey("cart", "owner", "l" * 32)
        await store.create(key, b"1\n{}", 0.2, 60)
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # every sweep meanwhile finds the file locked
        await anyio.sleep(0.3)
        other.execute("ROLLBACK")
        other.close()
        with anyio.fail_after(10):  # the sweeps after the lock remove the expired value
            while await _held(store, key):
                await anyio.sleep(0.05)
    finally:
        await store.aclose()


# -- leases that belong to a live holder ---------------------------------------------------


class Faulty:
    """A real store with one operation made to misbehave, as a store under faults does.

    *load_fault* runs after the real load granted its lease ("reply never came":
    sleep forever; "failed": raise). *renew_fault* replaces every renewal's outcome with an
    error. Each renewal attempt sets `renewed`.
    """

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.load_fault: str | None = None
        self.renew_fault = False
        self.granted = anyio.Event()
        self.renewed = anyio.Event()
        self.renewals = 0

    async def create(self, key: StateKey, data: bytes, idle: float, lifetime: float) -> None:
        await self.store.create(key, data, idle, lifetime)

    async def load(self, key: StateKey, idle: float, token: str, lease: float) -> bytes | None:
        data = await self.store.load(key, idle, token, lease)
        fault, self.load_fault = self.load_fault, None
        if fault is not None:
            self.granted.set()
            if fault == "failed":
                raise ConnectionResetError("the connection dropped before the reply")
            await anyio.sleep_forever()
        return data

    async def renew(self, key: StateKey, token: str, lease: float) -> bool:
        self.renewals += 1
        self.renewed.set()
        if self.renew_fault:
            raise ConnectionResetError("the store is away")
        return await self.store.renew(key, token, lease)

    async def save(
        self, key: StateKey, idle: float, token: str, data: bytes | None, delete: bool
    ) -> bool:
        return await self.store.save(key, idle, token, data, delete)

    async def aclose(self) -> None:
        await self.store.aclose()

    async def next_renewal(self) -> None:
        self.renewed = anyio.Event()
        with anyio.fail_after(10):
            await self.renewed.wait()


async def test_an_edit_under_lease_does_not_expire_as_idle(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as store:
        kit = Kit(store, idle_ttl=1, lease=30)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            inside, release = anyio.Event(), anyio.Event()

            async def slow() -> None:
                inside.set()
                await release.wait()

            kit.gate = slow
            async with anyio.create_task_group() as group:
                results: list[Any] = []

                async def edit() -> None:
                    results.append(await kit.run(kit.add, cart=handle, item="apple"))

                group.start_soon(edit)
                await inside.wait()
                clock.advance(1.3)  # idle for longer than idle_ttl, well within the lease
                release.set()
            kit.gate = None
            assert results == [{"apple": 1}]
            clock.advance(0.9)  # idle_ttl counts again from the commit
            assert await kit.run(kit.show, cart=handle) == Cart(items={"apple": 1})
            clock.advance(1.1)
            with pytest.raises(StateNotFound):
                await kit.run(kit.show, cart=handle)


async def test_a_live_edit_renews_its_lease_and_keeps_the_handle(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as real:
        store = Faulty(real)
        kit = Kit(store, lease=0.4, wait=0.01)  # renewed every 0.1 s of real time
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            inside, release = anyio.Event(), anyio.Event()

            async def slow() -> None:
                inside.set()
                await release.wait()

            kit.gate = slow
            async with anyio.create_task_group() as group:
                group.start_soon(lambda: kit.run(kit.add, cart=handle, item="slow"))
                await inside.wait()
                kit.gate = None
                for _ in range(3):  # 0.9 s of the store's time, over two lease times
                    clock.advance(0.3)
                    await store.next_renewal()
                with pytest.raises(StateConflict, match="being changed by another call"):
                    await kit.run(kit.add, cart=handle, item="other")
                release.set()
            assert await kit.run(kit.show, cart=handle) == Cart(items={"slow": 1})


async def test_an_edit_that_waited_longer_than_a_lease_for_the_handle_keeps_it(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with opened(store_kind, tmp_path, request, None) as real:
        store = Faulty(real)
        # 0.6 s, not less: the holder must renew within its lease time (it renews every
        # quarter of it), and a loaded machine can keep an event loop from running for a
        # few tenths of a second (0.3 s failed at a load of 20 on two cores)
        kit = Kit(store, lease=0.6, wait=10)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            inside, release = anyio.Event(), anyio.Event()

            async def hold() -> None:
                inside.set()
                await release.wait()

            kit.gate = hold
            async with anyio.create_task_group() as group:
                group.start_soon(lambda: kit.run(kit.add, cart=handle, item="first"))
                await inside.wait()
                kit.gate = None
                group.start_soon(lambda: kit.run(kit.add, cart=handle, item="second"))
                for _ in range(5):  # the second call waits past its own lease time
                    await store.next_renewal()
                release.set()
            assert await kit.run(kit.show, cart=handle) == Cart(items={"first": 1, "second": 1})


async def test_an_edit_that_cannot_renew_its_lease_commits_nothing(
    store_kind: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    caplog.set_level(logging.DEBUG, logger="resolvent")
    async with opened(store_kind, tmp_path, request, None) as real:
        store = Faulty(real)
        kit = Kit(store, lease=0.1)
        async with kit.container:
            handle = await kit.run(kit.open_cart)

            async def store_goes_away() -> None:
                store.renew_fault = True
                while store.renewals < 5:  # the fifth falls past the lease time
                    await store.next_renewal()

            kit.gate = store_goes_away
            with pytest.raises(StateConflict, match=r"lost its lease.*nothing of this call"):
                await kit.run(kit.add, cart=handle, item="apple")
            store.renew_fault, kit.gate = False, None
            # Each failed renewal is a line at DEBUG, naming the handle and the cause.
            said = {r.getMessage() for r in caplog.records if r.name == "resolvent"}
            assert (
                f"resolvent: could not renew the lease of cart {handle!r}: "
                + repr(ConnectionResetError("the store is away"))
                in said
            ), said
            assert await kit.run(kit.show, cart=handle) == Cart()
            assert await kit.run(kit.add, cart=handle, item="pear") == {"pear": 1}


@pytest.mark.parametrize("fault", ["reply never came", "failed"])
async def test_a_load_that_fails_after_its_lease_was_granted_releases_it(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock, fault: str
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as real:
        store = Faulty(real)
        kit = Kit(store, lease=30, wait=5)  # the lease would stand 30 s on this clock
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            store.load_fault = fault
            async with anyio.create_task_group() as group:

                async def edit() -> None:
                    with pytest.raises((ConnectionResetError, anyio.get_cancelled_exc_class())):
                        await kit.run(kit.add, cart=handle, item="lost")

                group.start_soon(edit)
                await store.granted.wait()
                group.cancel_scope.cancel()  # the client went away, or call_timeout struck
            assert await kit.run(kit.add, cart=handle, item="next") == {"next": 1}


async def test_a_lease_nobody_renews_lapses_within_the_lease_time(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    # A holder that died (a killed process), or a lease request the store ran after its
    # call had gone (queued in a frozen server): nobody renews, so the lease lapses.
    async with opened(store_kind, tmp_path, request, clock) as store:
        kit = Kit(store, lease=3, wait=0.05)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            key = StateKey("cart", _owner_of("ada"), handle)
            assert await store.load(key, 3600, "gone", 3) is not None
            with pytest.raises(StateConflict):
                await kit.run(kit.add, cart=handle, item="apple")
            clock.advance(3.01)
            assert await kit.run(kit.add, cart=handle, item="apple") == {"apple": 1}


async def test_renew_is_a_compare_and_set_on_the_token(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as store:
        key = StateKey("cart", "owner", "r" * 32)
        await store.create(key, b"1\n{}", 10, 1000)
        assert await store.load(key, 10, "mine", 5) is not None
        assert await store.renew(key, "mine", 5)
        assert not await store.renew(key, "theirs", 5)
        clock.advance(4)
        assert await store.renew(key, "mine", 20)  # now leased until 24 s from the start
        clock.advance(15)  # 19 s: idle 10 s past the last use, yet under a live lease
        with pytest.raises(StateConflict):
            await store.load(key, 10, "theirs", 5)
        clock.advance(6)  # 25 s: the lease ran out unrenewed, and the value, idle, with it
        assert await store.load(key, 10, "theirs", 5) is None
        assert not await store.renew(key, "mine", 5)

        other = StateKey("cart", "owner", "s" * 32)
        await store.create(other, b"1\n{}", 100, 1000)
        assert await store.load(other, 100, "mine", 5) is not None
        clock.advance(6)  # the lease ran out unrenewed; another token takes it
        assert await store.load(other, 100, "theirs", 5) is not None
        assert not await store.renew(other, "mine", 5)
        assert not await store.save(other, 100, "mine", b"1\n{}", False)
        assert await store.renew(other, "theirs", 5)
        assert await store.save(other, 100, "theirs", None, False)


def _owner_of(principal: str) -> str:
    from resolvent._state import owner_digest

    return owner_digest(principal)


async def test_call_timeout_holds_while_sqlite_waits_for_another_writer(tmp_path: Path) -> None:
    # Another process holds the file's write lock (here: a connection of this one); a
    # call's store operation waits for it, and its call_timeout still ends the wait.
    import sqlite3

    from resolvent import SqliteStore

    store = await SqliteStore.open(str(tmp_path / "locked.db"), busy_timeout=60)
    try:
        kit = Kit(store)
        kit.container = Container(call_timeout=0.3)
        kit.container.provide(kit.carts.store, scope=Scope.APP)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            other = sqlite3.connect(store.path, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")
            try:
                with anyio.fail_after(20):  # the lock is still held: only a hang trips this
                    with pytest.raises(TimeoutError):
                        await kit.run(kit.add, cart=handle, item="apple")
            finally:
                other.execute("ROLLBACK")
                other.close()
            assert await kit.run(kit.add, cart=handle, item="pear") == {"pear": 1}
    finally:
        await store.aclose()


# -- retries that do not double ------------------------------------------------------------


def once(kit: Kit) -> Callable[..., Any]:
    """The kit's `add`, taking an idempotency key."""

    async def add_once(
        cart: Handle, item: str, edit: Annotated[Held[Cart], Resolve(kit.carts.edit)]
    ) -> dict[str, int]:
        edit.value.items[item] = edit.value.items.get(item, 0) + 1
        if kit.gate is not None:
            await kit.gate()
        return dict(edit.value.items)

    return kit.carts.idempotent(add_once)


class ProtocolOnly:
    """A store seen through the `StateStore` protocol alone: without the optional
    ``load_recalling``, as a store of one's own may be."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.create, self.load, self.renew = store.create, store.load, store.renew
        self.save, self.recall, self.aclose = store.save, store.recall, store.aclose


@pytest.mark.parametrize("through", ["store", "protocol only"])
async def test_a_repeated_idempotency_key_returns_the_first_result_and_edits_once(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock, through: str
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as opened_store:
        store = opened_store if through == "store" else ProtocolOnly(opened_store)
        if through == "protocol only":
            assert not hasattr(store, "load_recalling")
        kit = Kit(store, idempotency_ttl=100)
        add_once = once(kit)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            other = await kit.run(kit.open_cart)
            first = await kit.run(add_once, cart=handle, item="apple", idempotency_key="k1")
            assert first == {"apple": 1}
            await kit.run(add_once, cart=handle, item="pear", idempotency_key="k2")
            # The retry of k1 answers what k1 answered then, and changes nothing.
            again = await kit.run(add_once, cart=handle, item="apple", idempotency_key="k1")
            assert again == first
            assert await kit.run(kit.show, cart=handle) == Cart(items={"apple": 1, "pear": 1})
            # The key belongs to one handle: on another it is a new request.
            assert await kit.run(add_once, cart=other, item="fig", idempotency_key="k1") == {
                "fig": 1
            }
            # Without a key, every call edits.
            await kit.run(add_once, cart=handle, item="apple")
            clock.advance(99)
            assert await kit.run(add_once, cart=handle, item="x", idempotency_key="k1") == first
            clock.advance(2)  # idempotency_ttl has passed: the key is new again
            assert await kit.run(add_once, cart=handle, item="apple", idempotency_key="k1") == {
                "apple": 3,
                "pear": 1,
            }


async def test_an_idempotency_key_is_kept_only_with_a_committed_edit(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    async with opened(store_kind, tmp_path, request, clock) as store:
        kit = Kit(store, lease=30, wait=30)
        add_once = once(kit)
        async with kit.container:
            handle = await kit.run(kit.open_cart)

            async def fail() -> None:
                raise RuntimeError("handler failed")

            kit.gate = fail
            with pytest.raises(RuntimeError):
                await kit.run(add_once, cart=handle, item="apple", idempotency_key="k")
            # A save refused for a lapsed lease keeps no key either: one atomic step.
            inside, release = anyio.Event(), anyio.Event()

            async def slow() -> None:
                inside.set()
                await release.wait()

            kit.gate = slow
            async with anyio.create_task_group() as group:

                async def late() -> None:
                    with pytest.raises(StateConflict):
                        await kit.run(add_once, cart=handle, item="apple", idempotency_key="k")

                group.start_soon(late)
                await inside.wait()
                kit.gate = None
                clock.advance(31)
                await kit.run(kit.add, cart=handle, item="pear")
                release.set()
            # The retry of k applies once, as the first try that counted.
            assert await kit.run(add_once, cart=handle, item="apple", idempotency_key="k") == {
                "apple": 1,
                "pear": 1,
            }
            assert await kit.run(add_once, cart=handle, item="apple", idempotency_key="k") == {
                "apple": 1,
                "pear": 1,
            }


async def test_concurrent_retries_with_one_idempotency_key_edit_once(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with opened(store_kind, tmp_path, request, None) as store:
        kit = Kit(store, wait=30)
        add_once = once(kit)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            results: list[Any] = []

            async def retry() -> None:
                results.append(
                    await kit.run(add_once, cart=handle, item="apple", idempotency_key="same")
                )

            with anyio.fail_after(30):
                async with anyio.create_task_group() as group:
                    for _ in range(6):
                        group.start_soon(retry)
            assert results == [{"apple": 1}] * 6
            assert await kit.run(kit.show, cart=handle) == Cart(items={"apple": 1})


async def test_a_key_outlives_the_value_its_call_deleted(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    # docs/state.md: a retry of a call that deleted the value finds it gone, not the first
    # result. Below State, the store's save deletes the value and keeps the result in one
    # step; recall finds the result for its ttl, while a load (recalling) finds nothing.
    async with opened(store_kind, tmp_path, request, clock) as store:
        kit = Kit(store)

        async def checkout(cart: Handle, edit: Annotated[Held[Cart], Resolve(kit.carts.edit)]):
            edit.delete()
            return sum(edit.value.items.values())

        checkout_once = kit.carts.idempotent(checkout)
        async with kit.container:
            handle = await kit.run(kit.open_cart)
            await kit.run(kit.add, cart=handle, item="apple")
            assert await kit.run(checkout_once, cart=handle, idempotency_key="k") == 1
            with pytest.raises(StateNotFound):
                await kit.run(kit.show, cart=handle)
            with pytest.raises(StateNotFound):
                await kit.run(checkout_once, cart=handle, idempotency_key="k")

        key = StateKey("cart", "owner", "d" * 32)
        await store.create(key, b"1\n{}", 100, 1000)
        assert await store.load(key, 100, "mine", 5) == b"1\n{}"
        assert await store.save(key, 100, "mine", None, True, remember=("req", b"7", 50))
        assert await store.load(key, 100, "other", 0) is None
        load_recalling = getattr(store, "load_recalling", None)
        if load_recalling is not None:
            assert await load_recalling(key, 100, "other", 0, "req") == (None, None)
        assert await store.recall(key, "req") == b"7"
        assert await store.recall(key, "another request") is None
        kept = StateKey("cart", "owner", "e" * 32)  # a value the save keeps, with a result
        await store.create(kept, b"1\n{}", 100, 1000)
        assert await store.load(kept, 100, "mine", 5) == b"1\n{}"
        assert await store.save(kept, 100, "mine", None, False, remember=("req", b"8", 50))
        clock.advance(49.5)
        assert await store.recall(key, "req") == b"7"
        if load_recalling is not None:
            assert await load_recalling(kept, 100, "other", 0, "req") == (b"1\n{}", b"8")
        clock.advance(0.5)  # their ttl has passed
        assert await store.recall(key, "req") is None
        if load_recalling is not None:
            assert await load_recalling(kept, 100, "other", 0, "req") == (b"1\n{}", None)


async def test_a_result_kept_again_lasts_its_new_ttl(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock
) -> None:
    # A store keeps a result for its ttl from the save that kept it last: a sweep of the
    # first save's time does not take the second's away.
    async with opened(store_kind, tmp_path, request, clock) as store:
        key = StateKey("cart", "owner", "r" * 32)
        await store.create(key, b"1\n{}", 1000, 10000)
        assert await store.load(key, 1000, "first", 5) is not None
        assert await store.save(key, 1000, "first", None, False, remember=("req", b"1", 10))
        clock.advance(5)
        assert await store.load(key, 1000, "second", 5) is not None
        assert await store.save(key, 1000, "second", None, False, remember=("req", b"2", 100))
        clock.advance(10)  # past the first ttl, and past a sweep interval
        assert await store.load(key, 1000, "", 0) is not None  # any operation may sweep
        assert await store.recall(key, "req") == b"2"
        clock.advance(100)
        assert await store.load(key, 1000, "", 0) is not None
        assert await store.recall(key, "req") is None


def test_idempotent_needs_an_edit_of_its_state() -> None:
    carts = State("cart", Cart)

    async def show(cart: Handle, value: Annotated[Cart, Resolve(carts.read)]) -> Cart:
        return value

    with pytest.raises(ValueError, match=r"(?s)edits no cart.*Resolve\(state.edit\)"):
        carts.idempotent(show)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_store_urls_are_percent_decoded(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # URLs as pydantic's AnyUrl writes them: a space is %20, an @ in a password %40.
    from pydantic import AnyUrl

    from resolvent import open_store

    if kind == "sqlite":
        monkeypatch.chdir(tmp_path)
        nested = tmp_path / "a dir"
        nested.mkdir()
        urls = {
            str(AnyUrl("sqlite:///my cart.db")): tmp_path / "my cart.db",
            str(AnyUrl(f"sqlite:///{nested}/abs.db")): nested / "abs.db",
        }
        for url, path in urls.items():
            async with open_store(url) as store:
                kit = Kit(store)
                async with kit.container:
                    await kit.run(kit.open_cart)
            assert path.is_file(), (url, sorted(p.name for p in tmp_path.iterdir()))
        assert not (tmp_path / "my%20cart.db").exists()
        return
    valkey: str = request.getfixturevalue("valkey_url")  # skips without the redis extra
    from resolvent.redis import RedisStore

    user, password = f"u@{secrets_hex()}", "p@ss word:1"
    async with RedisStore.connect(valkey) as admin:
        await admin.client.acl_setuser(user, "on", f">{password}", "allcommands", "allkeys")
        try:
            netloc = valkey.split("//", 1)[1].split("/", 1)[0]
            url = str(AnyUrl(f"redis://{user}:{password}@{netloc}/0".replace("@", "%40", 2)))
            assert "%40" in url
            async with open_store(url) as store:
                kit = Kit(store)
                async with kit.container:
                    handle = await kit.run(kit.open_cart)
                    assert await kit.run(kit.add, cart=handle, item="fig") == {"fig": 1}
        finally:
            await admin.client.acl_deluser([user])


def secrets_hex() -> str:
    import secrets

    return secrets.token_hex(4)


# -- faults on the wire ----------------------------------------------------------------------
#
# Every store that talks to a server over TCP runs these with a fault-injecting proxy
# (tests/fault_proxy.py) between it and the server: added latency, a dropped connection, a
# reset in the middle of a script, a freeze. Each fault fails the call in flight with
# StoreUnavailable within the store's timeout, leaves nothing half-written and no lease
# behind, and the next call works. (SQLite's faults, a file that goes or a lock held too
# long, are in tests/test_state_sqlite_faults.py.)

WIRE_TIMEOUT = 0.5  # seconds: the store's timeout behind the proxy
HANG = 20.0  # seconds: only a hung call takes this long


@pytest.fixture(params=["redis"])
def wired_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    request.getfixturevalue("valkey_url")  # skips without the redis extra
    return kind


@contextlib.asynccontextmanager
async def wired(kind: str, request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, Any]]:
    """A fresh store of *kind* whose server is reached through a fault proxy."""
    from fault_proxy import fault_proxy
    from resolvent.redis import RedisStore

    assert kind == "redis"
    async with contextlib.AsyncExitStack() as stack:
        proxy = await stack.enter_async_context(fault_proxy(request.getfixturevalue("valkey_url")))
        # Opening takes a few round trips: on a busy machine more than one operation's
        # timeout, which the faults are measured against.
        opening = RedisStore.connect(
            proxy.url,
            prefix=f"wire-{secrets_hex()}",
            timeout=WIRE_TIMEOUT,
            connect_timeout=4 * WIRE_TIMEOUT,
        )
        yield await stack.enter_async_context(opening), proxy


async def unavailable(kit: Kit, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """Run *fn*, which must fail with StoreUnavailable, and not hang."""
    from resolvent import StoreUnavailable

    with anyio.fail_after(HANG), pytest.raises(StoreUnavailable) as caught:
        await kit.run(fn, **kwargs)
    return caught.value


# -- lease requests that outlive their calls --------------------------------------------
#
# A store that can hold a request back (SQLite: another process's write lock; Redis: a
# frozen server or network) may run a lease request after its caller gave up. Such a
# request must take nothing. (Memory and the toy store answer in the step that asks: a
# request of theirs cannot outlive its call.)

GIVE_UP = 0.25  # seconds: the deadline of the calls that give up while held back


class Hold:
    """A store made to hold requests back, and let them go."""

    def __init__(self, store: StateStore, kind: str, proxy: Any) -> None:
        import sqlite3

        self.store, self.kind, self.proxy = store, kind, proxy
        self.other: sqlite3.Connection | None = None
        self.held = False
        # How long after the callers' deadline the hold ends: on SQLite within one
        # attempt at the write lock (which its worker thread finishes after a cancel); on
        # Redis past the slack its requests' deadlines allow for reading the server clock.
        self.late = 0.01 if kind == "sqlite" else GIVE_UP

    def start(self) -> None:
        self.held = True
        if self.kind == "sqlite":
            import sqlite3

            # Another process's write transaction (here: another connection of this one).
            from resolvent import SqliteStore

            assert isinstance(self.store, SqliteStore)
            self.other = sqlite3.connect(self.store.path, isolation_level=None)
            self.other.execute("BEGIN IMMEDIATE")
        else:
            self.proxy.freeze()

    async def end(self) -> None:
        if not self.held:
            return
        self.held = False
        if self.other is not None:
            self.other.execute("ROLLBACK")
            self.other.close()
            self.other = None
        else:
            self.proxy.thaw()
            await self.proxy.drained()  # the server ran every request it held back


@pytest.fixture(params=["sqlite", "redis"])
def holding_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    if kind == "redis":
        request.getfixturevalue("valkey_url")  # skips without the redis extra
    return kind


@contextlib.asynccontextmanager
async def holding(kind: str, tmp_path: Path, request: pytest.FixtureRequest):
    """A fresh store of *kind* and its `Hold`."""
    if kind == "sqlite":
        async with open_test_store(kind, tmp_path, None) as store:
            yield store, Hold(store, kind, None)
    else:
        async with wired(kind, request) as (store, proxy):
            yield store, Hold(store, kind, proxy)


async def test_lease_requests_that_outlive_their_calls_take_nothing(
    holding_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Calls give up (their deadline passes) while the store holds their lease requests
    # back; when it lets them go, the store runs them, after their calls have gone. They
    # must take nothing: a lease nobody holds locks its cart for the lease time. Some come
    # from edits (which also release, in the background), some from a process that died
    # before it could release anything (only the request itself reaches the store).
    async with holding(holding_kind, tmp_path, request) as (store, hold):
        kit = Kit(store, lease=30.0, wait=5.0)
        async with kit.container:
            carts = [await kit.run(kit.open_cart) for _ in range(12)]
            await kit.run(kit.add, cart=carts[0], item="fig")  # a server at work: warm

            async def orphan(cart: str, lease: float, recalling: bool) -> None:
                key = StateKey("cart", _owner_of("ada"), cart)
                with anyio.move_on_after(GIVE_UP):
                    if recalling:  # an idempotent edit's: the load and the kept result
                        await store.load_recalling(key, 3600, "gone", lease, "request")  # type: ignore[attr-defined]
                    else:
                        await store.load(key, 3600, "gone", lease)

            async def edit(cart: str) -> None:
                with anyio.move_on_after(GIVE_UP):
                    await kit.run(kit.add, cart=cart, item="x")

            hold.start()
            try:
                with anyio.fail_after(HANG):
                    async with anyio.create_task_group() as group:
                        for cart in carts[:3]:
                            group.start_soon(edit, cart)
                        # Leases of 30 s and of 1 s; loads, and loads with a kept result.
                        for n, cart in enumerate(carts[3:]):
                            group.start_soon(orphan, cart, (30.0, 1.0)[n % 2], n >= 5)
                        await anyio.sleep(GIVE_UP + hold.late)  # past their deadlines
                        await hold.end()
            finally:
                await hold.end()
            # No key carries a lease: each cart takes an edit at once, not after 30 s.
            for cart in carts:
                key = StateKey("cart", _owner_of("ada"), cart)
                assert await store.load(key, 3600, "probe", 0) is not None  # not leased
            kit.carts.wait = 0.0
            for cart in carts:
                added = await kit.run(kit.add, cart=cart, item="pear")
                assert added == ({"fig": 1, "pear": 1} if cart == carts[0] else {"pear": 1})


async def test_a_frozen_store_fails_calls_within_its_timeout_and_recovers(
    wired_kind: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    async with wired(wired_kind, request) as (store, proxy):
        kit = Kit(store, lease=1.0, wait=5.0)
        async with kit.container:
            cart = await kit.run(kit.open_cart)
            proxy.freeze()
            error = await unavailable(kit, kit.add, cart=cart, item="fig")
            assert error.cause == f"no answer within timeout={WIRE_TIMEOUT:g} s"
            proxy.drop()  # and a new connection gets no answer either
            with caplog.at_level(logging.INFO):
                await unavailable(kit, kit.show, cart=cart)
            # The client library's report of it is at DEBUG: the call's error says it all.
            assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []
            proxy.thaw()
            # The add that failed wrote nothing, and edits work again.
            with anyio.fail_after(HANG):
                assert await kit.run(kit.add, cart=cart, item="pear") == {"pear": 1}


async def test_latency_under_the_timeout_only_slows_calls(
    wired_kind: str, request: pytest.FixtureRequest
) -> None:
    async with wired(wired_kind, request) as (store, proxy):
        kit = Kit(store)
        async with kit.container:
            proxy.latency = WIRE_TIMEOUT / 20
            cart = await kit.run(kit.open_cart)
            assert await kit.run(kit.add, cart=cart, item="fig") == {"fig": 1}
            assert await kit.run(kit.show, cart=cart) == Cart(items={"fig": 1})


async def test_a_dropped_connection_costs_at_most_the_call_in_flight(
    wired_kind: str, request: pytest.FixtureRequest
) -> None:
    async with wired(wired_kind, request) as (store, proxy):
        kit = Kit(store)
        async with kit.container:
            cart = await kit.run(kit.open_cart)
            before = proxy.connections
            proxy.drop()  # an idle connection: the client sees it go and opens another
            await anyio.sleep(0.05)
            assert await kit.run(kit.add, cart=cart, item="fig") == {"fig": 1}
            assert proxy.connections > before


@pytest.mark.parametrize("after", [False, True], ids=["before-the-server", "reply-lost"])
@pytest.mark.parametrize("script", ["load", "save"])
async def test_a_reset_in_the_middle_of_a_script_leaves_no_half_write(
    wired_kind: str, request: pytest.FixtureRequest, script: str, after: bool
) -> None:
    async with wired(wired_kind, request) as (store, proxy):
        kit = Kit(store, lease=1.0, wait=5.0)
        async with kit.container:
            cart = await kit.run(kit.open_cart)
            assert await kit.run(kit.add, cart=cart, item="fig") == {"fig": 1}
            sha = (store._load if script == "load" else store._save).sha
            proxy.reset_on(sha.encode(), after=after)
            await unavailable(kit, kit.add, cart=cart, item="fig")
            # Whole or not at all: the value reads back valid, with the add applied only
            # when the save reached the server.
            applied = script == "save" and after
            expected = {"fig": 2} if applied else {"fig": 1}
            with anyio.fail_after(HANG):
                assert await kit.run(kit.show, cart=cart) == Cart(items=expected)
                expected["fig"] += 1
                assert await kit.run(kit.add, cart=cart, item="fig") == expected
