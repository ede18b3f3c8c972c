"""What `RedisStore` says when it fails, and what it does with the server's clock.

Against a real Valkey, behind the fault proxy of tests/fault_proxy.py where a fault is
needed, on asyncio and trio: the server a failure names (also for a client of your own),
the cause as one line down to its root, coredis's own log lines during an outage, and a
lease request the server judges against a reading of its clock that went stale.
"""

import contextlib
import logging
import re
import secrets
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from fault_proxy import FaultProxy, fault_proxy
from resolvent import StateKey, StoreUnavailable

pytest.importorskip("coredis", reason="the Redis store needs the redis extra (coredis)")

pytestmark = pytest.mark.network

TIMEOUT = 0.5  # the store's bound on one operation
KEY = StateKey("cart", "owner", "h" * 32)
VALUE = b"1\n{}"


def prefix() -> str:
    return f"redis-store-{secrets.token_hex(4)}"


async def lost(store: Any) -> StoreUnavailable:
    """The error of a read made while the server drops and refuses connections."""
    with anyio.fail_after(10), pytest.raises(StoreUnavailable) as caught:
        await store.load(KEY, 60, "reader", 0)
    return caught.value


@contextlib.asynccontextmanager
async def proxied(valkey_url: str) -> AsyncIterator[tuple[FaultProxy, Any]]:
    """A store connected to the server through the fault proxy, and the proxy."""
    from resolvent.redis import RedisStore

    async with (
        fault_proxy(valkey_url) as proxy,
        RedisStore.connect(proxy.url, prefix=prefix(), timeout=TIMEOUT) as store,
    ):
        yield proxy, store


# RedisStore: "a server that is down, drops the connection or stays silent fails the call
# with StoreUnavailable, naming the server and the cause"; `name`: "the server, as messages
# name it (default: the client's host and port)".
async def test_a_failure_names_the_server_as_given_or_by_its_address(valkey_url: str) -> None:
    import coredis

    from resolvent.redis import RedisStore

    async with fault_proxy(valkey_url) as proxy:
        address = proxy.url.removeprefix("redis://")
        async with RedisStore.connect(f"{proxy.url}/0", prefix=prefix(), timeout=TIMEOUT) as by_url:
            await by_url.create(KEY, VALUE, 60, 60)
            proxy.refuse()
            proxy.drop()
            assert (await lost(by_url)).store == f"redis://{address}/0"
            proxy.refuse(False)
        client: coredis.Redis[bytes] = coredis.Redis.from_url(proxy.url)
        async with client:
            own = RedisStore(client, prefix=prefix(), timeout=TIMEOUT)
            await own.create(KEY, VALUE, 60, 60)
            proxy.refuse()
            proxy.drop()
            error = await lost(own)
            assert error.store == f"redis://{address}"
            assert str(error).startswith(
                f"the state store is unavailable: cannot reach {error.store}: "
            )
            named = RedisStore(client, prefix=prefix(), timeout=TIMEOUT, name="the cart server")
            assert (await lost(named)).store == "the cart server"


# "timeout: seconds one operation may take": a bound of zero seconds or less is refused.
@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf")])
async def test_a_timeout_that_is_not_positive_is_refused(valkey_url: str, timeout: float) -> None:
    import coredis

    from resolvent.redis import RedisStore

    client: coredis.Redis[bytes] = coredis.Redis.from_url(valkey_url)
    with pytest.raises(ValueError) as caught:
        RedisStore(client, timeout=timeout)
    assert str(caught.value) == (
        f"RedisStore: timeout must be a positive, finite number of seconds, not {timeout!r}\n"
        "  fix: pass timeout= the seconds one operation may take, above 0"
    )


# A URL the client cannot read is refused when the store is made, with the form it takes.
async def test_a_url_that_is_not_a_redis_url_says_the_form_it_takes() -> None:
    from resolvent import ResolventError
    from resolvent.redis import RedisStore

    with pytest.raises(ResolventError) as caught:
        async with RedisStore.connect("redis://127.0.0.1:not-a-port/0"):
            pass
    text = str(caught.value)
    assert text.startswith("cannot use 'redis://127.0.0.1:not-a-port/0' as a Redis URL: ")
    assert text.endswith("\n  fix: write it as redis://host:6379/0 (rediss:// for TLS)")


# StoreUnavailable.cause: "what went wrong, as the client library ... said it": the error
# in one line, and the error at the bottom of its chain in parentheses when there is one.
async def test_the_cause_is_the_error_and_its_root_in_one_line(valkey_url: str) -> None:

    async with proxied(valkey_url) as (proxy, store):
        # A key of another type under the store's prefix (another program wrote it):
        # the server refuses the script, an error with no cause below it.
        await store.client.set(store.key(KEY), "not a hash")
        with pytest.raises(StoreUnavailable) as refused:
            await store.load(KEY, 60, "reader", 0)
        assert re.fullmatch(r"\w+Error: [^()]*wrong kind of value[^()]*", refused.value.cause)
        await store.client.delete([store.key(KEY)])

        await store.create(KEY, VALUE, 60, 60)
        proxy.refuse()
        proxy.drop()
        cause = (await lost(store)).cause
        found = re.fullmatch(r"ConnectionError: [^()]+ \((\w+)(: [^()]+)?\)", cause)
        assert found is not None, cause
        assert found[1] not in ("NoneType", "ConnectionError"), cause


# The store runs every operation with coredis's reports of its connections at DEBUG
# (the call fails with StoreUnavailable, which its integration logs in one line); what
# coredis logs outside the store's operations stays as coredis logged it.
async def test_coredis_reports_move_to_debug_only_during_the_stores_operations(
    valkey_url: str, caplog: pytest.LogCaptureFixture
) -> None:

    caplog.set_level(logging.DEBUG)
    async with proxied(valkey_url) as (proxy, store):
        await store.create(KEY, VALUE, 60, 60)
        proxy.refuse()
        proxy.drop()
        caplog.clear()
        await lost(store)
        assert [r for r in caplog.records if r.name.startswith("coredis")] == []
        moved = [r for r in caplog.records if r.name == "resolvent.redis"]
        assert moved, "coredis reported nothing about the lost connection"
        for record in moved:
            assert record.levelno == logging.DEBUG
            assert record.getMessage().startswith("coredis: Connection ")
            assert record.exc_info is not None

    caplog.clear()
    logging.getLogger("coredis").warning("a report of coredis's own")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("coredis", logging.WARNING, "a report of coredis's own")
    ]


async def other_holds_it(store: Any) -> bool:
    try:
        await store.load(KEY, 60, "other", 30)
    except Exception as exc:  # StateConflict: the lease is held
        return type(exc).__name__ == "StateConflict"
    return False


# A lease request carries the moment its caller gives up, on the server's clock as the
# store last read it; a server that sees it late while the caller still waits (its clock
# stepped forward since) is read again and asked again.
async def test_a_lease_request_judged_late_on_a_stale_clock_is_asked_again(
    valkey_url: str,
) -> None:
    from resolvent.redis import RedisStore

    async with RedisStore.connect(valkey_url, prefix=prefix(), timeout=TIMEOUT) as store:
        await store.create(KEY, VALUE, 60, 60)
        assert await store.load(KEY, 60, "reader", 0) == VALUE
        await store.renew(KEY, "nobody", 30)  # a lease request: the clock is read
        store._offset -= 60  # the server's clock stepped a minute forward since
        assert await store.load(KEY, 60, "editor", 30) == VALUE
        assert await other_holds_it(store)
        assert await store.renew(KEY, "editor", 30)


# A call whose deadline passed while its task waited for its turn asks for no lease: its
# cancellation reaches it before the request leaves, and the value stays free.
async def test_a_lease_request_of_a_caller_that_gave_up_is_never_sent(valkey_url: str) -> None:
    from resolvent.redis import RedisStore

    async with RedisStore.connect(valkey_url, prefix=prefix(), timeout=TIMEOUT) as store:
        await store.create(KEY, VALUE, 60, 60)
        await store.renew(KEY, "nobody", 30)  # the server's clock is read
        with anyio.CancelScope() as scope:
            scope.cancel()  # as a deadline that passed, not yet told to the task
            await store.load(KEY, 60, "gone", 30)
        assert scope.cancelled_caught
        assert await store.load(KEY, 60, "editor", 30) == VALUE  # free: nothing was taken


@pytest.fixture
async def stale_store(valkey_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """A store whose every reading of the server's clock is a minute behind it."""
    from resolvent.redis import RedisStore

    async with RedisStore.connect(valkey_url, prefix=prefix(), timeout=TIMEOUT) as store:
        read = store._sync

        async def behind() -> None:
            await read()
            store._offset -= 60

        monkeypatch.setattr(store, "_sync", behind)
        yield store


# ... and one that sees it late again fails the call, saying why and what to do.
async def test_a_server_whose_clock_runs_ahead_fails_lease_requests_saying_so(
    stale_store: Any,
) -> None:
    await stale_store.create(KEY, VALUE, 60, 60)
    assert await stale_store.load(KEY, 60, "reader", 0) == VALUE  # a read asks no lease
    with pytest.raises(StoreUnavailable) as caught:
        await stale_store.load(KEY, 60, "editor", 30)
    assert str(caught.value) == (
        f"the state store is unavailable: cannot reach {stale_store.name}: the server's clock "
        "(TIME) runs ahead of this host's by more than the operation's timeout.\n"
        "  fix: keep the clocks of the server and this host in sync (NTP)"
    )
    assert caught.value.fix == "keep the clocks of the server and this host in sync (NTP)"
    assert await stale_store.load(KEY, 60, "reader", 0) == VALUE  # it took no lease
