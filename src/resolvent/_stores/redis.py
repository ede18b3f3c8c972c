"""`RedisStore`: state in Redis or Valkey, shared by every worker on every host.

Needs ``pip install "resolvent[redis]"`` (the `coredis` client, which runs on asyncio and
trio). Every operation is one Lua script, so it is atomic on the server; each value is a
hash under ``{prefix}:{kind}:{owner}:{handle}`` (the owner is a digest of the principal,
never the principal in clear), and its idle time and absolute deadline are enforced with
``PEXPIRE``: an expired value is removed by the server itself.

```python
async with RedisStore.connect("redis://127.0.0.1:6379/0") as store:
    ...
```
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import anyio
import anyio.lowlevel
import coredis
import coredis.exceptions
import coredis.retry

from .._vocabulary.errors import ResolventError, StateConflict, StoreUnavailable
from . import StateKey, redact

__all__ = ("RedisStore",)

# Times are milliseconds. ARGV[1] is "now" when a test drives the clock, else empty: the
# server's own TIME. A value's hash: d data, x deadline, e expires, l lease token, u lease end.
# A lease request (a load that leases, a renewal) carries the moment its caller gives up:
# a request the server runs later than that (held back by a frozen server or network) is
# answered -1 and changes nothing, since nobody is left to hold or release its lease.
_PRELUDE = """
local function now_ms()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function ms(n) return string.format('%.0f', n) end
local now = now_ms()
"""

_CREATE = (
    _PRELUDE
    + """
local deadline = now + tonumber(ARGV[4])
local expires = math.min(now + tonumber(ARGV[3]), deadline)
redis.call('HSET', KEYS[1], 'd', ARGV[2], 'x', ms(deadline), 'e', ms(expires), 'l', '', 'u', '0')
redis.call('PEXPIRE', KEYS[1], math.max(1, expires - now))
return 1
"""
)

_LOAD = (
    _PRELUDE
    + """
if tonumber(ARGV[4]) > 0 and ARGV[5] and now > tonumber(ARGV[5]) then return -1 end
local v = redis.call('HMGET', KEYS[1], 'd', 'x', 'e', 'l', 'u')
if not v[1] then return false end
if tonumber(v[3]) <= now then
  redis.call('DEL', KEYS[1])
  return false
end
if v[4] ~= '' and v[4] ~= ARGV[3] and tonumber(v[5]) > now then return 0 end
local until_ms = tonumber(v[5])
if tonumber(ARGV[4]) > 0 then until_ms = now + tonumber(ARGV[4]) end
-- not idle while leased: an edit outlasting idle_ttl keeps its value
local expires = math.min(math.max(now + tonumber(ARGV[2]), until_ms), tonumber(v[2]))
if tonumber(ARGV[4]) > 0 then
  redis.call('HSET', KEYS[1], 'e', ms(expires), 'l', ARGV[3], 'u', ms(until_ms))
else
  redis.call('HSET', KEYS[1], 'e', ms(expires))
end
redis.call('PEXPIRE', KEYS[1], math.max(1, expires - now))
if KEYS[2] then -- and the result a save kept for a request (recall, in one step)
  local r = redis.call('HMGET', KEYS[2], 'r', 'e')
  if r[1] and tonumber(r[2]) > now then return {v[1], r[1]} end
  return {v[1]}
end
return v[1]
"""
)

_RENEW = (
    _PRELUDE
    + """
if now > tonumber(ARGV[4]) then return -1 end
local v = redis.call('HMGET', KEYS[1], 'x', 'e', 'l')
if not v[1] or tonumber(v[2]) <= now or v[3] ~= ARGV[2] then return 0 end
local until_ms = now + tonumber(ARGV[3])
local expires = math.min(math.max(tonumber(v[2]), until_ms), tonumber(v[1]))
redis.call('HSET', KEYS[1], 'e', ms(expires), 'u', ms(until_ms))
redis.call('PEXPIRE', KEYS[1], math.max(1, expires - now))
return 1
"""
)

_CLOCK = _PRELUDE + "return now"  # the server's clock, as the scripts read it

_RECALL = (
    _PRELUDE
    + """
local v = redis.call('HMGET', KEYS[1], 'r', 'e')
if not v[1] or tonumber(v[2]) <= now then return false end
return v[1]
"""
)

_SAVE = (
    _PRELUDE
    + """
local v = redis.call('HMGET', KEYS[1], 'x', 'e', 'l')
if not v[1] or tonumber(v[2]) <= now or v[3] ~= ARGV[3] then return 0 end
if KEYS[2] then
  local ttl = tonumber(ARGV[7])
  redis.call('HSET', KEYS[2], 'r', ARGV[6], 'e', ms(now + ttl))
  redis.call('PEXPIRE', KEYS[2], math.max(1, ttl))
end
if ARGV[4] == 'd' then
  redis.call('DEL', KEYS[1])
  return 1
end
local expires = math.min(now + tonumber(ARGV[2]), tonumber(v[1]))
if ARGV[4] == 'w' then
  redis.call('HSET', KEYS[1], 'd', ARGV[5], 'e', ms(expires), 'l', '', 'u', '0')
else
  redis.call('HSET', KEYS[1], 'e', ms(expires), 'l', '', 'u', '0')
end
redis.call('PEXPIRE', KEYS[1], math.max(1, expires - now))
return 1
"""
)


# What a lost, refused or silent server raises (a Lua error is a RedisError too: the
# server refused the operation, and the store cannot go on without it).
_UNAVAILABLE = (OSError, TimeoutError, coredis.exceptions.RedisError)

_TIMEOUT = 3.0  # seconds: a store operation's bound, and a new connection's, by default
_RESYNC = 300.0  # seconds between readings of the server's clock, for lease deadlines
_SLACK = 0.05  # seconds a lease request's deadline allows for reading that clock

# Set while a store operation runs, and so in the context every connection it opens copies:
# coredis's own reports on those connections ("Connection attempt failed unexpectedly!",
# an ERROR with a traceback, for every call in an outage) move to DEBUG, since the call
# fails with StoreUnavailable and its integration logs that in one line.
_OURS: contextvars.ContextVar[bool] = contextvars.ContextVar("resolvent_redis", default=False)
_log = logging.getLogger("resolvent.redis")


class _Quieter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG or not _OURS.get():
            return True
        _log.debug("coredis: %s", record.getMessage(), exc_info=record.exc_info)
        return False


logging.getLogger("coredis").addFilter(_Quieter())


def _cause(error: BaseException) -> str:
    """*error* in one line, its group unwrapped, with the error at the bottom of its chain
    (the refused connection under the client's "unable to connect")."""
    exc = _lone(error)
    root = exc
    for _ in range(8):  # a bounded walk down the chain of causes
        if root.__cause__ is None:
            break
        root = root.__cause__
    shown = _line(exc)
    return shown if root is exc else f"{shown} ({_line(root)})"


def _lone(error: BaseException) -> BaseException:
    """The one error inside *error*'s (nested) groups, or *error* itself."""
    inner: tuple[BaseException, ...] = getattr(error, "exceptions", ())
    if issubclass(type(error), BaseExceptionGroup) and len(inner) == 1:
        return _lone(inner[0])
    return error


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _ms(seconds: float) -> int:
    """*seconds* as whole milliseconds; an infinite time as a century (a Lua number, and
    far past any deadline, where ``int(inf)`` would raise)."""
    return int(min(seconds, _CENTURY) * 1000)


_CENTURY = 100 * 365 * 86400.0


class RedisStore:
    """State in Redis or Valkey through a `coredis` client (asyncio and trio).

    Open it with `RedisStore.connect` (or ``open_store("redis://...")``), which enters
    the client and checks the server answers. Or wrap a client you entered yourself:
    ``RedisStore(client)``.

    Every operation takes at most *timeout* seconds and is tried once: a server that is
    down, drops the connection or stays silent fails the call with
    `resolvent.StoreUnavailable`, naming the server and the cause, and the next call
    tries again (a fresh connection when the old one is gone).

    Args:
        client: an entered ``coredis.Redis`` client (bytes responses).
        prefix: the first part of every key.
        clock: milliseconds-free seconds for tests that drive time; default: the
            server's own clock (``TIME``), so every host agrees.
        timeout: seconds one operation may take (3 by default).
        name: the server, as messages name it (default: the client's host and port).
    """

    def __init__(
        self,
        client: coredis.Redis[bytes],
        *,
        prefix: str = "resolvent",
        clock: Callable[[], float] | None = None,
        timeout: float = _TIMEOUT,
        name: str | None = None,
    ) -> None:
        if not 0 < timeout < math.inf:
            raise ValueError(
                f"RedisStore: timeout must be a positive, finite number of seconds, not "
                f"{timeout!r}\n  fix: pass timeout= the seconds one operation may take, above 0"
            )
        self.client = client
        self.prefix = prefix
        self.timeout = float(timeout)
        self.name = f"redis://{client.connection_pool.location!r}" if name is None else name
        self._clock = clock
        # The server's clock (TIME) minus time.monotonic(), read now and then: a lease
        # request's deadline is sent on the server's clock, which the script compares.
        self._offset: float | None = None
        self._synced = 0.0
        # Scripts run with EVALSHA (loaded on first use); typed loosely: replies vary.
        self._create: Any = client.register_script(_CREATE)
        self._load: Any = client.register_script(_LOAD)
        self._save: Any = client.register_script(_SAVE)
        self._renew: Any = client.register_script(_RENEW)
        self._recall: Any = client.register_script(_RECALL)
        self._time: Any = client.register_script(_CLOCK)

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        url: str,
        *,
        prefix: str = "resolvent",
        connect_timeout: float = _TIMEOUT,
        timeout: float = _TIMEOUT,  # noqa: ASYNC109 - the store's bound on each operation
        clock: Callable[[], float] | None = None,
    ) -> AsyncGenerator[RedisStore]:
        """Connect to the server at *url* (``redis://HOST:PORT[/DB]``), check that it
        answers, and yield a store; the client closes on exit.

        Args:
            url: the server's URL; ``valkey://`` and ``valkeys://`` are accepted too.
            prefix: the first part of every key.
            connect_timeout: seconds to wait for the server at start, and for each new
                connection later.
            timeout: seconds one operation may take (see `RedisStore`).
            clock: see `RedisStore`.

        Raises:
            StoreUnavailable: the server cannot be reached within *connect_timeout*
                seconds, or refuses (the message names the URL, without its password,
                and the cause).
            ResolventError: *url* is not a Redis URL.
        """
        scheme, sep, rest = url.partition("://")
        if scheme in ("valkey", "valkeys"):  # the same protocol under Valkey's own name
            url = ("rediss" if scheme == "valkeys" else "redis") + sep + rest
        shown = redact(url)
        try:
            # One try per operation, each bounded: coredis's default retries a silent
            # server three times, which turns a 3 s bound into a call hung for 10 s.
            client: coredis.Redis[bytes] = coredis.Redis.from_url(
                url,
                decode_components=True,  # a password "p@ss" is "p%40ss" in a URL
                connect_timeout=connect_timeout,
                stream_timeout=timeout,
                pool_timeout=timeout,
                retry_policy=coredis.retry.NoRetryPolicy(),
            )
        except ValueError as exc:
            raise ResolventError(
                f"cannot use {shown!r} as a Redis URL: {exc}\n  fix: write it as "
                "redis://host:6379/0 (rediss:// for TLS)"
            ) from exc
        failure: BaseException | None = None
        opened = False
        ours = _OURS.set(True)  # the first connection is the store's too
        try:
            async with client:
                try:
                    with anyio.fail_after(connect_timeout):
                        await client.ping()
                        store = cls(client, prefix=prefix, clock=clock, timeout=timeout, name=shown)
                        scripts = (
                            store._create,
                            store._load,
                            store._save,
                            store._renew,
                            store._recall,
                        )
                        for script in scripts:
                            await client.script_load(script.script)  # no NOSCRIPT round trip
                except _UNAVAILABLE as exc:
                    # Raised here, it would leave coredis's task group wrapped in an
                    # ExceptionGroup: it is raised once the client is closed instead.
                    failure = exc
                else:
                    opened = True
                    _OURS.reset(ours)
                    yield store
        except BaseExceptionGroup as group:
            # coredis's task group wraps what its block raised: a lone error unwrapped.
            if len(group.exceptions) != 1:
                raise
            lone = group.exceptions[0]
            if opened or not isinstance(lone, _UNAVAILABLE):
                raise lone from None
            failure = failure or lone
        except _UNAVAILABLE as exc:
            if opened:  # the error of the code that used the store: not ours to rename
                raise
            failure = failure or exc
        finally:
            if not opened:
                _OURS.reset(ours)
        if failure is not None:
            raise StoreUnavailable(
                shown,
                _cause(failure)
                if not isinstance(failure, TimeoutError)
                else f"no answer within connect_timeout={connect_timeout:g} s",
            ) from failure

    def key(self, key: StateKey) -> str:
        """The Redis key of *key*: ``{prefix}:{kind}:{owner}:{handle}``."""
        return f"{self.prefix}:{key.kind}:{key.owner}:{key.handle}"

    def _now(self) -> str:
        return "" if self._clock is None else str(int(self._clock() * 1000))

    async def _sync(self) -> None:
        """Read the server's clock, for the deadlines of lease requests."""
        sent = time.monotonic()
        server: Any = await self._time(keys=[], args=[""])
        answered = time.monotonic()
        self._offset = int(server) / 1000 - (sent + answered) / 2
        self._synced = answered

    async def _give_up(self) -> str:
        """When the caller of the operation under way stops waiting for its answer (the
        store's timeout, or the call's own deadline if sooner), on the script's clock."""
        left = anyio.current_effective_deadline() - anyio.current_time()
        if left == -math.inf:
            # The caller's scope is cancelled (its deadline passed while this task waited
            # for its turn), and no await has told it yet: told now, before anything is
            # asked of the server on its behalf.
            await anyio.lowlevel.checkpoint_if_cancelled()
            left = 0.0
        if self._clock is not None:
            return str(int((self._clock() + left) * 1000))
        now = time.monotonic()
        if self._offset is None or now - self._synced > _RESYNC:
            await self._sync()
            now = time.monotonic()
        assert self._offset is not None  # set by _sync
        return str(int((now + self._offset + left + _SLACK) * 1000))

    async def _run(
        self, script: Any, keys: list[str], args: list[Any], *, leasing: bool = False
    ) -> Any:
        """One script on *keys*, within the store's timeout; a lost store as one error.
        *leasing*: the script takes the moment its caller gives up as one more argument
        (and answers -1 if it runs later, changing nothing)."""
        ours = _OURS.set(True)
        try:
            with anyio.fail_after(self.timeout):
                if not leasing:
                    return await script(keys=keys, args=args)
                answer = await script(keys=keys, args=[*args, await self._give_up()])
                if answer == -1:  # seen late by a caller still here: the clock moved
                    self._offset = None
                    answer = await script(keys=keys, args=[*args, await self._give_up()])
                if answer == -1:
                    raise StoreUnavailable(
                        self.name,
                        "the server's clock (TIME) runs ahead of this host's by more than "
                        "the operation's timeout",
                        "keep the clocks of the server and this host in sync (NTP)",
                    )
                return answer
        except _UNAVAILABLE as exc:
            cause = (
                f"no answer within timeout={self.timeout:g} s"
                if isinstance(exc, TimeoutError)
                else _cause(exc)
            )
            raise StoreUnavailable(self.name, cause) from exc
        finally:
            _OURS.reset(ours)

    async def create(self, key: StateKey, data: bytes, idle: float, lifetime: float) -> None:
        """Store a new value (see `StateStore.create`)."""
        await self._run(
            self._create, [self.key(key)], [self._now(), data, _ms(idle), _ms(lifetime)]
        )

    async def load(self, key: StateKey, idle: float, token: str, lease: float) -> bytes | None:
        """The value, optionally leased (see `StateStore.load`)."""
        found: Any = await self._run(
            self._load,
            [self.key(key)],
            [self._now(), _ms(idle), token, _ms(lease)],
            leasing=lease > 0,
        )
        if found == 0:
            raise StateConflict(f"{key.kind} {key.handle!r} is leased by another call")
        return found  # type: ignore[no-any-return]

    async def load_recalling(
        self, key: StateKey, idle: float, token: str, lease: float, name: str
    ) -> tuple[bytes | None, bytes | None]:
        """`load`, and the result a save kept under *name* (see `recall`), in one script."""
        found: Any = await self._run(
            self._load,
            [self.key(key), self.receipt_key(key, name)],
            [self._now(), _ms(idle), token, _ms(lease)],
            leasing=lease > 0,
        )
        if found == 0:
            raise StateConflict(f"{key.kind} {key.handle!r} is leased by another call")
        if found is None:
            return None, None
        return found[0], (found[1] if len(found) > 1 else None)

    async def renew(self, key: StateKey, token: str, lease: float) -> bool:
        """Extend the lease while *token* holds it (see `StateStore.renew`)."""
        args = [self._now(), token, _ms(lease)]
        done: Any = await self._run(self._renew, [self.key(key)], args, leasing=True)
        return bool(done == 1)

    async def save(
        self,
        key: StateKey,
        idle: float,
        token: str,
        data: bytes | None,
        delete: bool,
        remember: tuple[str, bytes, float] | None = None,
    ) -> bool:
        """End the lease, writing or deleting (see `StateStore.save`)."""
        mode = "d" if delete else ("k" if data is None else "w")
        keys = [self.key(key)]
        args: list[str | bytes | int] = [
            self._now(),
            _ms(idle),
            token,
            mode,
            b"" if data is None else data,
        ]
        if remember is not None:
            name, result, ttl = remember
            keys.append(self.receipt_key(key, name))
            args += [result, _ms(ttl)]
        done: Any = await self._run(self._save, keys, args)
        return bool(done == 1)

    def receipt_key(self, key: StateKey, name: str) -> str:
        """The Redis key of the result a save kept under *name* for *key*."""
        return f"{self.key(key)}:receipt:{name}"

    async def recall(self, key: StateKey, name: str) -> bytes | None:
        """A result a save kept (see `StateStore.recall`)."""
        found: Any = await self._run(self._recall, [self.receipt_key(key, name)], [self._now()])
        return found  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Nothing to do: the client closes with `connect`'s block (or its owner's)."""
