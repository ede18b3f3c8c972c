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
from collections.abc import AsyncGenerator, Callable
from typing import Any

import anyio
import coredis
import coredis.exceptions

from ._errors import ResolventError, StateConflict
from ._stores import StateKey, redact

__all__ = ("RedisStore",)

# Times are milliseconds. ARGV[1] is "now" when a test drives the clock, else empty: the
# server's own TIME. A value's hash: d data, x deadline, e expires, l lease token, u lease end.
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
return v[1]
"""
)

_RENEW = (
    _PRELUDE
    + """
local v = redis.call('HMGET', KEYS[1], 'x', 'e', 'l')
if not v[1] or tonumber(v[2]) <= now or v[3] ~= ARGV[2] then return 0 end
local until_ms = now + tonumber(ARGV[3])
local expires = math.min(math.max(tonumber(v[2]), until_ms), tonumber(v[1]))
redis.call('HSET', KEYS[1], 'e', ms(expires), 'u', ms(until_ms))
redis.call('PEXPIRE', KEYS[1], math.max(1, expires - now))
return 1
"""
)

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


class RedisStore:
    """State in Redis or Valkey through a `coredis` client (asyncio and trio).

    Open it with `RedisStore.connect` (or ``open_store("redis://...")``), which enters
    the client and checks the server answers. Or wrap a client you entered yourself:
    ``RedisStore(client)``.

    Args:
        client: an entered ``coredis.Redis`` client (bytes responses).
        prefix: the first part of every key.
        clock: milliseconds-free seconds for tests that drive time; default: the
            server's own clock (``TIME``), so every host agrees.
    """

    def __init__(
        self,
        client: coredis.Redis[bytes],
        *,
        prefix: str = "resolvent",
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self._clock = clock
        # Scripts run with EVALSHA (loaded on first use); typed loosely: replies vary.
        self._create: Any = client.register_script(_CREATE)
        self._load: Any = client.register_script(_LOAD)
        self._save: Any = client.register_script(_SAVE)
        self._renew: Any = client.register_script(_RENEW)
        self._recall: Any = client.register_script(_RECALL)

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        url: str,
        *,
        prefix: str = "resolvent",
        connect_timeout: float = 10.0,
        clock: Callable[[], float] | None = None,
    ) -> AsyncGenerator[RedisStore]:
        """Connect to the server at *url* (``redis://HOST:PORT[/DB]``), check that it
        answers, and yield a store; the client closes on exit.

        Raises:
            ResolventError: the server cannot be reached within *connect_timeout* seconds, or
                refuses (the message names the URL, without its password, and the cause).
        """
        scheme, sep, rest = url.partition("://")
        if scheme in ("valkey", "valkeys"):  # the same protocol under Valkey's own name
            url = ("rediss" if scheme == "valkeys" else "redis") + sep + rest
        try:
            client: coredis.Redis[bytes] = coredis.Redis.from_url(
                url, connect_timeout=connect_timeout, stream_timeout=connect_timeout
            )
        except ValueError as exc:
            raise ResolventError(f"cannot use {redact(url)!r} as a Redis URL: {exc}") from exc
        unreachable: ResolventError | None = None
        try:
            async with client:
                try:
                    with anyio.fail_after(connect_timeout):
                        await client.ping()
                except (OSError, TimeoutError, coredis.exceptions.RedisError) as exc:
                    unreachable = ResolventError(
                        f"cannot reach {redact(url)}: {type(exc).__name__}: "
                        f"{exc or 'timed out'}.\n"
                        "  fix: start the server, or pass the URL of a running one"
                    )
                    raise unreachable from exc
                store = cls(client, prefix=prefix, clock=clock)
                for script in (
                    store._create,
                    store._load,
                    store._save,
                    store._renew,
                    store._recall,
                ):
                    await client.script_load(script.script)  # no NOSCRIPT round trip
                yield store
        except BaseExceptionGroup as group:
            # The client's own task group wraps what leaves its block: the caller gets
            # the one error that says what failed, not a group around it.
            if unreachable is None or group.subgroup(lambda e: e is unreachable) is None:
                raise
            raise unreachable from unreachable.__cause__

    def key(self, key: StateKey) -> str:
        """The Redis key of *key*: ``{prefix}:{kind}:{owner}:{handle}``."""
        return f"{self.prefix}:{key.kind}:{key.owner}:{key.handle}"

    def _now(self) -> str:
        return "" if self._clock is None else str(int(self._clock() * 1000))

    async def create(self, key: StateKey, data: bytes, idle: float, lifetime: float) -> None:
        """Store a new value (see `StateStore.create`)."""
        await self._create(
            keys=[self.key(key)],
            args=[self._now(), data, int(idle * 1000), int(lifetime * 1000)],
        )

    async def load(self, key: StateKey, idle: float, token: str, lease: float) -> bytes | None:
        """The value, optionally leased (see `StateStore.load`)."""
        found: Any = await self._load(
            keys=[self.key(key)],
            args=[self._now(), int(idle * 1000), token, int(lease * 1000)],
        )
        if found == 0:
            raise StateConflict(f"{key.kind} {key.handle!r} is leased by another call")
        return found  # type: ignore[no-any-return]

    async def renew(self, key: StateKey, token: str, lease: float) -> bool:
        """Extend the lease while *token* holds it (see `StateStore.renew`)."""
        done: Any = await self._renew(
            keys=[self.key(key)], args=[self._now(), token, int(lease * 1000)]
        )
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
            int(idle * 1000),
            token,
            mode,
            b"" if data is None else data,
        ]
        if remember is not None:
            name, result, ttl = remember
            keys.append(self.receipt_key(key, name))
            args += [result, int(ttl * 1000)]
        done: Any = await self._save(keys=keys, args=args)
        return bool(done == 1)

    def receipt_key(self, key: StateKey, name: str) -> str:
        """The Redis key of the result a save kept under *name* for *key*."""
        return f"{self.key(key)}:receipt:{name}"

    async def recall(self, key: StateKey, name: str) -> bytes | None:
        """A result a save kept (see `StateStore.recall`)."""
        found: Any = await self._recall(keys=[self.receipt_key(key, name)], args=[self._now()])
        return found  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Nothing to do: the client closes with `connect`'s block (or its owner's)."""
