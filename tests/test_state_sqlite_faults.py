"""State on a real SQLite file under faults: a file that cannot be opened, a directory
removed under a running server, a write lock another connection holds too long.

Each fault fails the call with `StoreUnavailable`, naming the file and the cause (never a
raw ``sqlite3`` error); an MCP client reads that the store is unavailable and the server
logs one line; once the file is back, the next call works with no restart. On asyncio and
trio.
"""

import logging
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest

from cart_shop import HANG, Shop
from resolvent import (
    SqliteStore,
    StateKey,
    StateNotFound,
    StoreUnavailable,
    open_store,
)
from snapshot import assert_snapshot


async def test_a_file_that_cannot_be_opened_is_store_unavailable(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "carts.db"
    with anyio.fail_after(HANG), pytest.raises(StoreUnavailable) as caught:
        await SqliteStore.open(str(missing))
    assert caught.value.store == f"sqlite:///{missing}"
    assert caught.value.cause == "OperationalError: unable to open database file"
    assert str(caught.value).startswith(
        f"the state store is unavailable: cannot reach sqlite:///{missing}: OperationalError"
    )
    assert "directory exist" in str(caught.value)  # the fix says what to check

    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database, " * 512)
    with anyio.fail_after(HANG), pytest.raises(StoreUnavailable) as caught:
        async with open_store(f"sqlite:///{garbage}"):
            pytest.fail("a file that is not a database does not open")
    assert caught.value.cause == "DatabaseError: file is not a database"


async def test_a_removed_directory_fails_calls_and_the_store_serves_once_it_is_back(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    store = await SqliteStore.open(str(folder / "carts.db"))
    try:
        shop = Shop(store, wait=1.0)
        async with shop.container:
            cart = await shop.run(shop.open_cart)
            assert await shop.run(shop.add, cart=cart, item="fig") == {"fig": 1}
            folder.rename(tmp_path / "away")  # the file and its directory, gone from here
            error = await shop.fails(shop.add, cart=cart, item="fig")
            gone = "OperationalError: the database file is gone (No such file or directory)"
            assert error.cause == gone
            # Not one write goes to the file that moved away: every call says so.
            for fn, kwargs in (
                (shop.add, {"cart": cart, "item": "fig"}),
                (shop.show, {"cart": cart}),
                (shop.open_cart, {}),
            ):
                error = await shop.fails(fn, **kwargs)
                assert error.store == store.name
                assert "OperationalError" in error.cause
            (tmp_path / "away").rename(folder)
            # Back: the next call works on the same file, with only the acknowledged add.
            assert await shop.run(shop.add, cart=cart, item="fig") == {"fig": 2}

            # Removed for good and made again, empty: new carts work on the new file.
            (folder / "carts.db").unlink()
            for extra in folder.iterdir():
                extra.unlink()
            folder.rmdir()
            await shop.fails(shop.add, cart=cart, item="fig")
            folder.mkdir()
            with pytest.raises(StateNotFound):
                await shop.run(shop.show, cart=cart)
            fresh = await shop.run(shop.open_cart)
            assert await shop.run(shop.add, cart=fresh, item="pear") == {"pear": 1}
    finally:
        await store.aclose()


async def test_a_file_replaced_under_a_running_server_is_noticed_before_a_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "carts.db"
    store = await SqliteStore.open(str(path))
    try:
        shop = Shop(store, wait=1.0)
        async with shop.container:
            cart = await shop.run(shop.open_cart)
            assert await shop.run(shop.add, cart=cart, item="fig") == {"fig": 1}
            # Another database moved in at its path (a backup restored): a new file.
            backup = tmp_path / "backup.db"
            sqlite3.connect(backup).close()
            for extra in ("-wal", "-shm"):
                Path(f"{path}{extra}").unlink(missing_ok=True)
            backup.replace(path)
            error = await shop.fails(shop.add, cart=cart, item="fig")
            assert error.cause == (
                "OperationalError: the database file was removed or replaced since this "
                "connection opened it"
            )
            # The next call opens the new file: the old cart is not there, new ones work.
            with pytest.raises(StateNotFound):
                await shop.run(shop.show, cart=cart)
            fresh = await shop.run(shop.open_cart)
            assert await shop.run(shop.add, cart=fresh, item="pear") == {"pear": 1}
    finally:
        await store.aclose()


async def test_an_in_memory_database_is_refused_and_a_uri_opens(tmp_path: Path) -> None:
    # In memory, each of the store's connections would have a database of its own.
    for path in ("", ":memory:"):
        with pytest.raises(ValueError) as caught:
            await SqliteStore.open(path)
        assert_snapshot("sqlite_in_memory", str(caught.value).replace(repr(path), "PATH"))
    # A file: URI (where SQLite reads URIs) opens what it names: a file, or a database in
    # memory that the store's connections share.
    for uri in (f"file:{tmp_path / 'uri.db'}", f"file:{tmp_path / 'm'}?mode=memory&cache=shared"):
        store = await SqliteStore.open(uri)
        try:
            key = StateKey("cart", "owner", "u" * 32)
            await store.create(key, b"1\n{}", 10, 100)
            assert await store.load(key, 10, "t", 0) == b"1\n{}"
        finally:
            await store.aclose()


async def test_a_file_whose_tables_are_not_the_stores_is_store_unavailable(
    tmp_path: Path,
) -> None:
    # A database of something else (or of another version) under the store's table name:
    # the store says which column it lacks, at open or at the first call that needs it.
    for lacking, columns in (
        ("expires", "kind, owner, handle, data"),
        ("lease_until", "kind, owner, handle, data, expires, deadline, lease"),
    ):
        path = tmp_path / f"no-{lacking}.db"
        with sqlite3.connect(path) as other:
            other.execute(f"CREATE TABLE resolvent_state ({columns})")
        other.close()
        with anyio.fail_after(HANG), pytest.raises(StoreUnavailable) as caught:
            store = await SqliteStore.open(str(path))
            try:
                shop = Shop(store, wait=1.0)
                async with shop.container:
                    cart = await shop.run(shop.open_cart)
                    await shop.run(shop.show, cart=cart)
            finally:
                await store.aclose()
        assert caught.value.cause == f"OperationalError: no such column: {lacking}"


async def test_a_process_that_never_closes_its_store_still_exits(tmp_path: Path) -> None:
    # The sweeper is a daemon thread, named for a thread dump: it keeps no process alive.
    store = await SqliteStore.open(str(tmp_path / "open.db"))
    try:
        sweepers = [t for t in threading.enumerate() if t.name == "resolvent-sqlite-sweep"]
        assert sweepers and all(t.daemon for t in sweepers)
    finally:
        await store.aclose()
    script = (
        "import threading, anyio\n"
        "from resolvent import SqliteStore\n"
        f"anyio.run(SqliteStore.open, {str(tmp_path / 'left.db')!r})\n"
        "print([t.name for t in threading.enumerate() if t.daemon])\n"
    )
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=HANG
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['resolvent-sqlite-sweep']"


async def test_opening_waits_for_another_connections_write_lock(tmp_path: Path) -> None:
    # Another process writing to the file as the store opens it (the switch to WAL fails
    # at once while it holds the lock): the store waits for it, within busy_timeout.
    path = tmp_path / "shared.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE elsewhere (x)")
    other.execute("BEGIN IMMEDIATE")
    done = threading.Timer(0.2, other.execute, ("ROLLBACK",))
    done.start()
    try:
        with anyio.fail_after(HANG):
            store = await SqliteStore.open(str(path), busy_timeout=10)
        await store.aclose()
    finally:
        done.join()
        other.close()


async def test_a_write_lock_held_past_busy_timeout_is_store_unavailable(tmp_path: Path) -> None:
    store = await SqliteStore.open(str(tmp_path / "carts.db"), busy_timeout=0.2)
    try:
        shop = Shop(store, wait=1.0)
        async with shop.container:
            cart = await shop.run(shop.open_cart)
            other = sqlite3.connect(store.path, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")  # another process's long write transaction
            try:
                error = await shop.fails(shop.add, cart=cart, item="fig")
            finally:
                other.execute("ROLLBACK")
                other.close()
            assert error.store == f"sqlite:///{store.path}"
            assert error.cause.startswith("OperationalError: database is locked")
            assert "busy_timeout=0.2 s" in error.cause
            assert_snapshot("sqlite_busy_unavailable", str(error).replace(store.path, "PATH"))
            assert await shop.run(shop.add, cart=cart, item="fig") == {"fig": 1}
    finally:
        await store.aclose()


async def test_an_mcp_client_reads_that_the_sqlite_store_is_unavailable_and_the_log_has_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("mcp", reason="an MCP client needs the mcp extra")
    from mcp.server.mcpserver import MCPServer

    from mcp_helpers import client
    from resolvent.mcp import inject

    folder = tmp_path / "data"
    folder.mkdir()
    store = await SqliteStore.open(str(folder / "carts.db"))
    try:
        shop = Shop(store, wait=1.0)
        server = MCPServer("shop", lifespan=shop.container.lifespan)
        server.tool()(inject(shop.container)(shop.open_cart))
        server.tool()(inject(shop.container)(shop.add))
        async with client(server, "legacy") as c:
            opened = (await c.call_tool("open_cart", {})).structured_content
            assert opened is not None
            folder.rename(tmp_path / "away")
            caplog.clear()
            with caplog.at_level(logging.INFO), anyio.fail_after(HANG):
                failed = await c.call_tool("add", {"cart": opened["result"], "item": "fig"})
            assert failed.is_error
            assert failed.content[0].text.endswith(  # type: ignore[union-attr]
                ": the state store is unavailable; try again in a moment"
            )
            loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert [r.name for r in loud] == ["resolvent"], [r.getMessage() for r in loud]
            assert f"cannot reach {store.name}: " in loud[0].getMessage()
            assert loud[0].exc_info is None
            (tmp_path / "away").rename(folder)
            added = await c.call_tool("add", {"cart": opened["result"], "item": "fig"})
            assert not added.is_error
            assert added.content[0].text == '{\n  "fig": 1\n}'  # type: ignore[union-attr]
    finally:
        await store.aclose()


async def test_the_first_call_after_the_directory_is_back_works_whatever_was_pooled(
    tmp_path: Path,
) -> None:
    # Two connections in the pool (one operation ran while another held a connection),
    # then the directory goes away: the call that finds out must not leave the second
    # connection, with the lost file open, for the first call after the directory is back.
    folder = tmp_path / "data"
    folder.mkdir()
    store = await SqliteStore.open(str(folder / "carts.db"))
    try:
        store._file.using(lambda conn: store._file.using(lambda inner: None))
        shop = Shop(store, wait=1.0)
        async with shop.container:
            cart = await shop.run(shop.open_cart)
            for extra in folder.iterdir():
                extra.unlink()
            folder.rmdir()
            await shop.fails(shop.show, cart=cart)
            folder.mkdir()
            with pytest.raises(StateNotFound):  # a new, empty file: the cart is not there
                await shop.run(shop.show, cart=cart)
    finally:
        await store.aclose()
