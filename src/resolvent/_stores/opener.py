"""Opening a state store by URL (``memory:``, ``sqlite:///...``, ``redis://...``). A store's
module, and its client library, are imported only when a URL names it.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import AsyncGenerator

from .._errors import ResolventError
from . import StateStore

__all__ = ("open_store",)


@contextlib.asynccontextmanager
async def open_store(url: str = "memory:") -> AsyncGenerator[StateStore]:
    """Open the store a URL names, and close it on exit.

    - ``memory:`` — `MemoryStore`, this process only;
    - ``sqlite:///relative/path.db`` (from the current directory) or
      ``sqlite:////absolute/path.db`` — `SqliteStore`, shared by the processes of one
      host; the path is percent-decoded (``my%20cart.db`` is ``my cart.db``);
    - ``redis://HOST:PORT[/DB]`` (or ``rediss://``, ``valkey://``) —
      ``resolvent.redis.RedisStore``, shared by many hosts; needs
      ``pip install "resolvent[redis]"``.

    ```python
    @container.provider(scope=Scope.APP)
    async def store() -> AsyncIterator[StateStore]:
        async with open_store("sqlite:///state.db") as opened:
            yield opened
    ```

    Raises:
        ResolventError: the URL names no known store, or the store cannot be reached
            (the message names the URL and the cause).
    """
    scheme, _, rest = url.partition(":")
    scheme = scheme.lower()
    if scheme in ("redis", "rediss", "valkey", "valkeys"):
        try:
            from .redis import RedisStore
        except ImportError as exc:
            raise ResolventError(
                f"cannot open a Redis state store: the Redis store needs coredis ({exc}).\n"
                '  fix: pip install "resolvent[redis]"'
            ) from exc
        async with RedisStore.connect(url) as redis_store:
            yield redis_store
        return
    store = await _open(url, scheme, rest)
    try:
        yield store
    finally:
        await store.aclose()


async def _open(url: str, scheme: str, rest: str) -> StateStore:
    if scheme == "memory":
        from .memory import MemoryStore

        return MemoryStore()
    if scheme == "sqlite":
        if not rest.startswith("///") or len(rest) == 3:
            raise ResolventError(
                f"cannot open {url!r}: a SQLite URL has three slashes before a relative path "
                "and four before an absolute one.\n"
                "  fix: sqlite:///state.db or sqlite:////var/lib/app/state.db"
            )
        from .sqlite import SqliteStore

        # Percent-decoded, as a URL is: pydantic's AnyUrl writes "my cart.db" "my%20cart.db".
        return await SqliteStore.open(urllib.parse.unquote(rest[3:]))
    raise ResolventError(
        f"cannot open the state store {url!r}: unknown scheme {scheme!r}.\n"
        "  fix: use memory:, sqlite:///PATH or redis://HOST:PORT[/DB]"
    )
